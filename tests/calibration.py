"""How fast this machine runs the suite's kind of work now: a fixed CPU-bound workload (small torch operations with
autograd, and plain Python), timed in as many processes side by side as the session has workers. The suite's budget
(``tests/conftest.py``) scales with it, so that a healthy slower or busier machine is not failed, while a real
regression (a test that runs far longer than its share) still is."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

REFERENCE_SECONDS = 0.42
"""The workload's time on the machine the budget was set on, this project's 2-core machine, quiet: 0.405 s for one
process (2026-12-06, steady over 3 runs, with the machine at a load of 3: one process still had a core), and 2 side by
side, as ``-n 2`` runs them, a little more (shared caches). On that machine under a load of 3, 2 side by side took
0.79-0.87 s: scale 2."""

WORKLOAD = """
import sys, time
import torch
torch.set_num_threads(1)
layer = torch.nn.Linear(64, 64)
x = torch.randn(32, 64)
sys.stdout.write("ready\\n")
sys.stdout.flush()
sys.stdin.readline()
start = time.perf_counter()
for _ in range(1600):  # what the tests' tiny models do: many small operations, each mostly dispatch
    layer.zero_grad()
    layer(x).relu().sum().backward()
table = {}
for index in range(800_000):  # what the checks do: plain Python
    table[str(index)] = len(table) % 7
print(time.perf_counter() - start)
"""


def calibrate(processes: int = 1, timeout: float = 300) -> float:
    """Seconds of the workload: the median over ``processes`` run side by side (started together once each has
    imported torch, which is not timed)."""
    started = [
        subprocess.Popen([sys.executable, "-c", WORKLOAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(max(1, processes))
    ]
    deadline = time.monotonic() + timeout
    try:
        for process in started:
            assert process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise RuntimeError(f"the calibration workload did not start (exit {process.wait()})")
        for process in started:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        times = []
        for process in started:
            out, _ = process.communicate(timeout=max(1.0, deadline - time.monotonic()))
            times.append(float(out.strip()))
        return statistics.median(times)
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
                process.communicate()


def scale(measured: float, reference: float | None = None) -> float:
    """How much slower this machine is now than the reference machine (never below 1: a faster machine keeps the
    reference budget)."""
    reference = REFERENCE_SECONDS if reference is None else reference
    return max(1.0, measured / reference) if reference > 0 else 1.0
