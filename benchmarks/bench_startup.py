"""Interpreter start-up with the autoload hook vs without, and the hook's own in-process cost.

Each run is ``python -I -S -c "import site; site.addsitedir(D)"``: D holds a copy of the ``.pth``
line and the hook module (byte-compiled, as pip does at install), or only a ``.pth`` file that does
nothing. Runs alternate; medians are compared. Then, in fresh interpreters, ``perf_counter`` around
``exec`` of the ``.pth`` line gives the hook's own cost (an upper bound: D's directory is listed for
this one import), and ``-X importtime`` of a normal start-up of this environment gives the hook
module's import time where it is installed. Writes ``benchmarks/results/startup.txt``.

    python benchmarks/bench_startup.py [--pairs 300] [--fresh 40]
"""

from __future__ import annotations

import argparse
import compileall
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
PTH = "lightning_presets_autoload.pth"
HOOK = "_lightning_presets_autoload.py"
RESULTS = ROOT / "benchmarks" / "results"

# ``os`` is imported first: site.py has it loaded before it processes any ``.pth`` file.
IN_PROCESS = """\
import os, sys, time
sys.path.insert(0, {site!r})
line = open({pth!r}).read()
start = time.perf_counter()
exec(line)
elapsed = time.perf_counter() - start
assert "_lightning_presets_autoload" in sys.modules
print(elapsed * 1e6)
"""


def importtime_in_real_environment(env: dict[str, str]) -> float:
    """Microseconds ``-X importtime`` reports for the hook module during a normal start-up of this venv."""
    run = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "pass"],
        env={**env, "LIGHTNING_PRESETS_AUTOLOAD": "1"},
        check=True,
        capture_output=True,
        text=True,
    )
    for line in run.stderr.splitlines():
        if line.rstrip().endswith("_lightning_presets_autoload"):
            return float(line.split("|")[1])
    raise RuntimeError("the hook module was not imported at start-up: is lightning-presets installed here?")


def start_up(site: Path, env: dict[str, str]) -> float:
    command = [sys.executable, "-I", "-S", "-c", f"import site; site.addsitedir({str(site)!r})"]
    start = time.perf_counter()
    subprocess.run(command, env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=300, help="alternating runs with and without the hook")
    parser.add_argument("--fresh", type=int, default=40, help="fresh interpreters for the in-process cost")
    args = parser.parse_args()

    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "LIGHTNING_PRESETS"))}
    lines = []

    def say(text: str) -> None:
        print(text, flush=True)
        lines.append(text)

    with tempfile.TemporaryDirectory() as tmp:
        hooked, empty = Path(tmp, "hooked"), Path(tmp, "empty")
        hooked.mkdir()
        empty.mkdir()
        shutil.copy(SRC / PTH, hooked / PTH)
        shutil.copy(SRC / HOOK, hooked / HOOK)
        compileall.compile_dir(hooked, quiet=1)
        (empty / "nothing.pth").write_text("# a .pth line that does nothing: both sides pay for reading one\n")

        for _ in range(5):  # warm the file cache
            start_up(hooked, env)
            start_up(empty, env)
        with_hook, without = [], []
        for _ in range(args.pairs):
            with_hook.append(start_up(hooked, env))
            without.append(start_up(empty, env))

        code = IN_PROCESS.format(site=str(hooked), pth=str(hooked / PTH))
        costs = []
        for _ in range(args.fresh):
            out = subprocess.run([sys.executable, "-I", "-S", "-c", code], env=env, check=True, capture_output=True)
            costs.append(float(out.stdout))

    real = [importtime_in_real_environment(env) for _ in range(args.fresh)]

    median_with, median_without = statistics.median(with_hook), statistics.median(without)
    say("bench_startup: interpreter start-up with the lightning-presets hook vs without")
    say(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load average {os.getloadavg()[0]:.2f} at the end")  # fmt: skip
    say(f"runs: {args.pairs} alternating pairs of `python -I -S -c 'import site; site.addsitedir(D)'`")
    say(f"median start-up with hook:    {median_with * 1e3:8.3f} ms")
    say(f"median start-up without hook: {median_without * 1e3:8.3f} ms")
    say(f"difference of medians:        {(median_with - median_without) * 1e6:8.1f} us")
    paired = statistics.median(a - b for a, b in zip(with_hook, without, strict=True))
    say(f"median of paired differences: {paired * 1e6:8.1f} us")
    say(f"ratio with/without:           {median_with / median_without:8.4f}")
    say(f"hook's own cost (exec of the .pth line, {args.fresh} fresh interpreters): "
        f"median {statistics.median(costs):.1f} us, min {min(costs):.1f} us, max {max(costs):.1f} us")  # fmt: skip
    say(f"hook module import in this environment's normal start-up (-X importtime, cumulative, {args.fresh} runs): "
        f"median {statistics.median(real):.0f} us, min {min(real):.0f} us")  # fmt: skip
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "startup.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
