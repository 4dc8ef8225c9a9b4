"""The head every precision-preset plugin class starts with: it remembers its preset and checks the GPU again."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, cast

from lightning_presets.core import hardware
from lightning_presets.core.context import PrecisionContext
from lightning_presets.core.findings import report
from lightning_presets.core.mixins import Next
from lightning_presets.core.namespaces import Namespace
from lightning_presets.core.preset import PrecisionPreset
from lightning_presets.core.rules import Rule, run_rules
from lightning_presets.guards.precision_rules import hardware_rules, with_hardware_rules

if TYPE_CHECKING:
    from torch import nn

    from lightning_presets.registry.build import Heads


def visible_cuda_devices() -> int:
    """How many CUDA devices Lightning sees (fork-safe NVML count; simulated when a simulation is active)."""
    from lightning.fabric.accelerators.cuda import num_cuda_devices

    return int(num_cuda_devices())


def runtime_capability() -> tuple[int, int] | None:
    """In a worker that is about to use CUDA anyway: the current device's capability, or ``None`` without CUDA."""
    simulated = hardware.current()
    if simulated is not None:
        return simulated.capability if simulated.count > 0 else None
    import torch

    if not torch.cuda.is_available():
        return None
    major, minor = torch.cuda.get_device_capability()
    return (int(major), int(minor))


def hardware_context(preset: PrecisionPreset, target: str, values: Mapping[str, Any], when: str) -> PrecisionContext:
    """The snapshot precision guards read: arguments plus visible CUDA devices and their capability."""
    devices = visible_cuda_devices()
    capability = None
    if devices:
        capability = hardware.observed_capability() if when == "built" else runtime_capability()
    return PrecisionContext(
        preset=preset.name,
        target=target,
        values=MappingProxyType(dict(values)),
        cuda_devices=devices,
        capability=capability,
        when=when,
        requirement=preset,
    )


class PresetPrecision(Next):
    """Remembers its preset (guards across presets read it) and checks the GPU again before converting.

    ``convert_module`` runs in the training process, once the device is in use, so the compute capability
    that was unknown when the plugin was built is read for real there: FP8 never silently falls back.
    The registry composes the class and sets the class attributes below.
    """

    _lp_preset: ClassVar[PrecisionPreset]
    _lp_rebuild: ClassVar[Any]
    _lp_rebuild_args: ClassVar[tuple[Any, ...]]
    _lp_precision_context: PrecisionContext | None = None

    # --- what the registry's build asks of a head (registry.build.Head) ---------------------------------

    @classmethod
    def _lp_usage(cls, preset: PrecisionPreset, namespace: Namespace) -> str:
        return f"lightning_presets.precision({preset.name!r})"

    @classmethod
    def _lp_options_context(
        cls, preset: PrecisionPreset, namespace: Namespace, values: Mapping[str, Any], overrides: Mapping[str, Any]
    ) -> PrecisionContext:
        return hardware_context(preset, namespace.target, values, "built")

    @classmethod
    def _lp_options_rules(cls, preset: PrecisionPreset) -> tuple[Rule, ...]:
        return with_hardware_rules(preset)

    @classmethod
    def _lp_attach(cls, instance: Any, context: PrecisionContext) -> None:
        instance._lp_precision_context = context

    # --- behaviour ----------------------------------------------------------------------------------------

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by preset name and target; the context travels as plain fields (the preset is found again)."""
        state = {key: value for key, value in self.__dict__.items() if key != "_lp_precision_context"}
        context = self._lp_precision_context
        if context is not None:
            fields = {field.name: getattr(context, field.name) for field in dataclasses.fields(context)}
            fields["values"] = dict(context.values)
            fields.pop("requirement")
            state["_lp_context_fields"] = fields
        return (type(self)._lp_rebuild, type(self)._lp_rebuild_args, state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        fields = state.pop("_lp_context_fields", None)
        self.__dict__.update(state)
        if fields is not None:
            self._lp_precision_context = PrecisionContext(**fields, requirement=self._lp_preset)

    def convert_module(self, module: nn.Module) -> nn.Module:
        built = self._lp_precision_context
        if built is not None:
            preset = self._lp_preset
            context = hardware_context(preset, built.target, built.values, "converting")
            hardware = run_rules(hardware_rules(preset), "options", context)
            report([*hardware, *run_rules(preset.rules, "setup", context, module)])
        return cast("nn.Module", super().convert_module(module))


HEADS: Heads = MappingProxyType({"trainer": PresetPrecision, "fabric": PresetPrecision})
"""The head of every precision preset plugin class, by kind."""
