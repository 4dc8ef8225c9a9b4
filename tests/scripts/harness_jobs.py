"""Small jobs for the harness's own tests (``tests/test_harness.py``): each a function of the rank's environment."""

from __future__ import annotations

import os
import signal
import time

import torch
import torch.distributed as dist


def _group() -> int:
    dist.init_process_group("gloo")
    return dist.get_rank()


def all_reduce() -> None:
    """Both ranks sum their rank + 1: 3 on each."""
    rank = _group()
    value = torch.tensor([rank + 1.0])
    dist.all_reduce(value)
    print(f"SUM {int(value.item())} on rank {rank} of {dist.get_world_size()} port {os.environ['MASTER_PORT']}")
    dist.destroy_process_group()


def raise_on_rank1() -> None:
    """Rank 1 raises before the collective; rank 0 waits in it until the harness kills it."""
    rank = _group()
    if rank == 1:
        raise ValueError("rank 1 refuses to reduce")
    dist.all_reduce(torch.ones(1))


def hang_on_rank1() -> None:
    """Rank 1 never enters the collective, and never fails: the job hangs."""
    rank = _group()
    if rank == 1:
        time.sleep(3600)
    dist.all_reduce(torch.ones(1))


def kill_rank1() -> None:
    """Rank 1 dies of SIGKILL without a traceback (as the host's OOM killer would kill it)."""
    rank = _group()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.all_reduce(torch.ones(1))


def kill_the_server() -> None:
    """Each rank kills the fork server it came from."""
    os.kill(os.getppid(), signal.SIGKILL)
    time.sleep(3600)


def write_environment(name: str) -> None:
    """Write this rank's view of ``name``, its working folder and whether it may change the caller's variables."""
    rank = os.environ["RANK"]
    os.environ["HARNESS_LEAK"] = "1"
    with open(f"env{rank}.txt", "w") as out:
        out.write(f"{os.environ.get(name)}|{os.getcwd()}")
