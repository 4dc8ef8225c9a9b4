"""The XLA FSDP preset's arguments as its rules read them: :class:`XLAFSDPOptions`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.context import Options


@dataclass(frozen=True, slots=True)
class XLAFSDPOptions:
    """The XLA FSDP preset's arguments as its rules read them (the family's options view)."""

    values: Mapping[str, Any]

    @classmethod
    def of(cls, options: Options) -> XLAFSDPOptions:
        return cls(options.values)

    @property
    def activation_checkpointing_policy(self) -> Any:
        """A set of module classes; ``None`` or empty: Lightning checkpoints nothing."""
        return self.values.get("activation_checkpointing_policy")

    @property
    def auto_wrapper_callable(self) -> Any:
        return self.values.get("auto_wrapper_callable")
