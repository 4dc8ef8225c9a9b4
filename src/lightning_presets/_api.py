"""The Python API: build a guarded strategy or precision plugin from a preset name, and look presets up."""

from __future__ import annotations

from typing import Any

from lightning_presets.core.namespaces import namespace_for_target
from lightning_presets.core.preset import PrecisionPreset, Preset
from lightning_presets.guards import precision as precision_guards
from lightning_presets.guards import strategy as strategy_guards
from lightning_presets.registry import catalog
from lightning_presets.registry.build import build


def get_preset(name: str) -> Preset:
    """The strategy preset called ``name``; an unknown or unusable name raises :class:`PresetConfigError`."""
    return catalog.get(Preset, name)


def strategy(name: str, *, target: str = "trainer", **overrides: Any) -> Any:
    """A guarded strategy instance of preset ``name`` for ``target``, with validated ``overrides``.

    ``target`` is ``"trainer"``, ``"fabric"``, ``"pytorch_lightning"`` or ``"lightning_fabric"``.
    Pass the result as ``Trainer(strategy=...)`` / ``Fabric(strategy=...)``; the guards run again
    once the Trainer or Fabric has set the accelerator, devices, nodes and precision.
    """
    namespace = namespace_for_target(target)
    return build(get_preset(name), namespace, overrides, strategy_guards.HEADS)


def precision(name: str, *, target: str = "trainer", **overrides: Any) -> Any:
    """A precision plugin instance of preset ``name`` for ``target``, for ``Trainer(plugins=[...])``.

    ``target`` is ``"trainer"``, ``"fabric"``, ``"pytorch_lightning"`` or ``"lightning_fabric"``. Raises
    :class:`PresetConfigError` for a missing dependency, an unknown argument, or hardware the preset cannot
    use; combined with a strategy preset, the guards across both run again while the Trainer is built.
    """
    namespace = namespace_for_target(target)
    return build(catalog.get(PrecisionPreset, name), namespace, overrides, precision_guards.HEADS)


def presets() -> dict[str, Preset]:
    """Every usable strategy preset by name (built-in and third-party)."""
    return dict(catalog.strategy_catalog().presets)
