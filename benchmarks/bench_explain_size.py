"""``lightning-presets explain`` on large logs: time, peak memory, the reported line number and the report's length.

    python benchmarks/bench_explain_size.py [--megabytes 100] [--output benchmarks/results]

Three logs are written to a temporary folder and each is explained by the installed command in a fresh process
(``python -m lightning_presets explain LOG``, and ``--json``), its peak resident memory read from the kernel
(``getrusage`` of the child):

- ``size``: ``--megabytes`` of training-progress lines with one CUDA out-of-memory traceback near the end, at a line
  number known when it is written (explain reads only the last 32 MiB: the line number it reports must still be the
  file's own);
- ``repeated``: 40,000 tracebacks of one out-of-memory failure (one per step, each with its step number), in one
  file: the report must stay a few lines;
- ``stdin``: the ``size`` log piped on standard input (read a chunk at a time, its tail kept).

Writes ``benchmarks/results/explain_size.txt``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79.11 GiB"


def write_size_log(path: Path, megabytes: int) -> int:
    """Progress lines up to ``megabytes``, a traceback, a few more lines; the traceback's exception line number."""
    line = "Epoch 3:  41%|████      | 4100/10000 [12:01<17:18, 5.68it/s, v_num=7, train_loss=2.3141, lr=0.0003]\n"
    target = megabytes << 20
    count = 0
    with open(path, "w", encoding="utf-8") as handle:
        block = line * 10_000
        written = 0
        while written < target - len(block.encode()):
            handle.write(block)
            written += len(block.encode())
            count += 10_000
        handle.write("[rank1]: Traceback (most recent call last):\n")
        handle.write('[rank1]:   File "train.py", line 41, in training_step\n')
        handle.write(f"[rank1]: {OOM}\n")
        number = count + 3
        handle.write(line * 50)
    return number


def write_repeated_log(path: Path, times: int) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for step in range(times):
            handle.write(f'step {step}\nTraceback (most recent call last):\n  File "train.py", line 41, in step\n')
            handle.write(f"{OOM} (step {step})\n")


def _line(evidence: str) -> int:
    """The line number of an evidence line (``rank 1, PATH:LINE: text``)."""
    found = re.search(r"(?:\.log|<stdin>):(\d+): ", evidence)
    return int(found.group(1)) if found else -1


CPU: list[float] = []
"""The CPU seconds (user and system) of each run, in order: the figure a loaded machine does not inflate."""


def run(argv: list[str], stdin: Path | None = None) -> tuple[float, float, str, int]:
    """Seconds, peak memory of the child (MiB), its standard output and exit code (its CPU seconds go to CPU)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    before, cpu = usage.ru_maxrss, usage.ru_utime + usage.ru_stime
    start = time.perf_counter()
    with open(stdin, "rb") if stdin else open(os.devnull, "rb") as given:
        done = subprocess.run([sys.executable, "-m", "lightning_presets", "explain", *argv], stdin=given,
                              capture_output=True, text=True, check=False, timeout=600)  # fmt: skip
    seconds = time.perf_counter() - start
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    peak = usage.ru_maxrss
    CPU.append(usage.ru_utime + usage.ru_stime - cpu)
    # ru_maxrss of the children is the largest of any child so far: run the largest case last to read it right
    return seconds, max(peak, before) / 1024, done.stdout, done.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100)
    parser.add_argument("--repeated", type=int, default=40_000)
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [f"lightning-presets explain on large logs (python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
             f"average {load:.1f} at the start: wall time grows with it, CPU time does not)", ""]  # fmt: skip
    with tempfile.TemporaryDirectory() as folder:
        tiny = Path(folder) / "tiny.log"
        tiny.write_text(OOM + "\n", encoding="utf-8")
        seconds, peak, out, code = run([str(tiny)])
        lines.append(f"baseline: a one-line log: {seconds:.2f} s, peak memory {peak:.0f} MiB (the interpreter and "
                     "the imports: what the larger runs add is above it)")  # fmt: skip
        repeated = Path(folder) / "repeated.log"
        write_repeated_log(repeated, args.repeated)
        seconds, peak, out, code = run([str(repeated)])
        data = json.loads(run([str(repeated), "--json"])[2])
        lines.append(f"repeated: {args.repeated} out-of-memory tracebacks, {repeated.stat().st_size >> 20} MiB: "
                     f"{seconds:.2f} s ({CPU[-2]:.2f} s CPU), report {len(out.splitlines())} lines, "
                     f"{len(data['failures'])} failure(s), "
                     f"seen {data['failures'][0]['seen']} times, exit {code}")  # fmt: skip
        log = Path(folder) / "big.log"
        expected = write_size_log(log, args.megabytes)
        size = log.stat().st_size
        seconds, peak, out, code = run([str(log)])
        data = json.loads(run([str(log), "--json"])[2])
        first = data["failures"][0]
        reported = _line(first["evidence"][0])
        lines.append(f"size: {size / 2**20:.0f} MiB file: {seconds:.2f} s ({CPU[-2]:.2f} s CPU), "
                     f"peak memory {peak:.0f} MiB, "
                     f"{first['code']} at line {reported} (the file's own: {expected}, "
                     f"{'right' if reported == expected else 'WRONG'}), "
                     f"read from line {data['read'][0].get('read_from_line')}, "
                     f"report {len(out.splitlines())} lines, exit {code}")  # fmt: skip
        seconds, peak, out, code = run(["-", "--json"], stdin=log)
        data = json.loads(out)
        first = data["failures"][0]
        reported = _line(first["evidence"][0])
        lines.append(f"stdin: the same {size / 2**20:.0f} MiB piped: {seconds:.2f} s ({CPU[-1]:.2f} s CPU), "
                     f"peak memory {peak:.0f} MiB "
                     f"(the largest of all runs so far), line {reported} "
                     f"({'right' if reported == expected else 'WRONG'}), exit {code}")  # fmt: skip
    text = "\n".join(lines) + "\n"
    args.output.mkdir(parents=True, exist_ok=True)
    (args.output / "explain_size.txt").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
