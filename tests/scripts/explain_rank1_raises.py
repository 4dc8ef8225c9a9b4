"""A 2-rank gloo job for ``explain``'s README example: rank 1 raises, rank 0 waits in a collective and times out.

Run under ``torchrun --nproc-per-node 2 --log-dir DIR --redirects 3``; ``@record`` writes each failing rank's
torchelastic error file. The process group's timeout is ``EXPLAIN_JOB_TIMEOUT`` seconds (3 by default), so rank 0
gives up quickly.

Rank 1 does not exit at once after its error: a non-daemon thread (as a logger's or a data loader's would) keeps the
process, and so its sockets, alive for a while, so rank 0 is not told that its peer is gone and waits for the
collective until the timeout, as ranks on NCCL do. Rank 0 then fails first as far as the launcher sees (torchrun's
"Root Cause" names rank 0), although rank 1's error came seconds earlier: the trap ``explain`` exists for.
"""

from __future__ import annotations

import datetime
import os
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    timeout = datetime.timedelta(seconds=float(os.environ.get("EXPLAIN_JOB_TIMEOUT", "3")))
    dist.init_process_group("gloo", timeout=timeout)
    rank = dist.get_rank()
    if rank == 1:
        linger = threading.Thread(target=time.sleep, args=(timeout.total_seconds() + 20,))
        linger.start()  # non-daemon: the interpreter waits for it after the error (the launcher ends it sooner)
        raise ValueError("the batch of rank 1 has 0 samples")
    value = torch.ones(1)
    dist.all_reduce(value)  # rank 1 never joins: rank 0 waits here until the timeout
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
