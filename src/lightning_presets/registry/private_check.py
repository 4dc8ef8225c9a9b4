"""Resolves the declarations of :mod:`lightning_presets.registry.private` against the installed releases.

An instance attribute (``use="attribute"``) is checked in the source of the class's ``__init__`` (Lightning sets it
there: ``self._launcher = None``); a class attribute, function or module is resolved by import and ``getattr``; a
``probe`` (a name whose absence marks an older release) only needs its owner. The ``pytorch_lightning`` and
``lightning_fabric`` twin of a ``lightning.*`` owner is checked too when it is installed.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable

from lightning_presets.registry.private import NAMES, Private

_TWINS = {"lightning.pytorch": "pytorch_lightning", "lightning.fabric": "lightning_fabric"}


def _twin(owner: str) -> str | None:
    for prefix, twin in _TWINS.items():
        if owner == prefix or owner.startswith(prefix + "."):
            return twin + owner[len(prefix) :]
    return None


def _sets_in_init(cls: type, name: str) -> bool:
    """Whether ``__init__`` of ``cls`` or of one of its bases assigns ``self.<name>`` (Lightning's instance state)."""
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        try:
            source = inspect.getsource(init)
        except (OSError, TypeError):  # a C type or a class without source: its attributes are not Lightning's
            continue
        if f"self.{name} =" in source or f"self.{name}:" in source or f'"{name}"' in source:
            return True
    return False


def resolve(entry: Private, owner: str | None = None) -> str | None:
    """``None`` when ``entry`` exists in the installed release (under ``owner``, default its own); else what is
    missing, in words."""
    owner = owner or entry.owner
    module_name, _, class_name = owner.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        return f"{module_name} cannot be imported ({error})"
    if class_name:
        target = getattr(target, class_name, None)
        if not isinstance(target, type):
            return f"{module_name} has no class {class_name}"
    if not entry.name or entry.use == "probe":  # a probe's absence is an answer (an older release), not a break
        return None
    if entry.use == "attribute":
        if isinstance(target, type) and (hasattr(target, entry.name) or _sets_in_init(target, entry.name)):
            return None
        return f"{owner} no longer sets {entry.name} in __init__"
    if not hasattr(target, entry.name):
        return f"{owner} has no {entry.name}"
    return None


def _installed(distribution: str) -> bool:
    try:
        importlib.import_module(distribution)
    except ImportError:
        return False
    return True


def missing(entries: Iterable[Private] = NAMES) -> list[str]:
    """What the installed releases lack of ``entries``: one line per entry and namespace (empty: all present)."""
    problems = []
    for entry in entries:
        if entry.optional and not _installed(entry.optional):
            continue
        owners = [entry.owner]
        twin = _twin(entry.owner)
        if twin is not None and _installed(twin.partition(".")[0].partition(":")[0]):
            owners.append(twin)
        for owner in owners:
            problem = resolve(entry, owner)
            if problem is not None:
                problems.append(f"{entry.label} ({entry.use}, used by {', '.join(entry.where)}): {problem}")
    return problems
