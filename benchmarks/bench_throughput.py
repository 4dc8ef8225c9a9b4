"""``plan``'s step-time estimate against torchtitan's published measurements, none of them fitted on.

    python benchmarks/bench_throughput.py [--output benchmarks/results/throughput.txt]

Every row is torchtitan's (``benchmarks/llama3_h100_202412_torchtitan.md`` in pytorch/torchtitan, December 2024:
https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md): Llama 3.1 8B,
FSDP, bf16, local batch 2, sequence 8,192, selective activation checkpointing, on H100s of 96 GB HBM2e at 500 W,
400 Gb/s RDMA per GPU between hosts. Every row is judged: 8 GPUs eager (5,762 tokens/s/GPU; it was the
calibration row until the efficiency became per GPU generation, fitted on llm-foundry's rows:
``tools/plan/calibration.py``, ``benchmarks/bench_plan_published.py --calibrate``), with ``torch.compile``
(``--compile``: 6,667), and on 128 GPUs (16 nodes: the FSDP collectives cross the network; 5,605 eager, 6,514
compiled), and with torchao's Float8 linears (``plan --fp8 torchao``: 8,532 and 8,380, compiled). The
context-parallel and 70B/405B rows are not judged: the planner models neither context nor pipeline parallelism.

The model is ``lightning_presets.tools.plan.reference_models:llama3_8b`` (Llama 3.1 8B's shapes) traced
under the ``fsdp2`` preset with and without full checkpointing, in a child process per world size (a fake
process group of 8 or 128 ranks); torchtitan's selective policy is applied to the difference
(:func:`lightning_presets.tools.plan.calibration.selective_recompute`). The traces' counts are cached in
``benchmarks/results/throughput_counts.json`` (``--retrace`` traces again: about a minute per trace here).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path
from typing import Any

from lightning_presets.tools.plan import calibration, hardware, throughput
from lightning_presets.tools.plan.counts import StepCounts

MODEL = "lightning_presets.tools.plan.reference_models:llama3_8b"
CACHE = Path("benchmarks/results/throughput_counts.json")
ROWS = (  # (name, nodes, compile, published tokens/s/GPU, fitted on, fp8)
    ("8 GPUs, eager", 1, False, 5762, False, "none"),
    ("8 GPUs, torch.compile", 1, True, 6667, False, "none"),
    ("8 GPUs, torch.compile + Float8", 1, True, 8532, False, "torchao"),
    ("128 GPUs, eager", 16, False, 5605, False, "none"),
    ("128 GPUs, torch.compile", 16, True, 6514, False, "none"),
    ("128 GPUs, torch.compile + Float8", 16, True, 8380, False, "torchao"),
)
_CHILD = """
import json, sys
from dataclasses import replace
from lightning_presets.tools.plan import trace
from lightning_presets.tools.simulation import world
from lightning_presets.tools.simulation import user_model
from lightning_presets.tools.plan.presets import mesh_sizes, plannable
from lightning_presets.tools.plan.request import PlanRequest
nodes, checkpoint = int(sys.argv[1]), sys.argv[2] == "1"
request = PlanRequest(model=sys.argv[3], gpus_per_node=8, num_nodes=nodes, presets=("fsdp2",))
factory = user_model.load_factory(request.model)
with world.fake_world(request.world_size):
    preset, layout = plannable(request)[0]
    traced = trace.trace(factory, request.model, replace(layout, checkpoint=checkpoint), precision="bf16-mixed",
                         mesh_sizes=mesh_sizes(preset, layout, request), gpus_per_node=8)
print(json.dumps({"counts": traced.counts.as_dict(), "batch": traced.batch}))
"""


def _trace(nodes: int, checkpoint: bool) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _CHILD, str(nodes), "1" if checkpoint else "0", MODEL],
                          capture_output=True, text=True, check=False, timeout=1800)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"tracing {MODEL} for {nodes} node(s) failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _counts(nodes: int, retrace: bool) -> tuple[StepCounts, int]:
    """The fsdp2 step's counts with torchtitan's selective recomputation, and the micro-batch."""
    cache: dict[str, Any] = json.loads(CACHE.read_text()) if CACHE.exists() and not retrace else {}
    for checkpoint in (False, True):
        key = f"{nodes}:{int(checkpoint)}"
        if key not in cache:
            cache[key] = _trace(nodes, checkpoint)
            CACHE.parent.mkdir(parents=True, exist_ok=True)
            CACHE.write_text(json.dumps(cache, separators=(",", ":")))
    plain = StepCounts.from_dict(cache[f"{nodes}:0"]["counts"])
    full = StepCounts.from_dict(cache[f"{nodes}:1"]["counts"])
    extra = calibration.selective_recompute(calibration.recomputed(plain, full))
    return calibration.with_ops(plain, extra), int(cache[f"{nodes}:0"]["batch"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output", default="benchmarks/results/throughput.txt")
    parser.add_argument("--retrace", action="store_true", help="trace again instead of reading the cache")
    args = parser.parse_args()
    gpu = hardware.CALIBRATION_GPU.name
    inter = 400 / 8  # 400 Gb/s per GPU
    counts = {nodes: _counts(nodes, args.retrace) for nodes in sorted({row[1] for row in ROWS})}
    constants = calibration.CALIBRATION
    load = " ".join(f"{value:.1f}" for value in os.getloadavg())
    lines = [
        "plan's step-time estimate against torchtitan's published Llama 3.1 8B rows (benchmarks/bench_throughput.py)",
        f"python {platform.python_version()}, torch {version('torch')}, {os.cpu_count()} CPU(s), load average {load}",
        f"model {MODEL}, preset fsdp2, bf16-mixed, batch 2 × 8,192, torchtitan's selective checkpointing; GPU {gpu}",
        f"constants: Hopper's matmul efficiency {constants.matmul_efficiency:.4f} (fitted on llm-foundry's MPT-7B "
        "8 × H100 row, none of these), "
        f"memory_efficiency {constants.memory_efficiency}, link_efficiency {constants.link_efficiency} (priors)",
        "",
        "| row | published tokens/s/GPU | predicted | error | step s | compute s | exposed comm s | MFU | fitted on |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    errors = []
    for name, nodes, compiled, published, fitted_on, fp8 in ROWS:
        steps, batch = counts[nodes]
        estimate = throughput.estimate(steps, hardware.cluster(gpu, 8, nodes, inter), samples=batch,
                                       compile=compiled, calibration=constants, fp8=fp8)  # fmt: skip
        error = (estimate.rate - published) / published
        if not fitted_on:
            errors.append(abs(error))
        lines.append(f"| {name} | {published:,} | {estimate.rate:,.0f} | {error:+.1%} | {estimate.step_time_s:.3f} | "
                     f"{estimate.compute_s:.3f} | {estimate.exposed_comm_s:.3f} | {estimate.mfu:.1%} | "
                     f"{'yes' if fitted_on else 'no'} |")  # fmt: skip
    lines += ["", f"largest error on the rows not fitted on: {max(errors):.1%} (calibration.judged_error: "
              f"{constants.judged_error:.0%})"]  # fmt: skip
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    Path(args.output).parent.mkdir(parents=True, exist_ok=True)
    Path(args.output).write_text(text)


if __name__ == "__main__":
    main()
