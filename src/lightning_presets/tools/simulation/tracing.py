"""What the planner's fake-tensor trace patches in torch, so that tracing behaves as a real run would."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock


def _grouped_mm(fake_mode: Any, func: Any, mat_a: Any, mat_b: Any, offs: Any = None, bias: Any = None,
                out_dtype: Any = None) -> Any:  # fmt: skip
    """``aten._grouped_mm`` of any float dtype, sized as torch's meta kernel sizes it (unpadded, as on CPU)."""
    import torch

    if mat_a.dtype == mat_b.dtype == torch.bfloat16:
        return NotImplemented  # torch's own meta kernel
    if mat_a.dim() == 2:
        size = [offs.size(0), mat_a.size(0), mat_b.size(1)] if mat_b.dim() == 2 else [mat_a.size(0), mat_b.size(-1)]
    else:
        size = [mat_a.size(1), mat_b.size(1)] if mat_b.dim() == 2 else [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    return mat_a.new_empty(size, dtype=out_dtype or mat_a.dtype)


@contextlib.contextmanager
def as_on_a_real_run() -> Iterator[None]:
    """Three things torch does differently under an outer fake mode than on a real run, made as on a real run.

    Device meshes made while tracing (FSDP2 over a tensor-parallel mesh concatenates two) compute rank
    coordinates from a real tensor, as torch's own ``DeviceMesh.__getitem__`` does under fake mode. DTensor's
    sharding propagation computes output shapes in a fake mode of its own, as it does on a real run, instead
    of in ours: its scratch tensors are no memory of the step. ``torch._grouped_mm`` (mixture-of-experts
    layers) under fake tensors refuses anything but bf16, a check of its Hopper kernel's, where the CPU kernel
    runs fp32 too (an fp32 module under bf16-mixed autocast calls it with fp32 weights): its output is sized
    the same for any float dtype.
    """
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.distributed.device_mesh import DeviceMesh

    original = DeviceMesh.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        with unset_fake_temporarily():
            original(self, *args, **kwargs)

    import torch.distributed.tensor._sharding_prop as sharding_prop

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(DeviceMesh, "__init__", init))
        # torch 2.7 always propagates in a fake mode of its own (no detect_fake_mode there): nothing to undo
        if hasattr(sharding_prop, "detect_fake_mode"):
            stack.enter_context(mock.patch.object(sharding_prop, "detect_fake_mode", return_value=None))
        import torch
        from torch._subclasses import fake_impls

        grouped_mm = getattr(torch.ops.aten, "_grouped_mm", None)
        if grouped_mm is not None and grouped_mm.default not in fake_impls.op_implementations_dict:
            stack.enter_context(mock.patch.dict(fake_impls.op_implementations_dict, {grouped_mm.default: _grouped_mm}))
        yield


@contextlib.contextmanager
def attention_replaced(replacement: Any) -> Iterator[None]:
    """``torch.nn.functional.scaled_dot_product_attention`` is ``replacement`` (given torch's own) while the
    block runs: in the forward and in the recomputation of checkpointed blocks during backward, where a torch
    function mode is not active."""
    import torch.nn.functional

    with mock.patch.object(torch.nn.functional, "scaled_dot_product_attention",
                           replacement(torch.nn.functional.scaled_dot_product_attention)):  # fmt: skip
        yield
