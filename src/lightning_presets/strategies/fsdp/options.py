"""The FSDP presets' arguments as their rules, hooks and memory layout read them: :class:`FSDPOptions`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.context import Context, Options


@dataclass(frozen=True, slots=True)
class FSDPOptions:
    """The FSDP presets' arguments as their rules, hooks and memory layout read them: each key, and what its absence
    means, once (the FSDP family's options view)."""

    values: Mapping[str, Any]
    """The preset's arguments (defaults merged with the user's overrides), or a preset's ``init_params``."""

    @classmethod
    def of(cls, source: Options | Context | Mapping[str, Any]) -> FSDPOptions:
        """The view of an :class:`Options`, a :class:`Context`'s options or the arguments a strategy was built with."""
        if isinstance(source, Options):
            return cls(source.values)
        return cls(source.options if isinstance(source, Context) else source)

    @property
    def sharding_strategy(self) -> Any:
        """``sharding_strategy`` as written (a name or torch's enum member); ``None`` when absent."""
        return self.values.get("sharding_strategy")

    @property
    def sharding(self) -> str:
        """The sharding strategy's name in upper case; Lightning's ``FULL_SHARD`` when absent."""
        written = self.values.get("sharding_strategy", "FULL_SHARD")
        return str(getattr(written, "name", written)).upper()

    @property
    def device_mesh(self) -> Any:
        """``device_mesh`` as written; ``None`` when absent."""
        return self.values.get("device_mesh")

    @property
    def use_orig_params(self) -> Any:
        return self.values.get("use_orig_params")

    @property
    def cpu_offload(self) -> bool:
        """Whether ``cpu_offload`` offloads (``True`` or a ``CPUOffload``)."""
        return bool(self.values.get("cpu_offload"))

    @property
    def auto_wrap_policy(self) -> Any:
        """``auto_wrap_policy``; ``None``: the preset wraps the model's repeated blocks."""
        return self.values.get("auto_wrap_policy")

    @property
    def checkpointing_chosen(self) -> bool:
        """Whether the user chose the activation checkpointing (``activation_checkpointing_policy`` or
        ``activation_checkpointing``); else the preset checkpoints the repeated blocks."""
        return self.values.get("activation_checkpointing_policy") is not None or (
            self.values.get("activation_checkpointing") is not None
        )
