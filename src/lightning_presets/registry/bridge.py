"""Registration of the strategy catalog into Lightning's four registries, as factories that build guarded strategies."""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

from lightning_presets.core.findings import Finding
from lightning_presets.core.namespaces import NAMESPACES, Namespace, namespace_for_module
from lightning_presets.core.preset import Preset
from lightning_presets.registry import catalog, codes
from lightning_presets.registry.build import Heads, build
from lightning_presets.registry.classes import unresolved

_MARK = "__lightning_presets__"
_lock = threading.RLock()


def _factory(preset: Preset, namespace: Namespace, heads: Heads) -> Callable[..., Any]:
    def factory(**init_params: Any) -> Any:
        return build(preset, namespace, init_params, heads)

    factory.__name__ = factory.__qualname__ = preset.name
    factory.__doc__ = preset.description
    setattr(factory, _MARK, preset.name)
    return factory


def is_ours(registry: dict[str, Any], name: str) -> bool:
    entry = dict.get(registry, name)
    return isinstance(entry, dict) and getattr(entry.get("strategy"), _MARK, None) == name


def register_into(registry: Any, namespace: Namespace, heads: Heads) -> list[Finding]:
    """Register every usable preset of the namespace's kind; idempotent, never overrides others.

    A preset whose class does not resolve in the namespace (LP011) is left out: it would fail in
    ``Trainer(...)`` with a raw error instead.
    """
    presets = catalog.strategy_catalog().presets  # before the lock: loading imports preset modules
    findings = []
    with _lock:
        for name, preset in presets.items():
            if namespace.kind not in preset.kinds or is_ours(registry, name):
                continue
            if name in registry:
                findings.append(
                    codes.NAME_OF_LIGHTNING.finding(
                        f"strategy preset {name!r} from {preset.distribution} is not registered into "
                        f"{namespace.strategies_module}: the name is taken there already",
                        f"rename the preset in {preset.distribution}",
                    )
                )
                continue
            broken = unresolved(preset, namespace)
            if broken is not None:
                findings.append(broken)
                continue
            registry.register(name, _factory(preset, namespace, heads), description=preset.description)
    return findings


def register_module(module: ModuleType, heads: Heads) -> None:
    """Register into one of Lightning's strategies modules once it has been executed (the start-up hook calls it).

    While a catalog is loading (a preset module imported Lightning, in this thread or another), registration
    waits until that load is done.
    """
    namespace = namespace_for_module(module.__name__)
    if namespace is None:
        return
    registry = getattr(module, namespace.registry_attr, None)
    if registry is None:
        return

    def register() -> None:
        for finding in register_into(registry, namespace, heads):  # a clash must never break `import lightning`
            catalog.notify(finding, stacklevel=3)

    catalog.after_loading(register)


def register_all(heads: Heads) -> None:
    """Register into each namespace whose strategies module is importable (the explicit path)."""
    for namespace in NAMESPACES:
        try:
            module = importlib.import_module(namespace.strategies_module)
        except ImportError:
            continue
        register_module(module, heads)
