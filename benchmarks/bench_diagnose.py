"""What diagnose mode (``LIGHTNING_PRESETS_DIAGNOSE=1``) costs a rank, measured on its parts in one process.

    python benchmarks/bench_diagnose.py [--calls 20000]

Off (the default) it costs nothing: nothing is wrapped and no thread runs. On, each rank pays:

* per collective it issues from Python: the wrapper's record (``Recorder.enter``/``leave``), which walks the stack
  to find the user's line; timed here from a stack 40 frames deep, as in a Lightning step;
* every 0.5 s, on its monitor thread: the progress sample (the main thread's stack, the CPU time of the process and
  its children, its storage bytes, a look for ``torch.save`` on every thread's stack) and the look at where the main
  thread is (``Monitor.waiting``: a collective issued from C++?); timed here with 8 threads running.

Prints the median per call in microseconds and what that makes per second of a rank's time (10 collectives per step
at 5 steps/s, and 2 polls/s). Writes ``benchmarks/results/diagnose.txt``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "diagnose.txt"
DEPTH = 40


def _deep(depth: int, action: Callable[[], float]) -> float:
    return action() if depth <= 0 else _deep(depth - 1, action)


def _median_us(action: Callable[[], None], calls: int, repeats: int = 5) -> float:
    rounds = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            action()
        rounds.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(rounds)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    import torch  # noqa: F401  # torch.save's code is what the sample looks for

    from lightning_presets.diagnose.hangs import Monitor, Progress, Recorder

    recorder = Recorder()
    group = [0, 1]

    def collective() -> None:
        recorder.leave(recorder.enter("all_reduce", group, sys._getframe(1)))

    collective_us = _deep(DEPTH, lambda: _median_us(collective, args.calls))

    stop = threading.Event()
    workers = [threading.Thread(target=stop.wait, daemon=True) for _ in range(7)]
    for worker in workers:
        worker.start()
    monitor = Monitor(recorder, rank=0, world=2, setup_limit=1620.0, step_limit=300.0)
    progress = Progress(recorder, threading.main_thread())
    samples: list[float] = []

    def sampler() -> None:
        for _ in range(max(args.calls // 10, 100)):
            start = time.perf_counter()
            now = time.monotonic()
            progress.sample(now)
            monitor.waiting(now)
            samples.append((time.perf_counter() - start) * 1e6)

    thread = threading.Thread(target=sampler)
    _deep(DEPTH, lambda: (thread.start(), thread.join(), 0.0)[-1])
    stop.set()
    sample_us = statistics.median(samples)
    per_second = 5 * 10 * collective_us + 2 * sample_us
    lines = [
        f"diagnose mode's cost on one rank (python {sys.version.split()[0]}, stack {DEPTH} frames deep):",
        f"  a collective issued from Python, recorded: {collective_us:.1f} us per call",
        f"  the monitor's poll (progress sample and where the main thread waits, 8 threads): {sample_us:.1f} us, "
        "twice a second",
        f"  at 5 steps/s with 10 collectives each: {per_second:.0f} us per second of the rank's time "
        f"({per_second / 1e4:.3f} %)",
        "  off (the default): nothing is wrapped and no thread runs",
    ]
    text = "\n".join(lines)
    print(text)
    RESULTS.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
