"""Preset names: which names are valid, which ones Lightning holds itself, and the suggestions and LP010 for a name
that is neither.

Lightning's own strategy names are read from its registries (``StrategyRegistry`` of the Trainer,
``STRATEGY_REGISTRY`` of Fabric): the entries whose strategy Lightning's own package defines, so neither ours nor
anyone else's, plus ``"auto"``. Both registries count, one of each kind: the Trainer's and Fabric's names differ
(``dp`` is Fabric's, ``single_device`` the Trainer's). Reading a registry imports its strategies module, which imports
Lightning (seconds); so :func:`lightning_builtin_names` reads the modules already imported unless ``read_missing``,
and the catalog asks it to import the missing ones only where it loads a third party's strategy entry points (under
its loading lock, where a preset module may import Lightning too: the start-up hook's registrations wait for the load
meanwhile). Our own entries load without Lightning (:func:`~lightning_presets.registry.catalog.builtin_entries`), so
they are checked against the registries already imported; none of our names is Lightning's (a test checks it). The
bridge's stand-ins (:mod:`~lightning_presets.registry.bridge`) never import: by the time one is registered for a third
party's name, that catalog load has read Lightning's names.
"""

from __future__ import annotations

import difflib
import importlib
import re
import sys
import threading
from typing import Any

from lightning_presets.core.environment import normalize_distribution
from lightning_presets.core.findings import PresetConfigError
from lightning_presets.core.namespaces import NAMESPACES, Namespace, fabric_package
from lightning_presets.registry import codes

AUTO = "auto"
"""Lightning's own choice of a strategy: a name no registry holds, which a preset may not take either."""
_NAME = re.compile(r"[a-z][a-z0-9_\-]*")
_read: list[frozenset[str]] = []  # Lightning's names, once both kinds of registry have been read
_reading = threading.Lock()


def is_valid_name(name: object) -> bool:
    """Whether ``name`` can be a preset name: lower-case letters, digits, ``_`` or ``-``, starting with a letter."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def lightnings_own(namespace: Namespace, registry: dict[Any, Any]) -> set[str]:
    """The names of ``registry`` whose strategy Lightning's own package defines (ours and others' left out)."""
    packages = tuple(f"{package.partition('.')[0]}." for package in (namespace.package, fabric_package(namespace)))
    names = set()
    for name, entry in list(dict.items(registry)):  # dict's own view: a registry subclass may override items()
        strategy = entry.get("strategy") if isinstance(entry, dict) else None
        module = getattr(strategy, "__module__", None)
        if isinstance(name, str) and isinstance(module, str) and module.startswith(packages):
            names.add(name)
    return names


def _registry(namespace: Namespace, *, read_missing: bool) -> dict[Any, Any] | None:
    """The namespace's registry: imported (waiting for another thread's import of it to end) with ``read_missing``,
    else only when its module is imported already."""
    module = sys.modules.get(namespace.strategies_module)
    if read_missing:
        try:
            module = importlib.import_module(namespace.strategies_module)
        except Exception:  # not installed, or broken: another namespace of the same kind may do
            return None
    registry = getattr(module, namespace.registry_attr, None)
    return registry if isinstance(registry, dict) else None


def _unified(namespace: Namespace) -> bool:
    return namespace.package.startswith("lightning.")


def _candidates(kind: str) -> list[Namespace]:
    """The namespaces of one kind: those already imported first, then those of the family already imported (the
    unified ``lightning`` package or the standalone ones), where importing costs the least."""
    families = {_unified(namespace) for namespace in NAMESPACES if namespace.package in sys.modules}

    def order(namespace: Namespace) -> tuple[bool, bool]:
        return namespace.strategies_module not in sys.modules, _unified(namespace) not in families

    return sorted((namespace for namespace in NAMESPACES if namespace.kind == kind), key=order)


def lightning_builtin_names(*, read_missing: bool = False) -> frozenset[str]:
    """The strategy names Lightning registers itself, in the Trainer's and Fabric's registries, plus ``"auto"``.

    Read from the registries of the strategies modules already imported; ``read_missing`` imports one of each kind
    that is missing (Lightning itself: seconds, and never from inside the start-up hook's registration). Once a
    registry of each kind has been read, the names are kept for the process.
    """
    if _read:
        return _read[0]
    names = {AUTO}
    kinds = 0
    for kind in ("trainer", "fabric"):
        for namespace in _candidates(kind):
            registry = _registry(namespace, read_missing=read_missing)
            if registry is not None:
                names |= lightnings_own(namespace, registry)
                kinds += 1
                break
    found = frozenset(names)
    if kinds == 2 and read_missing:  # both kinds, each module imported completely: final
        with _reading:
            if not _read:
                _read.append(found)
        return _read[0]
    return found


def suggested_name(name: str, distribution: str) -> str:
    """A valid preset name close to ``name`` that is not Lightning's, prefixed by the distribution when needed."""
    cleaned = re.sub(r"[^a-z0-9_-]+", "_", name.lower()).strip("_-")
    prefix = re.sub(r"[^a-z0-9]+", "_", normalize_distribution(distribution)).strip("_")
    if not prefix or not prefix[0].isalpha():
        prefix = "team"
    if is_valid_name(cleaned) and cleaned not in lightning_builtin_names():
        return cleaned
    return f"{prefix}_{cleaned}" if cleaned else f"{prefix}_preset"


def unknown_name(name: str, available: list[str], noun: str) -> PresetConfigError:
    """LP010, with the closest names and every name that exists."""
    close = difflib.get_close_matches(name, available, n=3)
    maybe = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    return PresetConfigError(
        [
            codes.UNKNOWN_PRESET.finding(
                f"`lightning_presets.{noun}({name!r})`: no {noun} preset is called {name!r}",
                f"{maybe}available: {', '.join(available) or 'none'} (`lightning-presets list` shows all)",
            )
        ]
    )
