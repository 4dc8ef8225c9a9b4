"""Throughput of ``lightning-presets check`` in one process: the matrix, and single checks.

    python benchmarks/bench_matrix.py [--repeat 3] [--output benchmarks/results/matrix.txt]

Reports configurations per second of wall time and of process CPU time (the second is what the
code costs; the first also shows how busy the machine was), the latency of single checks, and
where the time of one check goes (cProfile, top entries by cumulative time).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import platform
import pstats
import statistics
import sys
import time
from importlib.metadata import version


def _matrix_runs(repeat: int) -> list[tuple[int, float, float]]:
    from lightning_presets.tools import matrix as _matrix

    runs = []
    for _ in range(repeat):
        cpu = time.process_time()
        rows, wall = _matrix.compute()
        runs.append((len(rows), wall, time.process_time() - cpu))
    return runs


def _single_latencies(count: int) -> list[float]:
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    request = CheckRequest(
        arguments={
            "accelerator": "cuda",
            "devices": 8,
            "num_nodes": 4,
            "strategy": "fsdp_offload_ckpt",
            "precision": "bf16-mixed",
        },
        gpus=8,
        cluster="slurm",
    )
    return [run_check(request).elapsed_ms for _ in range(count)]


def _profile() -> str:
    from lightning_presets.tools import matrix as _matrix
    from lightning_presets.tools.check.construct import session
    from lightning_presets.tools.verdict import run_check

    requests = list(_matrix.requests(("trainer",)))[::7]
    profiler = cProfile.Profile()
    with session():
        profiler.enable()
        for request in requests:
            run_check(request)
        profiler.disable()
    stream = io.StringIO()
    pstats.Stats(profiler, stream=stream).sort_stats("tottime").print_stats(12)
    lines = [line for line in stream.getvalue().splitlines() if line.strip()]
    return "\n".join(lines[-14:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--output", help="also write the report here")
    args = parser.parse_args()
    start = time.perf_counter()
    import lightning.fabric
    import lightning.pytorch  # noqa: F401

    import lightning_presets  # noqa: F401

    imports = time.perf_counter() - start
    first = _single_latencies(1)[0]
    runs = _matrix_runs(args.repeat)
    latencies = _single_latencies(50)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    lines = [
        "lightning-presets check throughput (benchmarks/bench_matrix.py)",
        f"python {platform.python_version()}, lightning {version('lightning')}, torch {version('torch')}, "
        f"{os.cpu_count()} CPU(s), load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        "",
        f"imports (lightning.pytorch, lightning.fabric, lightning_presets): {imports:.2f} s",
        f"first check after imports: {first:.1f} ms (Lightning's first Trainer pays lazy imports)",
        f"single check, steady state (50 runs, Trainer, fsdp_offload_ckpt, 8 GPUs x 4 nodes, slurm): "
        f"median {statistics.median(latencies):.2f} ms, p90 {sorted(latencies)[44]:.2f} ms",
        "",
        "matrix (one process, inside one check session):",
    ]
    for index, (count, wall, cpu) in enumerate(runs, 1):
        lines.append(
            f"  run {index}: {count} configurations in {wall:.2f} s wall = {count / wall:.0f}/s; "
            f"{cpu:.2f} s CPU = {count / cpu:.0f}/s per CPU-second"
        )
    best = max(count / cpu for count, _, cpu in runs)
    lines += ["", f"best: {best:.0f} configurations per CPU-second", "", "where one check's time goes "
              "(trainer matrix, every 7th configuration, by own time):", _profile()]  # fmt: skip
    report = "\n".join(lines) + "\n"
    sys.stdout.write(report)
    if args.output:
        with open(args.output, "w", encoding="utf-8") as file:
            file.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
