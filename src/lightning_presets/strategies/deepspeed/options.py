"""The DeepSpeed presets' arguments as their rules and memory layout read them: :class:`DeepSpeedOptions` (the config
they build is :mod:`.config`'s view)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.context import Context, Options

OFFLOAD_DEVICE_KEYS = ("offload_optimizer_device", "offload_params_device")


@dataclass(frozen=True, slots=True)
class DeepSpeedOptions:
    """``DeepSpeedStrategy``'s arguments: each key, and Lightning's default when it is absent, once."""

    values: Mapping[str, Any]
    """The preset's arguments (defaults merged with the user's overrides), or a preset's ``init_params``."""

    @classmethod
    def of(cls, source: Options | Context | Mapping[str, Any]) -> DeepSpeedOptions:
        """The view of an :class:`Options`, a :class:`Context`'s options or a preset's ``init_params``."""
        if isinstance(source, Options):
            return cls(source.values)
        return cls(source.options if isinstance(source, Context) else source)

    @property
    def stage(self) -> Any:
        """``stage`` as written; Lightning's 2 when absent."""
        return self.values.get("stage", 2)

    @property
    def offload_optimizer(self) -> bool:
        return bool(self.values.get("offload_optimizer"))

    @property
    def offload_parameters(self) -> bool:
        return bool(self.values.get("offload_parameters"))

    @property
    def checkpoint_blocks(self) -> Any:
        """The preset's own ``checkpoint_blocks``: the module classes whose activations it checkpoints; ``None``: the
        model's repeated blocks."""
        return self.values.get("checkpoint_blocks")

    @property
    def offload_devices(self) -> dict[str, Any]:
        """``offload_optimizer_device`` and ``offload_params_device`` as written; Lightning's ``"cpu"`` when absent."""
        return {key: self.values.get(key, "cpu") for key in OFFLOAD_DEVICE_KEYS}
