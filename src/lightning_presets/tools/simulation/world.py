"""The world a simulated job runs in: torch's fake process group, with no peer behind it (collectives return at once,
their tensors untouched), for tracing a training step as one rank of a larger job."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator


@contextlib.contextmanager
def fake_world(world_size: int, rank: int = 0) -> Iterator[None]:
    """A fake process group of ``world_size`` ranks, this process being ``rank``; destroyed on exit."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("a process group already exists in this process; plan in a fresh process")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
