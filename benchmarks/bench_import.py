"""``import lightning.pytorch`` with preset registration (the autoload hook) vs without.

Fresh interpreters, alternating ``LIGHTNING_PRESETS_AUTOLOAD=1`` and ``=0``; each child reports the
``perf_counter`` and CPU (``process_time``) time of the import itself, and the parent the whole run's
wall time. Medians are compared; on a shared machine the CPU time is the steadier of the three.
Writes ``benchmarks/results/import.txt``.

    python benchmarks/bench_import.py [--runs 7]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
CHILD = """\
import sys, time
start, cpu = time.perf_counter(), time.process_time()
import lightning.pytorch
elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
from lightning.pytorch.strategies import StrategyRegistry
print(elapsed, cpu, "tp2d_hybrid" in StrategyRegistry)
"""


# The same registration, isolated: the hook's finder is taken off, Lightning imported, then the package
# imported (it installs the hook, which registers into the strategies modules already imported).
REGISTER_AFTER = """\
import sys, time
import _lightning_presets_autoload as hook
sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, hook.StrategiesFinder)]
import lightning.pytorch
from lightning.pytorch.strategies import StrategyRegistry
before = "tp2d_hybrid" in StrategyRegistry
start = time.perf_counter()
import lightning_presets
elapsed = time.perf_counter() - start
print(elapsed, not before and "tp2d_hybrid" in StrategyRegistry)
"""


def registration_alone(env: dict[str, str]) -> float:
    out = subprocess.run(
        [sys.executable, "-c", REGISTER_AFTER],
        env={**env, "LIGHTNING_PRESETS_AUTOLOAD": "1"},
        check=True,
        capture_output=True,
        text=True,
    )
    elapsed, registered = out.stdout.split()
    if registered != "True":
        raise RuntimeError("the presets were not registered by `import lightning_presets`")
    return float(elapsed)


def run(autoload: str, env: dict[str, str]) -> tuple[float, float, bool, float]:
    start = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-c", CHILD],
        env={**env, "LIGHTNING_PRESETS_AUTOLOAD": autoload},
        check=True,
        capture_output=True,
        text=True,
    )
    wall = time.perf_counter() - start
    elapsed, cpu, registered = out.stdout.split()
    return float(elapsed), wall, registered == "True", float(cpu)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7, help="runs of each kind, alternating")
    args = parser.parse_args()
    env = {key: value for key, value in os.environ.items() if not key.startswith("LIGHTNING_PRESETS")}

    run("1", env)  # warm the file cache
    run("0", env)
    on: list[tuple[float, float, bool, float]] = []
    off: list[tuple[float, float, bool, float]] = []
    for _ in range(args.runs):
        on.append(run("1", env))
        off.append(run("0", env))
    if not all(r[2] for r in on) or any(r[2] for r in off):
        raise RuntimeError("registration did not follow LIGHTNING_PRESETS_AUTOLOAD: is the hook installed?")

    alone = [registration_alone(env) for _ in range(args.runs)]

    import_on, import_off = statistics.median(r[0] for r in on), statistics.median(r[0] for r in off)
    cpu_on, cpu_off = statistics.median(r[3] for r in on), statistics.median(r[3] for r in off)
    wall_on, wall_off = statistics.median(r[1] for r in on), statistics.median(r[1] for r in off)
    lines = [
        "bench_import: `import lightning.pytorch` with preset registration vs without",
        f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end",
        f"runs: {args.runs} of each, alternating LIGHTNING_PRESETS_AUTOLOAD=1 / =0, fresh interpreters",
        f"median import time with registration:    {import_on * 1e3:8.1f} ms",
        f"median import time without registration: {import_off * 1e3:8.1f} ms",
        f"difference of medians:                   {(import_on - import_off) * 1e3:8.1f} ms",
        f"ratio with/without (import):             {import_on / import_off:8.3f}",
        f"median CPU time of the import (process_time): with {cpu_on * 1e3:.1f} ms, without {cpu_off * 1e3:.1f} ms, "
        f"difference {(cpu_on - cpu_off) * 1e3:.1f} ms, ratio {cpu_on / cpu_off:.3f}",
        f"median wall time of the whole run: with {wall_on * 1e3:.1f} ms, without {wall_off * 1e3:.1f} ms, "
        f"ratio {wall_on / wall_off:.3f}",
        f"registration alone (import lightning_presets after lightning.pytorch, {args.runs} runs): "
        f"median {statistics.median(alone) * 1e3:.1f} ms, min {min(alone) * 1e3:.1f} ms",
    ]
    print("\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "import.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
