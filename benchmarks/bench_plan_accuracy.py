"""``plan --model`` against real ``Trainer.fit`` runs measured at the allocator: per model and preset, the planned
and the measured peak and the error of each category.

    python benchmarks/bench_plan_accuracy.py [--precision bf16-mixed] [--models gpt2,llama] [--presets fsdp2]
    python benchmarks/bench_plan_accuracy.py --accelerator cuda --kernels cuda   # on 2+ GPUs (benchmarks/gpu/)

Models: ``tests/scripts/hf_models.py``, six built from ``transformers`` configs (GPT-2, Llama, BERT, T5, ViT,
Mixtral; nothing downloaded) and one that builds its layers in ``configure_model``. Each is planned the way a
user plans it (``lightning_presets.tools.plan.plan``: the child process, ``--gpus 2``, the run's precision;
``--kernels cpu`` on CPU, since the run there takes CPU kernels), then trained for 3 steps by
``Trainer(strategy=PRESET, devices=2)`` on 2 gloo processes (``tests/scripts/plan_fit_run.py``), which measures
rank 0 independently of the planner and of torch's memory trackers: the peak of the last step from
``torch.profiler``'s allocation events (started before the model is built), the model states by storage
accounting, the activations by ``saved_tensors_hooks``. On CPU everything a rank holds is CPU memory, so an
offload preset's planned figure is the rank's whole peak (``rank_peak_bytes``).

Writes ``benchmarks/results/plan_accuracy.txt`` and ``plan_accuracy.json`` (``--output`` folder).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
MODELS = ("gpt2", "llama", "bert", "t5", "vit", "mixtral", "llama_lazy")
PRESETS = ("ddp_static_graph", "fsdp2", "fsdp2_offload_ckpt", "tp2d_hybrid")
CATEGORIES = ("parameters", "gradients", "optimizer", "activations")
GOAL = 0.10


def measured(model: str, preset: str, precision: str, accelerator: str, steps: int) -> dict[str, Any]:
    """One real run's figures (rank 0), or ``{"error": ...}``."""
    command = [sys.executable, str(SCRIPTS / "plan_fit_run.py"), "--model", f"hf_models:{model}", "--preset", preset,
               "--precision", precision, "--accelerator", accelerator, "--steps", str(steps)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False, cwd=SCRIPTS)
    line = next((line for line in done.stdout.splitlines() if line.startswith("FIT_MEMORY ")), None)
    if done.returncode != 0 or line is None:
        errors = [line for line in done.stderr.splitlines() if "Error: " in line] or [f"exit {done.returncode}"]
        return {"error": errors[-1].split("]: ", 1)[-1][:300]}
    result: dict[str, Any] = json.loads(line.removeprefix("FIT_MEMORY "))
    return result


def planned(model: str, presets: tuple[str, ...], precision: str, kernels: str) -> dict[str, dict[str, Any]]:
    """Each preset's planned figures, from a plan made as ``lightning-presets plan --model`` makes it."""
    sys.path.insert(0, str(SCRIPTS))
    from lightning_presets.tools.plan import PlanRequest, plan

    request = PlanRequest(model=f"hf_models:{model}", gpus_per_node=2, precision=precision, presets=presets,
                          kernels=kernels, gpu_memory=80 * 2**30)  # fmt: skip
    figures: dict[str, dict[str, Any]] = {}
    for each in plan(request).estimates:
        offloaded = dict(zip(("parameters", "gradients", "optimizer"), each.offloaded, strict=True))
        row: dict[str, Any] = {category: getattr(each, category) + offloaded.get(category, 0) for category in
                               ("parameters", "gradients", "optimizer")}  # fmt: skip
        row.update(activations=each.activations, evidence=each.evidence, device_peak=each.total_peak,
                   peak=each.rank_peak if kernels == "cpu" and each.rank_peak is not None else each.total_peak,
                   step=list(each.step), why=list(each.why))  # fmt: skip
        figures[each.preset] = row
    return figures


def _error(plan: float | None, real: float | None) -> float | None:
    if plan is None or not real:
        return None
    return (plan - real) / real


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1%}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / 2**20:.2f}"


def table(rows: list[dict[str, Any]]) -> list[str]:
    lines = ["| model | preset | planned peak MiB | measured peak MiB | peak error | parameters | gradients | "
             "optimizer | activations | fit peak MiB |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]  # fmt: skip
    for row in rows:
        real, plan = row["measured"], row["planned"]
        if "error" in real or "error" in plan:
            why = real.get("error") or plan.get("error")
            lines.append(f"| {row['model']} | `{row['preset']}` | - | - | not measured: {why} | | | | | |")
            continue
        errors = [_percent(_error(plan[category], real[category])) for category in CATEGORIES]
        lines.append(f"| {row['model']} | `{row['preset']}` | {_mib(plan['peak'])} | {_mib(real['peak'])} | "
                     f"{_percent(_error(plan['peak'], real['peak']))} | {' | '.join(errors)} | "
                     f"{_mib(real.get('fit_peak'))} |")  # fmt: skip
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--precision", default="bf16-mixed")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--presets", default=",".join(PRESETS))
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--kernels", choices=("cpu", "cuda"), default=None, help="default: the accelerator's")
    parser.add_argument(
        "--steps",
        type=int,
        default=2,
        help="steps per run; the last is measured (the second is the "
        "first with the previous step's gradients and the optimizer state)",
    )
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results"), help="folder for the results")
    parser.add_argument("--resume", action="store_true", help="keep the measured rows of the JSON already in --output")
    args = parser.parse_args()
    kernels = args.kernels or args.accelerator
    presets = tuple(args.presets.split(","))
    started = time.perf_counter()
    rows = _earlier(args, kernels) if args.resume else []
    done = {(row["model"], row["preset"]) for row in rows}
    for model in args.models.split(","):
        if all((model, preset) in done for preset in presets):
            continue
        try:
            plans = planned(model, presets, args.precision, kernels)
        except Exception as error:  # a model the planner refuses is a result too
            plans = {preset: {"error": f"{type(error).__name__}: {error}"[:300]} for preset in presets}
        for preset in [each for each in presets if (model, each) not in done]:
            real = measured(model, preset, args.precision, args.accelerator, args.steps)
            rows.append({"model": model, "preset": preset, "planned": plans[preset], "measured": real})
            print(json.dumps(rows[-1]["measured"])[:200], file=sys.stderr, flush=True)
            report(rows, args, kernels, time.perf_counter() - started)  # as it goes: a stopped run keeps its rows


def _path(args: argparse.Namespace, suffix: str) -> Path:
    return Path(args.output) / (("plan_accuracy" if args.accelerator == "cpu" else "plan_accuracy_gpu") + suffix)


def _earlier(args: argparse.Namespace, kernels: str) -> list[dict[str, Any]]:
    """The rows of an earlier run of the same kind (``--resume``), in the order they were measured."""
    path = _path(args, ".json")
    if not path.exists():
        return []
    data = json.loads(path.read_text(encoding="utf-8"))
    same = (data["precision"], data["accelerator"], data["kernels"]) == (args.precision, args.accelerator, kernels)
    rows: list[dict[str, Any]] = data["rows"] if same else []
    return [row for row in rows if "error" not in row["measured"] and "error" not in row["planned"]]


def report(rows: list[dict[str, Any]], args: argparse.Namespace, kernels: str, seconds: float) -> None:
    judged = [row for row in rows if "error" not in row["measured"] and "error" not in row["planned"]]
    peak_errors = [abs(_error(row["planned"]["peak"], row["measured"]["peak"]) or 0) for row in judged]
    outside = [f"{row['model']}/{row['preset']}" for row, error in zip(judged, peak_errors, strict=True)
               if error > GOAL]  # fmt: skip
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    header = [
        "plan --model against real Trainer.fit runs, measured at the allocator (benchmarks/bench_plan_accuracy.py)",
        f"python {platform.python_version()}, lightning {version('lightning')}, torch {version('torch')}, "
        f"transformers {version('transformers')}; {args.accelerator}, 2 processes, precision {args.precision}, "
        f"plan --kernels {kernels}; {os.cpu_count()} CPU(s), load average {load}; {seconds:.0f} s",
        "",
        f"Peak: the last of {args.steps} steps, rank 0. Errors are (planned - measured) / measured. fit peak: the "
        "largest value over the whole fit (construction and sharding included), not planned.",
        "",
    ]
    summary = [
        "",
        f"{len(judged)} of {len(rows)} runs judged; largest peak error {max(peak_errors, default=0):.1%}; "
        f"{len(judged) - len(outside)} within {GOAL:.0%}" + (f"; outside: {', '.join(outside)}" if outside else ""),
    ]
    text = "\n".join(header + table(rows) + summary) + "\n"
    Path(args.output).mkdir(parents=True, exist_ok=True)
    _path(args, ".txt").write_text(text, encoding="utf-8")
    _path(args, ".json").write_text(json.dumps({"precision": args.precision, "accelerator": args.accelerator,
                                                "kernels": kernels, "rows": rows}, indent=1) + "\n")  # fmt: skip
    if len(rows) == len(args.models.split(",")) * len(args.presets.split(",")):
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
