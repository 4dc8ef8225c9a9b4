"""Registration of the strategy catalog into Lightning's four registries, as factories that build guarded strategies."""

from __future__ import annotations

import importlib
import sys
import threading
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any

from lightning_presets.core.findings import Finding
from lightning_presets.core.namespaces import NAMESPACES, Namespace, namespace_for_module
from lightning_presets.core.preset import Preset
from lightning_presets.registry import catalog, codes
from lightning_presets.registry.build import Heads, build
from lightning_presets.registry.catalog import Entry
from lightning_presets.registry.classes import unresolved

_MARK = "__lightning_presets__"
_UNUSABLE = "__lightning_presets_unusable__"
_lock = threading.RLock()


def _marked(factory: Callable[..., Any], name: str, description: str, *, usable: bool) -> Callable[..., Any]:
    factory.__name__ = factory.__qualname__ = name
    factory.__doc__ = description
    setattr(factory, _MARK, name)
    setattr(factory, _UNUSABLE, not usable)
    return factory


def _factory(preset: Preset, namespace: Namespace, heads: Heads) -> Callable[..., Any]:
    def factory(**init_params: Any) -> Any:
        return build(preset, namespace, init_params, heads)

    return _marked(factory, preset.name, preset.description, usable=True)


def _stand_in(name: str, namespace: Namespace, heads: Heads) -> Callable[..., Any]:
    """For a name the catalog cannot use (denied, broken, refused, contested): ``Trainer(strategy=name)`` raises the
    catalog's own findings for it (LP015 when the trust variables leave it out) instead of Lightning's "invalid
    strategy name". Looked up when called: a preset that became usable since (a new catalog) is built."""

    def factory(**init_params: Any) -> Any:
        return build(catalog.get(Preset, name), namespace, init_params, heads)

    return _marked(factory, name, f"{name}: not usable here (`lightning-presets list` says why)", usable=False)


def _ours(registry: dict[str, Any], name: str) -> Any:
    """Our factory registered under ``name``, or ``None``."""
    entry = dict.get(registry, name)
    factory = entry.get("strategy") if isinstance(entry, dict) else None
    return factory if getattr(factory, _MARK, None) == name else None


def is_ours(registry: dict[str, Any], name: str) -> bool:
    """Whether ``name`` holds the factory of a usable preset of ours (not a stand-in for an unusable one)."""
    return not getattr(_ours(registry, name), _UNUSABLE, True)


def _by_name(entries: Iterable[Entry[Preset]]) -> dict[str, Entry[Preset]]:
    """One entry per name: the usable one when there is one."""
    chosen: dict[str, Entry[Preset]] = {}
    for entry in entries:
        if entry.status == "ok" or entry.name not in chosen:
            chosen[entry.name] = entry
    return chosen


def register_into(
    registry: Any, namespace: Namespace, heads: Heads, entries: Sequence[Entry[Preset]] | None = None
) -> list[Finding]:
    """Register every preset of the namespace's kind (``entries``: the whole catalog by default); idempotent, never
    overrides others.

    A usable preset gets a factory that builds it; one whose class does not resolve in the namespace is reported
    (LP011) and building it raises that finding. A name the catalog cannot use (denied, broken, refused, contested)
    gets a stand-in that raises the catalog's findings, when the name is a valid one nobody else registered.
    """
    if entries is None:
        entries = catalog.strategy_catalog().entries  # before the lock: loading imports preset modules
    findings = []
    with _lock:
        for name, entry in _by_name(entries).items():
            preset = entry.item if entry.status == "ok" else None
            if (preset is not None and namespace.kind not in preset.kinds) or is_ours(registry, name):
                continue
            stand_in = _ours(registry, name) is not None
            if name in registry and not stand_in:
                if preset is not None:
                    findings.append(
                        codes.NAME_OF_LIGHTNING.finding(
                            f"strategy preset {name!r} from {preset.distribution} is not registered into "
                            f"{namespace.strategies_module}: the name is taken there already",
                            f"rename the preset in {preset.distribution}",
                        )
                    )
                continue
            if preset is None:
                if not stand_in and catalog.is_valid_name(name) and name not in catalog.lightning_builtin_names():
                    registry.register(name, _stand_in(name, namespace, heads), description="not usable")
                continue
            broken = unresolved(preset, namespace)
            if broken is not None:  # registered all the same: building it raises this finding, not Lightning's error
                findings.append(broken)
            # override only replaces our own stand-in (the preset became usable in a new catalog)
            registry.register(name, _factory(preset, namespace, heads), description=preset.description,
                              override=stand_in)  # fmt: skip
    return findings


def register_module(module: ModuleType, heads: Heads) -> None:
    """Register into one of Lightning's strategies modules once it has been executed (the start-up hook calls it).

    The built-in presets are registered now: they load without a third party's code or Lightning, so they are there
    when ``import lightning`` returns. Third parties' wait while a catalog is loading (a preset module imported
    Lightning, in this thread or another), and are registered when that load is done.
    """
    namespace = namespace_for_module(module.__name__)
    if namespace is None:
        return
    registry = getattr(module, namespace.registry_attr, None)
    if registry is None:
        return

    def register(entries: Sequence[Entry[Preset]]) -> None:
        for finding in register_into(registry, namespace, heads, entries):  # a clash must never break the import
            catalog.notify(finding, stacklevel=3)

    builtins = catalog.builtin_entries(Preset)
    register(builtins)
    done = {(entry.distribution, entry.name, entry.value) for entry in builtins}

    def register_the_others() -> None:  # ours are done (and reported) above, unless they could not load yet
        entries = catalog.strategy_catalog().entries
        register([entry for entry in entries if (entry.distribution, entry.name, entry.value) not in done])

    catalog.after_loading(register_the_others)


def register_all(heads: Heads) -> None:
    """Register into each namespace whose strategies module is importable (the explicit path)."""
    for namespace in NAMESPACES:
        try:
            module = importlib.import_module(namespace.strategies_module)
        except ImportError:
            continue
        register_module(module, heads)


def register_imported(heads: Heads) -> None:
    """Register into the strategies modules already imported, complete, that hold none of our names.

    The start-up hook registers as each module is imported; a meta-path finder put ahead of it that loads Lightning
    itself (an instrumenting import hook) can bypass it. ``import lightning_presets`` catches up with this.
    """
    for namespace in NAMESPACES:
        module = sys.modules.get(namespace.strategies_module)
        package = sys.modules.get(namespace.package)
        if module is None or package is None or getattr(getattr(package, "__spec__", None), "_initializing", False):
            continue
        registry = getattr(module, namespace.registry_attr, None)
        if isinstance(registry, dict) and not any(_ours(registry, name) is not None for name in list(registry)):
            register_module(module, heads)
