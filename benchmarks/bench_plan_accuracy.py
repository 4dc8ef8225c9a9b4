"""``plan --model`` against real runs: the error of each category, per preset, in bytes and percent.

    python benchmarks/bench_plan_accuracy.py [--output benchmarks/results/plan_accuracy.txt]

The real run is one training step of the tiny reference decoder on 2 gloo processes on CPU
(``tests/scripts/plan_real_run.py``: exact tensor accounting for parameters, gradients and optimizer state,
``saved_tensors_hooks`` for activations, torch's memory tracker for the peak). The plan is the same model for 2 GPUs,
traced in this process. ``tests/test_plan_trace.py`` asserts each figure within 10 %; this prints how close they are.
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = "lightning_presets.tools.plan.reference_models:decoder_tiny"
PRESETS = ("fsdp2", "fsdp2_offload_ckpt", "ddp_static_graph", "tp2d_hybrid")
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "peak")


def real_run() -> dict[str, dict[str, int]]:
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "scripts" / "plan_real_run.py"), "--model", TINY],
        capture_output=True, text=True, timeout=600, check=True,
    )  # fmt: skip
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    result: dict[str, dict[str, int]] = json.loads(line.removeprefix("RESULT "))
    return result


def planned() -> dict[str, dict[str, int]]:
    """Each preset's planned figure per category, chosen as the test compares them."""
    from lightning_presets.registry.catalog import strategy_catalog
    from lightning_presets.tools.plan import layouts as memory
    from lightning_presets.tools.plan import trace, user_model
    from lightning_presets.tools.plan import worker as plan_worker
    from lightning_presets.tools.plan.estimates import PlanRequest

    request = PlanRequest(model=TINY, gpus_per_node=2, precision="32-true", presets=PRESETS)
    estimates, _ = plan_worker.plan_in_process(request)
    factory = user_model.load_factory(TINY)
    figures: dict[str, dict[str, int]] = {}
    with trace.fake_world(2):
        for estimate in estimates:
            layout = memory.layout_of(strategy_catalog().presets[estimate.preset])
            assert layout is not None
            mesh = {"data_parallel": 1, "tensor_parallel": 2} if layout.tensor_parallel else None
            if layout.family == "model_parallel" and mesh is None:
                mesh = {"data_parallel": 2, "tensor_parallel": 1}
            traced = trace.trace(factory, TINY, layout, precision="32-true", mesh_sizes=mesh)
            row = {"activations": estimate.activations or 0}
            # offloaded state lives in CPU memory: compared as the traced bytes, and the whole rank's peak
            row["peak"] = traced.peak_all if traced.offloaded else estimate.total_peak
            for category in ("parameters", "gradients", "optimizer"):
                row[category] = getattr(traced if traced.offloaded else estimate, category)
            figures[estimate.preset] = row
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default=str(ROOT / "benchmarks" / "results" / "plan_accuracy.txt"))
    args = parser.parse_args()
    real = real_run()
    plan = planned()
    lines = [
        "plan --model against a real 2-process run (benchmarks/bench_plan_accuracy.py)",
        f"python {platform.python_version()}, lightning {version('lightning')}, torch {version('torch')}, "
        f"model {TINY}, 2 ranks (gloo, CPU), fp32, AdamW",
        "",
        "| preset | category | planned (bytes) | real (bytes) | error (bytes) | error |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    worst = 0.0
    for preset in PRESETS:
        for category in CATEGORIES:
            figure, measured = plan[preset][category], real[preset][category]
            error = (figure - measured) / measured if measured else float("inf")
            worst = max(worst, abs(error))
            lines.append(f"| `{preset}` | {category} | {figure:,} | {measured:,} | {figure - measured:+,} | "
                         f"{error:+.2%} |")  # fmt: skip
    lines += ["", f"largest relative error: {worst:.2%} (the test's tolerance: 10%)"]
    text = "\n".join(lines) + "\n"
    Path(args.output).write_text(text, encoding="utf-8")
    sys.stdout.write(text)


if __name__ == "__main__":
    main()
