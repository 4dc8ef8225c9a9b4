"""``lightning-presets plan --model`` on a 1.3B-parameter decoder for 8 GPUs, and on Llama 3.1 8B for 8 H100s and
Llama 3.1 70B for 2 × 8 (memory and step time): wall time and peak memory.

    python benchmarks/bench_plan.py [--output benchmarks/results/plan.txt] [--cases depth,plan,plan8b,plan70b]

Each command runs as a child process of this script, the way a user runs it; its wall time is measured
around it, and its peak resident memory is ``resource.getrusage(RUSAGE_CHILDREN).ru_maxrss`` read after
it exits: the largest peak of the command and of the tracing process it starts (the model is never
materialised: 1.34B fp32 parameters alone would be 5.0 GiB). Also runs ``check --model`` for the same
model under ``ddp_static_graph`` on 16 GiB GPUs (refused) and on 141 GiB GPUs (accepted).

A model of 12 or more repeated blocks is traced with 3 and 4 of them and extrapolated (``tools/plan/depth.py``).
The ``depth`` case checks that against the full trace of a 12-layer Llama small enough to trace in full, for every
preset: each memory figure and the step time, extrapolated against traced, and both wall times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

MODEL = "lightning_presets.tools.plan.reference_models:decoder_1b3"
DEPTH_MODEL = "lightning_presets.tools.plan.reference_models:llama_12_small"
MEMORY = ("parameters", "gradients", "optimizer", "activations", "total_peak", "rank_peak", "cpu_bytes_per_node")
PLAN = ("plan", "--model", MODEL, "--gpus", "8", "--gpu-memory", "80GiB")
CHECK = ("check", "--strategy", "ddp_static_graph", "--accelerator", "cuda", "--gpus", "8", "--devices", "8",
         "--precision", "bf16-mixed", "--model", MODEL)  # fmt: skip
LLAMA = {
    "plan8b": ("plan", "--model", "lightning_presets.tools.plan.reference_models:llama3_8b", "--gpus", "8",
               "--gpu-type", "H100-SXM", "--timeout", "1700"),
    "plan70b": ("plan", "--model", "lightning_presets.tools.plan.reference_models:llama3_70b", "--gpus", "8",
                "--num-nodes", "2", "--gpu-type", "H100-SXM", "--timeout", "1700"),
}  # fmt: skip
"""The issue's speed cases: the fastest preset that fits, with tokens/s, for a 7-8B model on 8 H100s and a 70B
model on 2 × 8 (each under a minute and 1 GiB is the aim)."""
LIMIT_S = 60.0
LIMIT_RSS_GIB = 2.0


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "lightning_presets", *args]


def _run(*args: str) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS GiB of the command and its children, exit code, stdout) of one command."""
    started = time.perf_counter()
    done = subprocess.run(_command(*args), capture_output=True, text=True, check=False, timeout=1800)
    wall = time.perf_counter() - started
    # ru_maxrss of the children is the largest peak among every descendant waited for so far, in KiB:
    # run the measured command first, in a fresh script, so nothing larger came before it.
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return wall, peak, done.returncode, done.stdout


def _table(plan: dict[str, object]) -> list[str]:
    rows = []
    presets = plan["presets"]
    assert isinstance(presets, list)
    for each in presets:
        per = each["per_gpu_bytes"]
        cells = [per[key] for key in ("parameters", "gradients", "optimizer", "activations", "total_peak")]
        figures = " | ".join("-" if value is None else f"{value / 2**30:.2f}" for value in cells)
        cpu = f"{each['cpu_bytes_per_node'] / 2**30:.1f}" if each["cpu_bytes_per_node"] else "-"
        verdict = "yes" if each["fits"] else ("n/a" if not each["applicable"] else "no")
        rows.append(f"| `{each['preset']}` | {figures} | {cpu} | {verdict} | {each['evidence']} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="benchmarks/results/plan.txt")
    parser.add_argument("--inner", choices=("plan", "refused", "accepted", "depth", *LLAMA), help=argparse.SUPPRESS)
    parser.add_argument("--cases", default="depth,plan,plan8b,plan70b", help="which plans to measure (comma-separated)")
    args = parser.parse_args()
    if args.inner == "depth":
        print(json.dumps(_depth()))
        return
    if args.inner:  # one measured command per fresh process: RUSAGE_CHILDREN then belongs to it alone
        command = {"plan": (*PLAN, "--json"), "refused": (*CHECK, "--gpu-memory", "16GiB", "--json"),
                   "accepted": (*CHECK, "--gpu-memory", "141GiB", "--json"),
                   **{name: (*argv, "--json") for name, argv in LLAMA.items()}}[args.inner]  # fmt: skip
        wall, peak, code, out = _run(*command)
        print(json.dumps({"wall_s": wall, "peak_rss_gib": peak, "exit_code": code, "output": json.loads(out)}))
        return
    measured = {}
    cases = [name for name in args.cases.split(",") if name]
    for name in ("refused", "accepted", *cases):
        done = subprocess.run([sys.executable, __file__, "--inner", name], capture_output=True, text=True,
                              check=True, timeout=2000)  # fmt: skip
        measured[name] = json.loads(done.stdout.strip().splitlines()[-1])
        measured[name]["load"] = " ".join(f"{value:.1f}" for value in os.getloadavg())  # the machine may be shared
    refused, accepted = measured["refused"], measured["accepted"]
    plan = measured.get("plan")
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    lines = [
        "lightning-presets plan --model (benchmarks/bench_plan.py)",
        f"python {platform.python_version()}, lightning {version('lightning')}, torch {version('torch')}, "
        f"{os.cpu_count()} CPU(s), load average {load}",
        "",
    ]
    if "depth" in measured:
        lines += _depth_lines(measured["depth"])
    if plan is not None:
        lines += _decoder(plan)
    for name in (each for each in cases if each in LLAMA):
        lines += _llama(name, measured[name])
    lines += _checks(refused, accepted)
    ok = ((plan is None or (plan["wall_s"] <= LIMIT_S and plan["peak_rss_gib"] <= LIMIT_RSS_GIB))
          and refused["exit_code"] == 1 and accepted["exit_code"] == 0)  # fmt: skip
    llama_ok = all(measured[name]["wall_s"] <= LIMIT_S and measured[name]["peak_rss_gib"] <= 1.0
                   for name in cases if name in LLAMA)  # fmt: skip
    depth_ok = "not run" if "depth" not in measured else "yes" if all(
        row["memory_off"] <= 0.01 and row["step_off"] <= 0.02 for row in measured["depth"]["rows"]
    ) else "NO"  # fmt: skip
    lines.append(f"figures within the issue's limits: 1.3B plan and check {'yes' if ok else 'NO'}; Llama plans "
                 f"(under {LIMIT_S:.0f} s and 1 GiB) {'yes' if llama_ok else 'NO'}; extrapolated against full trace "
                 f"(memory within 1 %, step time within 2 %) {depth_ok}")  # fmt: skip
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)


def _llama(name: str, result: dict[str, Any]) -> list[str]:
    """A Llama plan's line: wall time, peak RSS, the recommendation with its tokens/s, and the preset table."""
    output = result["output"]
    best = next((each for each in output["presets"] if each["preset"] == output["recommended"]), None)
    speed = (best or {}).get("throughput") or {}
    rate = f", {speed['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU estimated" if speed else ""
    lines = [
        f"$ lightning-presets {' '.join(LLAMA[name])}",
        f"  {output['model_parameters']:,} parameters; wall time {result['wall_s']:.1f} s, peak RSS "
        f"{result['peak_rss_gib']:.2f} GiB; exit {result['exit_code']}; recommended {output['recommended']}"
        f"{rate}; load average after it {result['load']}",
        "",
        "| preset | fits | peak GiB | tokens/s/GPU | step s | evidence |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for each in output["presets"]:
        speed = each.get("throughput") or {}
        tokens = f"{speed['tokens_per_s_per_gpu']:,.0f}" if speed.get("tokens_per_s_per_gpu") else "-"
        step = f"{speed['step_time_s']:.2f}" if speed else "-"
        lines.append(
            f"| `{each['preset']}` | {'yes' if each['fits'] else 'no'} | "
            f"{each['per_gpu_bytes']['total_peak'] / 2**30:.1f} | {tokens} | {step} | {each['evidence']} |"
        )
    return [*lines, ""]  # fmt: skip


def _off(value: float | None, reference: float | None) -> float:
    if value == reference:
        return 0.0
    return abs((value or 0) - (reference or 0)) / max(abs(reference or 0), 1)


def _depth() -> dict[str, Any]:
    """In this process: the 12-layer Llama planned extrapolated (3 and 4 blocks traced) and traced in full."""
    from lightning_presets.tools.plan import depth, worker
    from lightning_presets.tools.plan.request import PlanRequest

    request = PlanRequest(model=DEPTH_MODEL, gpus_per_node=8, gpu_type="H100-SXM")
    started = time.perf_counter()
    extrapolated, _ = worker.plan_in_process(request)
    middle = time.perf_counter()
    depth.EXTRAPOLATE_FROM = 10**9
    full, _ = worker.plan_in_process(request)
    ended = time.perf_counter()
    rows = []
    for short, whole in zip(extrapolated, full, strict=True):
        if whole.evidence == "arithmetic":
            continue
        offs = {name: _off(getattr(short, name), getattr(whole, name)) for name in MEMORY}
        worst = max(offs, key=lambda name: offs[name])
        step = [each.throughput.step_time_s if each.throughput else None for each in (short, whole)]
        rows.append({"preset": short.preset, "evidence": short.evidence, "peak_gib": whole.total_peak / 2**30,
                     "memory_off": offs[worst], "worst": worst, "step_s": step[1],
                     "step_off": _off(*step)})  # fmt: skip
    return {"extrapolated_s": middle - started, "full_s": ended - middle, "rows": rows}


def _depth_lines(result: dict[str, Any]) -> list[str]:
    lines = [
        f"extrapolated against full trace: {DEPTH_MODEL} (12 layers), 8 GPUs, H100-SXM, every traced preset",
        f"  wall time: 3 and 4 blocks traced and extrapolated {result['extrapolated_s']:.1f} s, all 12 traced "
        f"{result['full_s']:.1f} s (in this process); load average after it {result['load']}",
        "",
        "| preset | peak GiB (full) | largest memory difference | step s (full) | step time difference | evidence |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in result["rows"]:
        step = "-" if row["step_s"] is None else f"{row['step_s']:.3g}"
        lines.append(f"| `{row['preset']}` | {row['peak_gib']:.4f} | {row['memory_off']:.2%} ({row['worst']}) | {step} "
                     f"| {row['step_off']:.2%} | {row['evidence']} |")  # fmt: skip
    return [*lines, ""]


def _decoder(plan: dict[str, Any]) -> list[str]:
    return [
        f"$ lightning-presets {' '.join(PLAN)}",
        f"  model: {plan['output']['model_parameters']:,} parameters (24 layers, width 2048, sequence 2048, vocabulary "
        "32,000, batch 1), traced for 8 GPUs",
        f"  wall time {plan['wall_s']:.1f} s (limit {LIMIT_S:.0f} s); peak RSS {plan['peak_rss_gib']:.2f} GiB "
        f"(limit {LIMIT_RSS_GIB:.0f} GiB); exit {plan['exit_code']}; recommended {plan['output']['recommended']}; "
        f"load average after it {plan['load']}",
        "",
        "| preset | parameters | gradients | optimizer | activations | peak | CPU/node | fits 80 GiB | evidence |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        *_table(plan["output"]),
        "",
    ]


def _checks(refused: dict[str, Any], accepted: dict[str, Any]) -> list[str]:
    lines = []
    for name, result in (("16GiB", refused), ("141GiB", accepted)):
        report = result["output"]
        codes = [finding["code"] for finding in report["findings"]]
        verdict = "REJECTED" if not report["valid"] else "VALID"
        lines.append(f"$ lightning-presets {' '.join(CHECK)} --gpu-memory {name}")
        lines.append(f"  {verdict}, exit {result['exit_code']}, codes {codes}, wall {result['wall_s']:.1f} s, "
                     f"peak RSS {result['peak_rss_gib']:.2f} GiB; load average after it {result['load']}")  # fmt: skip
        for finding in report["findings"]:
            lines.append(f"  {finding['code']}: {finding['message']}")
            lines.append(f"    hint: {finding['hint']}")
        lines += [f"  note: {note}" for note in report["notes"]]
        lines.append("")
    return lines


if __name__ == "__main__":
    main()
