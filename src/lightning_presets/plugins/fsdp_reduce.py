"""FSDP mixed precision with bf16 parameters for compute and fp32 gradient reduction and buffers."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from lightning_presets.registry import compat


class BF16FP32ReducePrecision:
    """Placed before Lightning's ``FSDPPrecision("bf16-mixed")``: same autocast, safer reduction.

    Lightning's bf16-mixed FSDP policy reduces gradients and keeps buffers in bf16; summing many bf16
    gradient shards loses precision at scale, so this one reduces in fp32 and keeps buffers (e.g. norm
    statistics) in fp32, while parameters are still all-gathered and computed in bf16.
    """

    @property
    def mixed_precision_config(self) -> Any:
        import torch
        from torch.distributed.fsdp import MixedPrecision

        return MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, buffer_dtype=torch.float32)

    def module_init_context(self) -> AbstractContextManager[Any]:
        """Create modules in fp32 on every Lightning release (2.5 would use the bf16 parameter dtype: ``compat``)."""
        return compat.fsdp_module_init_context(self)
