"""``F.scaled_dot_product_attention`` planned as CUDA runs it, on a CPU trace.

Which kernel runs, and so what is kept for backward, depends on the device. On CPU, torch takes its flash
kernel only without dropout and falls back to the math path otherwise, which keeps the attention matrices
(batch × heads × length², several of them). On a CUDA GPU of compute capability 8.0 or more, torch picks
FlashAttention-2 for fp16/bf16 without an explicit mask and head dimensions up to 256, and the
memory-efficient kernel for most of the rest (fp32, an explicit mask): both keep only the inputs, the output
and one fp32 log-sum-exp per query row (the dropout mask is regenerated from the RNG state), and neither
materialises an attention matrix. :class:`CudaAttention`, put in place of ``F.scaled_dot_product_attention``
for the whole step (a torch function mode would not be active when checkpointed blocks are recomputed in
backward), calls those CUDA operators themselves (``aten._scaled_dot_product_flash_attention``,
``aten._scaled_dot_product_efficient_attention``): under fake tensors only their shape functions run, so what
autograd keeps for backward is torch's own definition of those kernels'. Calls neither kernel takes run
torch's math path.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch

_HALF = (torch.float16, torch.bfloat16)
FLASH_MAX_HEAD_DIM = 256
"""FlashAttention-2's largest head dimension (torch's ``check_head_dim_size_flash``)."""
_NAMES = {"flash": "FlashAttention-2", "efficient": "the memory-efficient kernel", "math": "the math path"}


def cuda_kernel(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None) -> str:
    """The kernel torch's dispatcher takes on CUDA (compute capability 8.0+): ``flash``, ``efficient`` or ``math``.

    Flash: fp16/bf16, no explicit mask, head dimension ≤ 256 (grouped-query heads natively). Memory-efficient:
    fp16/bf16/fp32 with an aligned head dimension and as many key heads as query heads.
    """
    head_dim, grouped = query.shape[-1], key.shape[-3] != query.shape[-3]
    if query.dtype in _HALF and mask is None and head_dim <= FLASH_MAX_HEAD_DIM:
        return "flash"
    if query.dtype in (*_HALF, torch.float32) and not grouped and head_dim % (8 if query.dtype in _HALF else 4) == 0:
        return "efficient"
    return "math"


class CudaAttention:
    """``F.scaled_dot_product_attention`` as CUDA's operator for each call keeps memory; ``kernels`` counts them."""

    def __init__(self, original: Callable[..., Any]) -> None:
        self.original = original
        self.kernels: Counter[str] = Counter()

    def __call__(self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                 attn_mask: torch.Tensor | None = None, dropout_p: float = 0.0, is_causal: bool = False,
                 scale: float | None = None, enable_gqa: bool = False) -> Any:  # fmt: skip
        from torch.distributed.tensor import DTensor
        from torch.nn.attention import SDPBackend, sdpa_kernel

        given = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale, enable_gqa=enable_gqa)
        tensors = [query, key, value, *(() if attn_mask is None else (attn_mask,))]
        if any(isinstance(each, DTensor) or each.is_nested for each in tensors):
            return self.original(query, key, value, **given)  # torch's own dispatch for these
        if torch.is_autocast_enabled("cpu"):  # autocast casts attention's inputs to its dtype, on CUDA as here
            dtype = torch.get_autocast_dtype("cpu")
            query, key, value = (each.to(dtype) if each.is_floating_point() else each for each in (query, key, value))
        kernel = cuda_kernel(query, key, attn_mask)
        self.kernels[kernel] += 1
        with torch.autocast("cpu", enabled=False):
            if kernel == "flash":
                return torch.ops.aten._scaled_dot_product_flash_attention(
                    query, key, value, dropout_p, is_causal, False, scale=scale)[0]  # fmt: skip
            if kernel == "efficient":
                bias = attn_mask
                if bias is not None and bias.dtype == torch.bool:  # as torch converts a boolean mask for it
                    bias = torch.zeros_like(bias, dtype=query.dtype).masked_fill_(bias.logical_not(), float("-inf"))
                elif bias is not None:
                    bias = bias.to(query.dtype)
                grad = torch.is_grad_enabled() and any(each.requires_grad for each in (query, key, value))
                return torch.ops.aten._scaled_dot_product_efficient_attention(
                    query, key, value, bias, grad, dropout_p, is_causal, scale=scale)[0]  # fmt: skip
        with sdpa_kernel([SDPBackend.MATH]):
            return self.original(query, key, value, **given)

    def describe(self) -> str | None:
        """What the attention calls were planned as, for the plan's evidence (None: there were none)."""
        if not self.kernels:
            return None
        kernels = " and ".join(_NAMES[kernel] for kernel in sorted(self.kernels))
        return (f"attention: F.scaled_dot_product_attention planned as CUDA (compute capability 8.0+) runs it: "
                f"{kernels}; the fused kernels keep the inputs, the output and a log-sum-exp, no attention "
                "matrix")  # fmt: skip
