"""What the planner's fake-tensor trace patches in torch, so that tracing behaves as a real run would."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from unittest import mock


@contextlib.contextmanager
def as_on_a_real_run() -> Iterator[None]:
    """Two things torch does differently under an outer fake mode than on a real run, made as on a real run.

    Device meshes made while tracing (FSDP2 over a tensor-parallel mesh concatenates two) compute rank
    coordinates from a real tensor, as torch's own ``DeviceMesh.__getitem__`` does under fake mode. DTensor's
    sharding propagation computes output shapes in a fake mode of its own, as it does on a real run, instead
    of in ours: its scratch tensors are no memory of the step.
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
        yield
