"""Behaviour every plugin built from a precision preset shares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lightning_presets._errors import report
from lightning_presets._rules import run_rules

if TYPE_CHECKING:
    from torch import nn

    from lightning_presets._precision import PrecisionContext, PrecisionPreset


def rebuild(name: str, target: str, context: dict[str, Any], state: dict[str, Any]) -> Any:
    """Unpickle a preset plugin: its class is made at run time, so it is found again through the catalog."""
    from lightning_presets._namespaces import namespace_for_target
    from lightning_presets._precision import PrecisionContext, get_precision_preset, plugin_class

    preset = get_precision_preset(name)
    cls: Any = plugin_class(preset, namespace_for_target(target))
    plugin = cls.__new__(cls)
    plugin.__dict__.update(state)
    plugin._lp_precision_preset = preset
    plugin._lp_precision_context = PrecisionContext(**context, requirement=preset)
    return plugin


class PresetPrecision:
    """Remembers its preset (guards across presets read it) and checks the GPU again before converting.

    ``convert_module`` runs in the training process, once the device is in use, so the compute capability
    that was unknown when the plugin was built is read for real there: FP8 never silently falls back.
    """

    _lp_precision_preset: PrecisionPreset | None = None
    _lp_precision_context: PrecisionContext | None = None

    def _lp_runtime_context(self) -> PrecisionContext | None:
        from lightning_presets._precision import hardware_context

        preset, built = self._lp_precision_preset, self._lp_precision_context
        if preset is None or built is None:
            return None
        return hardware_context(preset, built.target, built.values, "converting")

    def __reduce__(self) -> str | tuple[Any, ...]:
        preset, context = self._lp_precision_preset, self._lp_precision_context
        if preset is None or context is None:
            return super().__reduce__()
        state = {key: value for key, value in self.__dict__.items() if not key.startswith("_lp_")}
        fields = {
            "preset": context.preset,
            "target": context.target,
            "values": dict(context.values),
            "cuda_devices": context.cuda_devices,
            "capability": context.capability,
            "when": context.when,
        }
        return (rebuild, (preset.name, context.target, fields, state))

    def convert_module(self, module: nn.Module) -> nn.Module:
        from lightning_presets._precision import HARDWARE_RULES

        context = self._lp_runtime_context()
        preset = context.requirement if context is not None else None
        if context is not None and preset is not None:
            report([*run_rules(HARDWARE_RULES, "options", context), *run_rules(preset.rules, "setup", context, module)])
        return super().convert_module(module)  # type: ignore[misc,no-any-return]
