"""The DDP presets' arguments as their rules and hooks read them: :class:`DDPOptions`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.context import Context, Options

_STATIC_GRAPH_KEYS = ("static_graph", "gradient_as_bucket_view")


@dataclass(frozen=True, slots=True)
class DDPOptions:
    """The DDP presets' arguments as their rules and hooks read them: each key, and what its absence means, once
    (the options view of the DDP family, as :class:`~lightning_presets.strategies.deepspeed.config.DeepSpeedConfigView`
    is DeepSpeed's config view)."""

    values: Mapping[str, Any]
    """The preset's arguments (defaults merged with the user's overrides)."""

    @classmethod
    def of(cls, source: Options | Context | Mapping[str, Any]) -> DDPOptions:
        """The view of an :class:`Options`, a :class:`Context`'s options or the arguments a strategy was built with."""
        if isinstance(source, Options):
            return cls(source.values)
        return cls(source.options if isinstance(source, Context) else source)

    @property
    def static_graph(self) -> bool:
        """``static_graph=True``: DDP traces the graph once (absent: Lightning's default, off)."""
        return self.values.get("static_graph") is True

    @property
    def static_graph_turned_off(self) -> list[str]:
        """Which of ``static_graph`` and ``gradient_as_bucket_view`` were passed as anything but ``True`` (absent: the
        preset's ``True``)."""
        return [key for key in _STATIC_GRAPH_KEYS if self.values.get(key, True) is not True]

    @property
    def comm_hook(self) -> Any:
        """``ddp_comm_hook``; ``None`` when there is none."""
        return self.values.get("ddp_comm_hook")

    @property
    def comm_hook_removed(self) -> bool:
        """``ddp_comm_hook=None`` passed over a preset's hook."""
        return "ddp_comm_hook" in self.values and self.values["ddp_comm_hook"] is None

    @property
    def comm_state(self) -> Any:
        """``ddp_comm_state``: the hook's state (Fabric's preset registers it with the hook)."""
        return self.values.get("ddp_comm_state")

    @property
    def model_averaging_period(self) -> Any:
        return self.values.get("model_averaging_period")

    @property
    def process_group_backend(self) -> Any:
        return self.values.get("process_group_backend")
