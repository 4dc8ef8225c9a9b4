"""``check --model``: the job's predicted peak memory per GPU against ``--gpu-memory`` (LP730, LP731).

The check plans the model under the job's preset (``tools.plan``: traced where the strategy can be traced)
for the world the Trainer resolved. A traced peak above the GPU memory is an error: the step cannot fit.
A traced peak inside the headroom kept for what no trace sees (CUDA context, NCCL buffers, fragmentation),
or an arithmetic estimate above the memory (FSDP1 and DeepSpeed are not traced), is a warning.
"""

from __future__ import annotations

from dataclasses import replace

from lightning_presets.core.codes import Code
from lightning_presets.core.findings import Finding, UsageError
from lightning_presets.tools import plan as _plan
from lightning_presets.tools.check.request import COMMAND as CHECK
from lightning_presets.tools.check.resolved import Resolved

_MODEL = "lightning_presets.tools.plan.reference_models:decoder_tiny"

PEAK_EXCEEDS_MEMORY = Code(
    code="LP730", severity="error", stage="check", title="the traced peak memory per GPU exceeds --gpu-memory",
    evidence="source: torch/cuda, the caching allocator raises torch.OutOfMemoryError when a step's peak exceeds the "
    "device's memory (torch 2.13)",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cuda --gpus 2 --devices 2 --gpu-memory 512KiB "
    f"--model {_MODEL}",
    fixed=f"{CHECK} --strategy ddp_static_graph --accelerator cuda --gpus 2 --devices 2 --gpu-memory 80GiB "
    f"--model {_MODEL}",
)  # fmt: skip

PEAK_WITHIN_HEADROOM = Code(
    code="LP731", severity="warning", stage="check",
    title="a predicted peak within the headroom of --gpu-memory, or above it by arithmetic",
    fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 2 --devices 2 --gpu-memory 620KiB --model {_MODEL}",
    fixed=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 2 --devices 2 --gpu-memory 80GiB --model {_MODEL}",
)  # fmt: skip

CODES: tuple[Code, ...] = (PEAK_EXCEEDS_MEMORY, PEAK_WITHIN_HEADROOM)


def _gib(value: float) -> str:
    return _plan.format_bytes(value)


def _breakdown(estimate: _plan.Estimate) -> str:
    parts = [("parameters", estimate.parameters), ("gradients", estimate.gradients),
             ("optimizer", estimate.optimizer), ("activations", estimate.activations or 0)]  # fmt: skip
    return " + ".join(f"{name} {_gib(value)}" for name, value in parts) + " + working memory"


def _alternatives(request: _plan.PlanRequest) -> str:
    """The other presets that fit (a second plan, only when the job's preset does not)."""
    others = tuple(name for name in _plan.planned_presets() if name not in request.presets)
    if not others:
        return ""
    fitting = [f"{each.preset} ({_gib(each.total_peak)}, {each.evidence})"
               for each in _plan.plan(replace(request, presets=others)).fitting]  # fmt: skip
    return ("presets that fit: " + ", ".join(fitting)) if fitting else "no preset fits: add GPUs or nodes"


def memory_findings(
    model: str, gpu_memory: int | None, resolved: Resolved, call: str
) -> tuple[list[Finding], list[str]]:
    """Findings (LP730/LP731) and notes for ``--model`` on the resolved job; ``UsageError`` if the model cannot
    be planned."""
    from lightning_presets.tools.plan.worker import PlanFailed

    preset = resolved.preset
    if gpu_memory is None:
        return [], [f"--model {model}: no --gpu-memory to compare its plan with; pass e.g. --gpu-memory 80GiB"]
    if preset is None or preset not in _plan.planned_presets():
        name = resolved.strategy_class.rsplit(".", 1)[-1] + (f" ({preset!r})" if preset else "")
        return [], [f"--model {model}: the memory plan covers the presets with a GPU memory layout, not {name}"]
    if resolved.precision not in _plan.PRECISIONS:
        return [], [f"--model {model}: precision {resolved.precision!r} is not planned"]
    try:
        request = _plan.PlanRequest(model=model, gpus_per_node=resolved.devices_per_node,
                                    num_nodes=resolved.num_nodes, gpu_memory=gpu_memory,
                                    precision=resolved.precision, presets=(preset,))  # fmt: skip
        (estimate,) = _plan.plan(request).estimates
        if estimate.evidence == "failed":  # no figures to judge the job by: say so, never "valid"
            raise UsageError(f"--model {model}: {preset} could not be planned: {estimate.why[-1]}")
        peak = estimate.total_peak
        plan_command = (f"lightning-presets plan --model {model} --gpus {resolved.devices_per_node} --num-nodes "
                        f"{resolved.num_nodes} --gpu-memory {_plan.format_size(gpu_memory)}")  # fmt: skip
        summary = f"--model {model}: {preset} needs {_gib(peak)} per GPU ({estimate.evidence}), {_breakdown(estimate)}"
        if estimate.evidence.startswith("traced") and peak > gpu_memory:
            alternatives = _alternatives(request)
            return [PEAK_EXCEEDS_MEMORY.finding(
                f"{call}: the traced training step of {model} needs {_gib(peak)} per GPU under {preset!r} "
                f"({_breakdown(estimate)}), more than the {_gib(gpu_memory)} of each GPU: it would run out of memory",
                (f"{alternatives}; " if alternatives else "") + f"see `{plan_command}`",
            )], []  # fmt: skip
    except (PlanFailed, ValueError) as error:
        raise UsageError(f"--model {model}: {error}") from None
    if peak <= request.usable_gpu_bytes:
        return [], [summary]
    why = ("an arithmetic estimate (the strategy is not traced) above the GPU memory" if peak > gpu_memory else
           f"within the {request.effective_headroom:.0%} of each GPU kept for the CUDA context, NCCL buffers and "
           "fragmentation, which no trace sees")  # fmt: skip
    return [PEAK_WITHIN_HEADROOM.finding(
        f"{call}: {model} needs {_gib(peak)} per GPU under {preset!r} ({estimate.evidence}) of "
        f"{_gib(gpu_memory)}: {why}",
        "confirm on one GPU with torch.cuda.max_memory_allocated(), or find the batch that fits: "
        f"`{plan_command} --max-batch`",
    )], [summary]  # fmt: skip
