"""The catalog views: what ``list`` and ``show`` print about strategy presets and, when installed, precision presets.

``show`` adds each preset's arguments, guards, tested versions and the plain-Lightning equivalent (:func:`describe`).
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.environment import normalize_distribution
from lightning_presets.core.namespaces import NAMESPACES, constructor
from lightning_presets.registry import catalog, requirements
from lightning_presets.registry.build import accepted_overrides
from lightning_presets.registry.catalog import Entry
from lightning_presets.registry.classes import unresolved
from lightning_presets.registry.requirements import is_importable


@dataclass(frozen=True, slots=True)
class Listed:
    """One catalog entry as the commands show it."""

    kind: str
    """``strategy`` or ``precision``."""
    entry: Any
    """The catalog's :class:`~lightning_presets.registry.catalog.Entry`."""

    @property
    def item(self) -> Any:
        return self.entry.item

    def as_dict(self) -> dict[str, Any]:
        item = self.item
        requires = getattr(item, "requires", ()) or ()
        return {
            "name": self.entry.name,
            "kind": self.kind,
            "family": getattr(item, "family", None),
            "targets": list(getattr(item, "targets", ()) or ()),
            "extras": sorted({requirement.extra for requirement in requires}),
            "description": getattr(item, "description", None),
            "distribution": self.entry.distribution,
            "version": self.entry.version,
            "entry_point": self.entry.value,
            "status": self.entry.status,
            "findings": [finding.as_dict() for finding in self.entry.findings],
        }


def all_entries(*, dependencies: bool = True) -> list[Listed]:
    """Every entry of both groups, loaded or not (broken, refused, conflicting and denied ones included).

    A third party's usable entry is also checked against Lightning: a class that does not resolve marks it
    broken (LP011) here, as it would fail in ``Trainer(...)``. The built-ins' classes are checked by our tests,
    so ``list`` imports Lightning only when a third-party preset needs it. With ``dependencies``, a usable entry
    whose optional dependency cannot be imported is ``missing``, with LP007 and the line that installs it: the one
    answer ``list``, ``show`` and ``doctor`` give (found without importing the dependency).
    """
    with warnings.catch_warnings():  # the listing shows each problem; no need to warn as well
        warnings.simplefilter("ignore")
        listed = [Listed("strategy", _checked(entry)) for entry in catalog.strategy_catalog().entries]
        listed += [Listed("precision", _checked(entry)) for entry in catalog.precision_catalog().entries]
    if dependencies:
        listed = [dataclasses.replace(each, entry=_installed_dependencies(each)) for each in listed]
    return listed


def usable(kind: str = "strategy") -> dict[str, Any]:
    """The presets of a kind that are usable after the checks of :func:`all_entries`, by name."""
    return {each.entry.name: each.item for each in all_entries() if each.kind == kind and each.entry.status == "ok"}


def registered(kind: str = "strategy") -> dict[str, Any]:
    """The presets of a kind that the start-up hook registers in Lightning, by name: the usable ones and those
    whose optional dependency is missing (registered all the same; building one then raises LP007)."""
    entries = all_entries(dependencies=False)
    return {each.entry.name: each.item for each in entries if each.kind == kind and each.entry.status == "ok"}


def _installed_dependencies(listed: Listed) -> Entry[Any]:
    """The entry, ``missing`` with an LP007 finding per requirement that cannot be imported here."""
    entry: Entry[Any] = listed.entry
    item = listed.item
    if entry.status != "ok" or item is None:
        return entry
    missing = [each for each in getattr(item, "requires", ()) or () if not is_importable(each.module)]
    if not missing:
        return entry
    if listed.kind == "strategy":
        kind = "trainer" if "trainer" in item.strategy else "fabric"
        usage = f"{constructor(kind)}(strategy={entry.name!r})"
    else:
        usage = f"lightning_presets.precision({entry.name!r})"
    found = [requirements.finding(each, requirements.Probe(module=each.module, status="missing"), usage)
             for each in missing]  # fmt: skip
    return dataclasses.replace(entry, status="missing", findings=(*entry.findings, *filter(None, found)))


def _checked(entry: Entry[Any]) -> Entry[Any]:
    item = entry.item
    if entry.status != "ok" or item is None or normalize_distribution(entry.distribution) == catalog.OWN_DISTRIBUTION:
        return entry
    found = []
    for kind in item.kinds:
        namespace = next((ns for ns in NAMESPACES if ns.kind == kind and _installed(ns.package)), None)
        try:
            finding = unresolved(item, namespace) if namespace is not None else None
        except Exception:  # Lightning itself does not import: `doctor` reports that, not this preset
            finding = None
        if finding is not None:
            found.append(finding)
    if not found:
        return entry
    return dataclasses.replace(entry, status="broken", findings=(*entry.findings, *found))


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def find(name: str) -> Listed | None:
    return next((each for each in all_entries() if each.entry.name == name), None)


# --- show ------------------------------------------------------------------------------------------------------

_PACKAGES = {"trainer": "lightning.pytorch", "fabric": "lightning.fabric"}


def _literal(value: Any) -> str:
    """A value as Python source, strings in double quotes."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_literal(item) for item in value)) + "}" if value else "set()"
    if isinstance(value, type):
        return value.__name__
    if callable(value):
        return getattr(value, "__name__", "your_function")
    return repr(value)


def _defaults(cls: Any) -> dict[str, Any]:
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _class_spec(spec: str, package: str) -> tuple[str, str]:
    """(import line, class name) for a ``Preset.strategy`` value: a class name or ``module:attr``."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        return f"from {module} import {attr}", attr
    return f"from {package} import {spec}", spec


def _specs(item: Any) -> tuple[Mapping[str, str], str]:
    """(kind -> class spec, sub-package): a strategy preset's strategy classes or a precision preset's plugins."""
    if isinstance(getattr(item, "plugin", None), Mapping):
        return item.plugin, "plugins.precision"
    return getattr(item, "strategy", {}) or {}, "strategies"


BLOCK = "MyBlock"
"""The name the plain code gives the model's repeated block class, which the preset finds itself at setup."""
_AUTO_SOURCE = {"world": "num_nodes * devices", "one": "1", "nodes": "num_nodes", "devices": "devices"}
"""A preset's ``'auto'`` mesh size as source over the job's ``num_nodes`` and ``devices`` (per node)."""
_LIGHTNING_AUTO = ("nodes", "devices")
"""What Lightning's own ``'auto'`` means for a pair of sizes (``ModelParallelStrategy``): written as is."""


@dataclass(frozen=True, slots=True)
class Plain:
    """The plain-Lightning code for one kind, and what the preset does that no argument of that code expresses."""

    code: str
    missing: tuple[str, ...] = ()


def _hooks(item: Any, kind: str, class_name: str, values: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """(the arguments, as source, that the preset's hooks set when it builds or sets up the strategy; what its hooks
    do that the class takes no argument for). Read from the preset's declaration: its class, mesh and flags."""
    from lightning_presets.core.mesh import AUTO  # core: no Lightning import

    set_by_hooks: dict[str, str] = {}
    missing: list[str] = []
    mesh = getattr(item, "mesh", None)
    if mesh is not None and mesh.keys is not None and tuple(mesh.auto) != _LIGHTNING_AUTO:
        for key, meaning in zip(mesh.keys, mesh.auto, strict=True):
            if values.get(key) == AUTO:
                set_by_hooks[key] = _AUTO_SOURCE[meaning]
    if mesh is not None and mesh.pair_key is not None and values.get(mesh.pair_key) == AUTO:
        set_by_hooks[mesh.pair_key] = f"({', '.join(_AUTO_SOURCE[meaning] for meaning in mesh.auto)})"
    checkpoints = bool(getattr(item, "activation_checkpointing", False))
    if class_name in ("FSDPStrategy", "XLAFSDPStrategy"):
        if values.get("auto_wrap_policy") is None:
            set_by_hooks["auto_wrap_policy"] = f"{{{BLOCK}}}"
        if checkpoints and values.get("activation_checkpointing_policy") is None:
            set_by_hooks["activation_checkpointing_policy"] = f"{{{BLOCK}}}"
    elif class_name == "ModelParallelStrategy" and mesh is not None and tuple(mesh.auto) != _LIGHTNING_AUTO:
        offload = ", parameters offloaded to CPU (CPUOffloadPolicy)" if getattr(item, "cpu_offload", False) else ""
        checkpointing = ", each block's activations checkpointed" if checkpoints else ""
        missing.append(
            f"the preset shards the model itself at setup: fully_shard on each {BLOCK} and then on the root, over the "
            f"data-parallel mesh{offload}{checkpointing} (unless configure_model already did); ModelParallelStrategy "
            f"does none of this: do it in your LightningModule's configure_model"
            + (" (Fabric: in your parallelize function)" if kind == "fabric" else "")
        )
    if class_name == "DeepSpeedStrategy":
        missing.append(
            'the preset adds "zero_force_ds_cpu_optimizer": false to the config Lightning builds from these arguments '
            "(a torch optimizer then steps the offloaded state, warned as LP416, where DeepSpeed would refuse it); "
            "no argument sets it: pass a whole config= for it"
        )
    if class_name == "DeepSpeedStrategy" and checkpoints:
        missing.append(
            f"the preset wraps each {BLOCK} in non-reentrant activation checkpointing (torch's "
            "apply_activation_checkpointing with checkpoint_wrapper) at setup; DeepSpeedStrategy has no argument for "
            "it: apply it to your model before fit"
        )
    return set_by_hooks, missing


def plain(item: Any, kind: str) -> Plain | None:
    """The plain-Lightning code for one kind that builds the strategy (or plugin) the preset builds, with the
    arguments its hooks set filled in, and what its hooks do that no argument expresses; ``None`` when the preset has
    no form for ``kind``."""
    specs, subpackage = _specs(item)
    spec = specs.get(kind)
    if spec is None:
        return None
    package, built_by = _PACKAGES[kind], constructor(kind)
    import_line, class_name = _class_spec(spec, f"{package}.{subpackage}")
    declared = dict(getattr(item, "init_params", {}) or {})
    prepare = getattr(item, "prepare", None)
    values = prepare(kind, dict(declared)) if callable(prepare) else dict(declared)
    try:
        module_name, _, attr = import_line.removeprefix("from ").partition(" import ")
        cls = getattr(importlib.import_module(module_name), attr)
    except Exception:  # the class cannot be imported here (missing extra): keep every argument
        cls = None
    defaults = _defaults(cls) if cls is not None else {}
    takes = _takes(cls) if cls is not None else None
    missing: list[str] = []
    for key in declared.keys() - values.keys():
        if declared[key] is not None:
            missing.append(f"the preset sets {key}={_literal(declared[key])} itself after wrapping the model; "
                           f"{kind.capitalize()}'s {class_name} takes no {key}")  # fmt: skip
    set_by_hooks, hook_missing = _hooks(item, kind, class_name, values) if subpackage == "strategies" else ({}, [])
    missing += hook_missing
    mixin = getattr(item, "mixin", None)
    if isinstance(mixin, type) and mixin.__doc__:
        first = " ".join(mixin.__doc__.split("\n\n")[0].split()).replace("``", "`")
        missing.append(f"the preset's own plugin class ({mixin.__name__}) on top of {class_name}: {first}")
    shown = {key: value for key, value in values.items() if not (value is None and defaults.get(key) is None)}
    if takes is not None:
        for key in [key for key in shown if key not in takes]:
            missing.append(f"{key}={_literal(shown.pop(key))} goes to the preset's own plugin; {class_name} takes "
                           f"no {key}")  # fmt: skip
    functions = [key for key, value in shown.items() if callable(value) and not isinstance(value, type)]
    imports = sorted({line for key in functions if (line := _function_import(shown[key])) is not None})
    placeholders = [key for key in functions if _function_import(shown[key]) is None]
    sources = {key: key.removesuffix("_fn") if key in placeholders else _literal(value) for key, value in shown.items()}
    sources.update(set_by_hooks)
    arguments = ", ".join(f"{key}={source}" for key, source in sources.items())
    uses_torch = any(type(value).__module__ == "torch" for value in shown.values())
    lines = [*(["import torch"] if uses_torch else []), f"from {package} import {built_by}", import_line, *imports, ""]
    lines += [f"# {key.removesuffix('_fn')}: your function (see the preset's description)" for key in placeholders]
    if any(BLOCK in source for source in set_by_hooks.values()):
        lines.append(f"# {BLOCK}: your model's repeated block class (the preset finds it at setup: the class repeated "
                     "in the model's nn.ModuleList or nn.Sequential)")  # fmt: skip
    sizes = any("num_nodes" in source or "devices" in source for source in set_by_hooks.values())
    if sizes:
        lines.append("num_nodes, devices = 2, 8  # your job's (devices per node); the preset reads them from the "
                     f"{built_by}")  # fmt: skip
    variable, argument = (
        ("strategy", "strategy=strategy") if subpackage == "strategies" else ("plugin", "plugins=[plugin]")
    )
    if sizes:
        argument += ", num_nodes=num_nodes, devices=devices"
    lines += [
        f"{variable} = {class_name}({arguments})",
        f"{built_by.lower()} = {built_by}({argument})  # and your other arguments",
    ]
    return Plain("\n".join(lines), tuple(missing))


def plain_code(item: Any, kind: str) -> str | None:
    """The plain-Lightning code of :func:`plain` alone."""
    found = plain(item, kind)
    return None if found is None else found.code


def _takes(cls: Any) -> set[str] | None:
    """The keywords a class's constructor names, or ``None`` when it takes ``**kwargs`` (or cannot be read)."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in parameters):
        return None
    return {p.name for p in parameters}


def _function_import(function: Any) -> str | None:
    """``from module import name`` for a function importable under its own name (torch's comm hooks), else ``None``
    (a placeholder the user supplies)."""
    module, name = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    if not module or not name.isidentifier() or module.startswith("lightning_presets"):
        return None
    try:
        found = getattr(importlib.import_module(module), name, None)
    except Exception:
        return None
    return f"from {module} import {name}" if found is function else None


def _rules(item: Any) -> list[dict[str, str]]:
    return [
        {"code": rule.code, "severity": rule.severity, "stage": rule.stage, "title": rule.title}
        for rule in getattr(item, "rules", ()) or ()
    ]


def also_accepted(item: Any) -> dict[str, list[str]]:
    """Per kind, every override the preset takes besides its defaults: the Lightning constructor's named parameters
    (strategies) and the preset's extra keys, exactly what ``lightning_presets.strategy(name, **overrides)`` accepts."""
    accepted = {}
    for kind in getattr(item, "kinds", ()):
        namespace = next(each for each in NAMESPACES if each.kind == kind)
        try:
            keys = accepted_overrides(item, namespace).keys
        except Exception:  # the class cannot be imported here (a missing extra): the preset's own keys
            keys = frozenset(item.extra_keys)
        accepted[kind] = sorted(keys - set(item.init_params))
    return accepted


def describe(listed: Listed) -> dict[str, Any]:
    item = listed.item
    data = listed.as_dict()
    if item is None:
        return data
    init_params: Mapping[str, Any] = getattr(item, "init_params", {}) or {}
    plains = {kind: each for kind in ("trainer", "fabric") if (each := plain(item, kind)) is not None}
    data.update(
        {
            "classes": dict(_specs(item)[0]),
            "arguments": {key: _literal(value) for key, value in init_params.items()},
            "extra_keys": sorted(getattr(item, "extra_keys", ()) or ()),
            "also_accepted": also_accepted(item),
            "requires": [
                {"module": r.module, "extra": r.extra, "installed": r.is_installed()}
                for r in getattr(item, "requires", ()) or ()
            ],
            "guards": _rules(item),
            "tested_with": dict(getattr(item, "tested_with", {}) or {}),
            "plain_lightning": {kind: each.code for kind, each in plains.items()},
            "plain_lightning_missing": {kind: list(each.missing) for kind, each in plains.items()},
            "resumes": list(_resumable(data["family"])) if listed.kind == "strategy" else [],
        }
    )
    return data


def _resumable(family: str | None) -> tuple[str, ...]:
    from lightning_presets.guards.resume import resumable  # imports torch: only for a preset's full description

    return resumable(family)
