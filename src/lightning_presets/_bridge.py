"""Registration of the catalog into Lightning's registries, and the factories that build strategies."""

from __future__ import annotations

import copy
import difflib
import importlib
import inspect
import threading
import warnings
from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import Any

from lightning_presets import _catalog
from lightning_presets._context import Options
from lightning_presets._errors import Finding, PresetConfigError, PresetWarning, report
from lightning_presets._guarded import GuardedFabricStrategy, GuardedTrainerStrategy
from lightning_presets._namespaces import NAMESPACES, Namespace, namespace_for_module, resolve_class
from lightning_presets._preset import Preset
from lightning_presets._rules import run_rules

_MARK = "__lightning_presets__"
_lock = threading.RLock()
_classes: dict[tuple[str, str], tuple[Preset, type]] = {}


# Strategies modules whose hook fired while this thread was loading the catalog (a preset module imported
# Lightning): they are registered once the catalog is ready, instead of waiting on the catalog's lock.
_deferred: list[ModuleType] = []
_loading = threading.local()


def strategy_catalog() -> _catalog.Catalog[Preset]:
    """The strategy presets of every trusted distribution, loaded once per process."""
    catalog = _catalog.cached(_catalog.STRATEGY_GROUP, _load_strategies)
    _register_deferred()
    return catalog


def _load_strategies() -> _catalog.Catalog[Preset]:
    _loading.active = True
    try:
        return _catalog.load(_catalog.STRATEGY_GROUP, Preset, "strategy")
    finally:
        _loading.active = False


def _register_deferred() -> None:
    with _lock:
        modules = list(_deferred)
        _deferred.clear()
    for module in modules:
        register_module(module)


def _base_class(preset: Preset, namespace: Namespace) -> type:
    spec = preset.strategy[namespace.kind]
    owner = f"preset {preset.name!r} ({namespace.kind} strategy class)"
    return resolve_class(spec, namespace.strategies_module, "Strategy", owner)


def guarded_class(preset: Preset, namespace: Namespace) -> type:
    """The preset's strategy class for a namespace: guards, then the family mixin, then Lightning's class.

    One class per (name, target) while the preset stays equal, so a strategy pickled for a spawned process
    comes back as the same class even after the catalog was loaded again.
    """
    key = (preset.name, namespace.target)
    with _lock:
        if key not in _classes or _classes[key][0] != preset:
            base = _base_class(preset, namespace)
            guards = GuardedTrainerStrategy if namespace.kind == "trainer" else GuardedFabricStrategy
            mixin = preset.mixins.get(namespace.kind)
            bases = (guards, mixin, base) if mixin else (guards, base)
            attributes = {
                "__module__": "lightning_presets",
                "__qualname__": base.__name__,
                "__doc__": f"{base.__name__} with the guards of the {preset.name!r} preset.",
                "_lp_preset": preset,
                "_lp_namespace": namespace,
            }
            _classes[key] = (preset, type(base.__name__, bases, attributes))
        return _classes[key][1]


def valid_override_keys(preset: Preset, namespace: Namespace) -> frozenset[str]:
    """The strategy constructor's named parameters, the preset's defaults and its extra keys."""
    base = _base_class(preset, namespace)
    parameters = inspect.signature(base).parameters.values()
    named = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"}
    return frozenset(named | set(preset.init_params) | preset.extra_keys)


def _unknown_keys(preset: Preset, namespace: Namespace, overrides: Mapping[str, Any]) -> list[Finding]:
    valid = valid_override_keys(preset, namespace)
    findings = []
    for key in sorted(set(overrides) - valid):
        close = difflib.get_close_matches(key, sorted(valid), n=1)
        maybe = f"did you mean {close[0]!r}? " if close else ""
        findings.append(
            Finding(
                code="LP006",
                severity="error",
                message=f"`lightning_presets.strategy({preset.name!r}, {key}=...)`: {key!r} is not an argument "
                f"of the {preset.name!r} preset for target={namespace.target!r}",
                hint=f"{maybe}valid keys: {', '.join(sorted(valid))}",
            )
        )
    return findings


def _requirement_findings(preset: Preset, namespace: Namespace) -> list[Finding]:
    """Missing (LP007), broken or version-mismatched optional dependencies, before Lightning imports them."""
    from lightning_presets import _requirements

    return _requirements.findings(preset.requires, f"{namespace.caller}(strategy={preset.name!r})")


def build(preset: Preset, namespace: Namespace, overrides: Mapping[str, Any]) -> Any:
    """Check the arguments, then build a fresh guarded strategy instance (never a shared one)."""
    if namespace.kind not in preset.strategy:
        available = ", ".join(preset.targets)
        raise PresetConfigError(
            [
                Finding(
                    code="LP008",
                    severity="error",
                    message=f"preset {preset.name!r} has no {namespace.caller} form (target={namespace.target!r})",
                    hint=f"use it with one of its targets: {available}",
                )
            ]
        )
    report(_requirement_findings(preset, namespace) + _unknown_keys(preset, namespace, overrides), stacklevel=4)
    values = {**copy.deepcopy(dict(preset.init_params)), **overrides}
    options = Options(
        preset=preset.name,
        target=namespace.target,
        values=MappingProxyType(values),
        overrides=MappingProxyType(dict(overrides)),
    )
    report(run_rules(preset.rules, "options", options), stacklevel=4)
    kwargs = preset.prepare(namespace.kind, dict(values)) if preset.prepare else dict(values)
    instance = guarded_class(preset, namespace)(**kwargs)
    instance._lp_options = options.values
    return instance


def _factory(preset: Preset, namespace: Namespace) -> Callable[..., Any]:
    def factory(**init_params: Any) -> Any:
        return build(preset, namespace, init_params)

    factory.__name__ = factory.__qualname__ = preset.name
    factory.__doc__ = preset.description
    setattr(factory, _MARK, preset.name)
    return factory


def is_ours(registry: dict[str, Any], name: str) -> bool:
    entry = dict.get(registry, name)
    return isinstance(entry, dict) and getattr(entry.get("strategy"), _MARK, None) == name


def register_into(registry: Any, namespace: Namespace) -> list[Finding]:
    """Register every usable preset of the namespace's kind; idempotent, never overrides others."""
    findings = []
    with _lock:
        for name, preset in strategy_catalog().presets.items():
            if namespace.kind not in preset.strategy or is_ours(registry, name):
                continue
            if name in registry:
                findings.append(
                    Finding(
                        code="LP002",
                        severity="error",
                        message=f"strategy preset {name!r} from {preset.distribution} is not registered into "
                        f"{namespace.strategies_module}: the name is taken there already",
                        hint=f"rename the preset in {preset.distribution}",
                    )
                )
                continue
            registry.register(name, _factory(preset, namespace), description=preset.description)
    return findings


def register_module(module: ModuleType) -> None:
    """Called by the start-up hook once a Lightning strategies module has been executed."""
    namespace = namespace_for_module(module.__name__)
    if namespace is None:
        return
    if getattr(_loading, "active", False):
        with _lock:
            _deferred.append(module)
        return
    registry = getattr(module, namespace.registry_attr, None)
    if registry is not None:
        for finding in register_into(registry, namespace):  # a clash must never break `import lightning`
            warnings.warn(PresetWarning(finding), stacklevel=3)


def register_all() -> None:
    """Register into each namespace whose strategies module is importable (the explicit path)."""
    for namespace in NAMESPACES:
        try:
            module = importlib.import_module(namespace.strategies_module)
        except ImportError:
            continue
        register_module(module)
