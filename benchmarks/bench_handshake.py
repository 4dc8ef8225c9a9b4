"""What the start-up handshake costs: 2 CPU processes (gloo), each with a real Trainer of a DDP preset.

    python benchmarks/bench_handshake.py [--repeats 30]

Each process forms the process group through the strategy's ``setup_environment`` (the handshake runs once there),
then calls the handshake again ``--repeats`` times, each after a barrier so that both ranks start it together, and
times the call: the fingerprint, the new gloo side group, the gather of both fingerprints, their comparison and the
group's destruction. Rank 0 prints the median and the maximum, in milliseconds, and the first call's (inside
``setup_environment``, where the package versions are read for the first time) separately. Writes
``benchmarks/results/handshake.txt``.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time
from multiprocessing import get_context
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "handshake.txt"
PRESET = "ddp_static_graph"


def _rank(rank: int, port: int, repeats: int, queue: Any) -> None:
    os.environ.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                       "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})  # fmt: skip
    import lightning.pytorch as pl
    import torch
    import torch.distributed as dist

    from lightning_presets.guards.runtime import handshake as module

    torch.set_num_threads(1)
    trainer = pl.Trainer(strategy=PRESET, accelerator="cpu", devices=2, logger=False, enable_progress_bar=False)
    strategy: Any = trainer.strategy
    first: list[float] = []
    original = module.handshake

    def timed(strategy: Any) -> None:
        start = time.perf_counter()
        original(strategy)
        first.append(time.perf_counter() - start)

    module.handshake = timed
    try:
        strategy.setup_environment()  # the process group, and the handshake once, as fit runs them
    finally:
        module.handshake = original
    seconds = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        module.handshake(strategy)
        seconds.append(time.perf_counter() - start)
    queue.put((rank, first, seconds))
    dist.destroy_process_group()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=30)
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    context = get_context("spawn")  # fresh interpreters, as a launcher starts them
    queue = context.Queue()
    processes = [context.Process(target=_rank, args=(rank, port, args.repeats, queue)) for rank in (0, 1)]
    for process in processes:
        process.start()
    results = {rank: (first, seconds) for rank, first, seconds in (queue.get(timeout=300) for _ in processes)}
    for process in processes:
        process.join(60)
    lines = [f"handshake of {PRESET} on 2 CPU processes (gloo), {args.repeats} calls per rank after a barrier:"]
    for rank, (first, seconds) in sorted(results.items()):
        ms = [1000 * value for value in seconds]
        lines.append(f"  rank {rank}: median {statistics.median(ms):.1f} ms, max {max(ms):.1f} ms; first call "
                     f"(in setup_environment) {1000 * first[0]:.1f} ms")  # fmt: skip
    text = "\n".join(lines)
    print(text)
    RESULTS.write_text(text + "\n")
    return 0 if all(process.exitcode == 0 for process in processes) else 1


if __name__ == "__main__":
    sys.exit(main())
