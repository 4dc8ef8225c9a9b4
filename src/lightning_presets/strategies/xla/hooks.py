"""The XLA FSDP preset's lifecycle hooks (the mixin): the repeated blocks wrapped and checkpointed."""

from __future__ import annotations

from typing import cast

from torch import nn

from lightning_presets.guards.strategy import PresetHooks
from lightning_presets.inspection.blocks import find_repeated_blocks
from lightning_presets.registry import private


class XLAFSDPFabricHooks(PresetHooks):
    """Wraps and checkpoints the model's repeated blocks when no policy was given."""

    def setup_module(self, module: nn.Module) -> nn.Module:
        self._lp_check_setup(module)
        blocks = find_repeated_blocks(module)
        auto_wrap, checkpointing = private.xla_fsdp_policies(self)
        if blocks and checkpointing is None:
            private.set_xla_fsdp_policies(
                self, auto_wrap=set(blocks) if auto_wrap is None else auto_wrap, checkpointing=set(blocks)
            )
        return cast(nn.Module, super().setup_module(module))
