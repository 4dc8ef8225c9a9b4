"""``lightning-presets check --model`` on models above the real-tensor limit (issue 35 item 6): the rehearsal runs the
step ``plan`` traces under fake tensors (``tools/check/rehearsal/fake.py``) as each rehearsed rank, in torch's fake
process group of the job's size. Cases: the 1.3B decoder on 8 GPUs and Llama 3.1 70B's shapes on 2 × 8 GPUs, each
without ``--gpu-memory`` (the rehearsal alone: check's construction and the rehearsal) and with it (check adds plan's
own memory trace of the chosen preset).

    python benchmarks/bench_rehearsal_large.py [--output benchmarks/results/rehearsal_large.txt]

Each command runs as a child of a fresh wrapper process of this script (``--one``), which reports the command's wall
time and ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` after it exits: the largest peak of the command and of
every rehearsal child it forked. The rehearsal child's own peak (``getrusage(RUSAGE_SELF)`` in the child, a forked
copy of check's process: it shares torch's and Lightning's pages) and the rehearsal's own seconds are read from the
check's output. Targets of the issue: 1.3B <= 30 s; the 70B config on 2 × 8 <= 60 s and <= 1 GiB.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

MODELS = "lightning_presets.tools.plan.reference_models"
CASES = {
    "1.3B decoder, fsdp2, 8 GPUs": ("--strategy", "fsdp2", "--accelerator", "cuda", "--gpus", "8", "--devices", "8",
                                    "--precision", "bf16-mixed", "--model", f"{MODELS}:decoder_1b3"),
    "Llama 3.1 70B config, fsdp2, 2 x 8 GPUs": ("--strategy", "fsdp2", "--accelerator", "cuda", "--gpus", "8",
                                                "--devices", "8", "--num-nodes", "2", "--precision", "bf16-mixed",
                                                "--model", f"{MODELS}:llama3_70b"),
}  # fmt: skip
TARGETS = {"1.3B decoder, fsdp2, 8 GPUs": (30.0, None), "Llama 3.1 70B config, fsdp2, 2 x 8 GPUs": (60.0, 1.0)}
WITH_PLAN = ("--gpu-memory", "80GiB")


def _one(args: list[str]) -> None:
    """The wrapper: run one check, print its wall time, peak RSS of it and its children, exit code and output."""
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lightning_presets", "check", *args, "--timeout", "900"],
                          capture_output=True, text=True, check=False, timeout=1800)  # fmt: skip
    wall = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    print(json.dumps({"wall": wall, "peak": peak, "code": done.returncode, "out": done.stdout + done.stderr}))


def _found(pattern: str, text: str) -> str:
    match = re.search(pattern, text)
    return match.group(1) if match else ""


def _measure(args: tuple[str, ...]) -> dict[str, object]:
    done = subprocess.run([sys.executable, __file__, "--one", *args], capture_output=True, text=True, check=True)
    data: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    text = " ".join(str(data["out"]).split())
    rehearsal = re.search(r"rehearsal \(([\d.]+) s", text)
    child = [float(each) for each in re.findall(r"process peaked at ([\d.]+) GiB resident", text)]
    data["rehearsal_s"] = float(rehearsal.group(1)) if rehearsal else None
    data["child_peak"] = max(child) if child else None
    data["completed"] = _found(r"\): completed ([^(;]*)", text)
    codes = sorted(set(re.findall(r"\[(LP\d+)\]", text)))
    verdict = _found(r"(VALID|REJECTED|ACCEPTED[A-Z ]*):", text) or "?"
    data["verdict"] = f"{verdict}: {', '.join(codes)}" if codes else verdict
    data["ranks"] = _found(r"ranks rehearsed side by side: ([\d, ]+)", text).strip(", ")
    return data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", default="benchmarks/results/rehearsal_large.txt")
    parser.add_argument("--one", nargs=argparse.REMAINDER)
    options = parser.parse_args()
    if options.one is not None:
        _one(options.one)
        return
    lines = ["lightning-presets check --model above the real-tensor limit (benchmarks/bench_rehearsal_large.py)",
             f"python {platform.python_version()}, lightning {version('lightning')}, torch {version('torch')}, "
             f"{os.cpu_count()} CPU(s), load average before {' '.join(f'{x:.1f}' for x in os.getloadavg())}",
             ""]  # fmt: skip
    for name, args in CASES.items():
        wall_target, rss_target = TARGETS[name]
        for extra, what in (((), "rehearsal (no --gpu-memory)"), (WITH_PLAN, "rehearsal + plan (--gpu-memory 80GiB)")):
            data = _measure((*args, *extra))
            lines.append(f"$ lightning-presets check {' '.join((*args, *extra))}")
            lines.append(
                f"  {name}, {what}: wall time {data['wall']:.1f} s (target {wall_target:g} s); rehearsal's own "
                f"{data['rehearsal_s']} s; rehearsal child's peak RSS {data['child_peak']} GiB"
                f"{f' (target {rss_target:g} GiB)' if rss_target else ''}; peak RSS of check and its children "
                f"{data['peak']:.2f} GiB; exit {data['code']} ({data['verdict']}); ranks {data['ranks'] or '-'}; "
                f"completed "
                f"{str(data['completed']).strip() or '-'}; load average after "
                f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")  # fmt: skip
            print(lines[-1], flush=True)
    Path(options.output).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
