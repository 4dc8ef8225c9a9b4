"""Which preset fits a model: per-GPU memory under every preset, and the fastest preset that fits.

Two ways in:

* ``--model MODULE:FACTORY`` traces. For each preset, the user's model is built under fake tensors at the
  target world size, wrapped as the preset wraps it and put through one training step whose memory torch's
  trackers attribute and whose operators and collectives are counted (``tools/plan/trace.py``; it runs in a
  child process, ``tools/plan/worker.py``). Evidence ``traced`` for FSDP2, tensor parallel and DDP replicas;
  for the presets whose strategy needs CUDA to wrap (FSDP1, DeepSpeed) the model states come from a named
  formula and the activations from a trace of the model unwrapped: evidence ``arithmetic + traced
  activations``. Each preset's step time comes from the same trace (``tools/plan/speed.py``,
  ``tools/plan/throughput.py``) on the ``--gpu-type`` (``tools/plan/hardware.py``). A model of many identical
  blocks is traced with 3 and 4 of them and every figure extrapolated to all (``tools/plan/depth.py``): the
  evidence then says so (``traced, 3 and 4 of 80 blocks extrapolated``).
* ``--params COUNT`` is arithmetic over a bare parameter count: model states only (``tools/plan/layouts.py``),
  with a share of each GPU set aside for what is not modelled (activations), and no step time. Evidence
  ``arithmetic``.

A preset fits when its peak per GPU is at most the usable GPU memory (the memory less ``headroom``: the CUDA
context, NCCL buffers and allocator fragmentation, which no trace sees; and with ``--params`` the
activations too) and what it keeps in CPU memory fits the node's CPU memory (given, or assumed: twice the
node's GPU memory). Whether a preset applies at all is what ``lightning-presets check`` says for the job on
simulated GPUs: the same guards.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from lightning_presets.tools.plan.estimates import Estimate, arithmetic_estimate
from lightning_presets.tools.plan.layouts import OPTIMIZERS, PRECISIONS, bytes_per_param
from lightning_presets.tools.plan.presets import nothing_to_plan, plannable, planned_presets, unplanned
from lightning_presets.tools.plan.request import MAX_BATCH, PLAN_SCHEMA, PLAN_SCHEMA_VERSION, PlanRequest, Progress
from lightning_presets.tools.plan.text import GIB, format_bytes, format_count, format_size, format_size_up, parse_count

__all__ = [
    "GIB", "MAX_BATCH", "OPTIMIZERS", "PRECISIONS", "RULE", "Estimate", "Plan", "PlanRequest", "Progress",
    "bytes_per_param", "format_bytes", "format_count", "format_size", "parse_count", "plan", "planned_presets",
]  # fmt: skip

RULE = (
    "the fastest preset that fits (estimated tokens/s per GPU, or samples/s; equal to 3 significant digits, or "
    "without an estimate, in preference order: replicas (DDP) before sharding, then the least communication "
    "(SHARD_GRAD_OP, hybrid, full shard, tensor parallel), CPU offload last; at the same placement FSDP2 before "
    "FSDP1 before DeepSpeed, and no gradient hook before one). Fits: peak per GPU ≤ usable GPU memory, and CPU "
    "offload ≤ CPU memory per node"
)


# --------------------------------------------------------------------------------------------- the plan


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A change to the request that makes a preset fit, and that plan's fastest preset."""

    change: str
    """The flags that change (``--activation-checkpointing full``, ``--batch-size 2``, ``--num-nodes 2``)."""
    preset: str
    rate: float | None
    unit: str
    peak: int

    def as_dict(self) -> dict[str, Any]:
        return {"change": self.change, "preset": self.preset, "rate": self.rate, "unit": self.unit,
                "peak_bytes": self.peak}  # fmt: skip

    def text(self) -> str:
        speed = f", {self.rate:,.0f} {self.unit}" if self.rate else ""
        return f"{self.change}: {self.preset} fits ({format_bytes(self.peak)} per GPU{speed})"


@dataclass(frozen=True, slots=True)
class Plan:
    request: PlanRequest
    estimates: tuple[Estimate, ...]
    """Fitting presets fastest first, then the rest (:func:`order`)."""
    notes: tuple[str, ...] = field(default=())
    model_parameters: int | None = None
    """Parameters of the traced model (``--params`` gives its own count)."""
    suggestions: tuple[Suggestion, ...] = field(default=())
    """When nothing fits, the smallest changes that make a preset fit (:func:`suggest`); when something fits, the
    changes that make a faster preset fit (:func:`faster`); each planned."""

    @property
    def fitting(self) -> tuple[Estimate, ...]:
        return tuple(each for each in self.estimates if each.fits)

    @property
    def recommended(self) -> Estimate | None:
        return self.fitting[0] if self.fitting else None

    def fastest(self) -> dict[str, Any] | None:
        """The recommended preset with its estimated rate, and the runner-up that fits with how much slower it is
        (``None`` when nothing fits; rates ``None`` without a step time, as with ``--params``)."""
        best = self.recommended
        if best is None:
            return None
        unit = "tokens/s/GPU" if best.throughput is not None and best.throughput.tokens_per_s_per_gpu else "samples/s"
        runner = self.fitting[1] if len(self.fitting) > 1 else None
        rate = _rate(best)
        other = _rate(runner) if runner is not None else None
        slower = None if not rate or other is None else 1 - other / rate
        return {"preset": best.preset, "rate": rate, "unit": unit,
                "runner_up": runner.preset if runner is not None else None, "runner_up_rate": other,
                "runner_up_slower_by": slower}  # fmt: skip

    def missed(self) -> Estimate | None:
        """The fastest preset that does not fit but would run faster than the recommended one (applicable, timed)."""
        best = self.recommended
        rate = _rate(best) if best is not None else None
        if not rate:
            return None
        quicker = [each for each in self.estimates if not each.fits and each.applicable and (_rate(each) or 0) > rate]
        return max(quicker, key=lambda each: _rate(each) or 0.0, default=None)

    def fastest_text(self) -> str | None:
        """``fsdp2 at 10,643 tokens/s/GPU; runner-up fsdp_grad_op at 9,870 (7% slower)``, or ``None``."""
        data = self.fastest()
        if data is None:
            return None
        head = str(data["preset"]) + (f" at {data['rate']:,.0f} {data['unit']}" if data["rate"] else " (no step time)")
        if data["runner_up"] is None:
            return head + "; the only preset that fits"
        if data["runner_up_slower_by"] is None:
            return head + f"; runner-up {data['runner_up']} (preference order, no step time to compare)"
        return head + str(f"; runner-up {data['runner_up']} at {data['runner_up_rate']:,.0f} "
                       f"({data['runner_up_slower_by']:.0%} slower)")  # fmt: skip

    @property
    def exit_code(self) -> int:
        return 0 if self.fitting else 1

    @property
    def evidence(self) -> str:
        if not self.request.traced:
            return "none: arithmetic estimate of model states only; nothing was built or measured"
        kinds = sorted({each.evidence for each in self.estimates})
        return (f"traced under fake tensors at world size {self.request.world_size} (per preset: {', '.join(kinds)})"
                + "".join(f"; {line}" for line in self.step))  # fmt: skip

    @property
    def step(self) -> tuple[str, ...]:
        """How the traced steps ran (the loss, precision, optimizer, attention kernels, eager or compiled), once."""
        return tuple(dict.fromkeys(line for each in self.estimates for line in each.step))

    @property
    def failed(self) -> tuple[Estimate, ...]:
        """The presets whose trace failed: no figures to judge them by."""
        return tuple(each for each in self.estimates if each.evidence == "failed")

    def trainer_line(self) -> str | None:
        best = self.recommended
        if best is None:
            return None
        r = self.request
        return (
            f'Trainer(strategy="{best.preset}", accelerator="cuda", devices={r.gpus_per_node}, '
            f'num_nodes={r.num_nodes}, precision="{r.precision}")'
        )

    def fabric_line(self) -> str | None:
        line = self.trainer_line()
        return None if line is None else "Fabric" + line.removeprefix("Trainer")

    def check_command(self) -> str | None:
        best = self.recommended
        if best is None:
            return None
        r = self.request
        model = f" --model {r.model}" if r.model else ""
        return (
            f"lightning-presets check --strategy {best.preset} --accelerator cuda --devices {r.gpus_per_node} "
            f"--num-nodes {r.num_nodes} --precision {r.precision} --gpus {r.gpus_per_node} "
            f"--gpu-memory {format_size(r.gpu_memory)}{model}"
        )

    def hint(self) -> str | None:
        """When nothing fits: an offload preset whose GPU side fits, with the CPU memory it needs, or more GPUs."""
        if self.fitting:
            return None
        r = self.request
        offload = [
            each
            for each in self.estimates
            if each.applicable and each.gpu_fits and each.cpu_bytes_per_node and each.evidence != "failed"
        ]
        parts = []
        if self.failed:
            parts.append(f"not judged (the trace failed): {', '.join(each.preset for each in self.failed)}")
        if offload:
            best = min(offload, key=lambda each: each.cpu_bytes_per_node)
            parts.append(f"{best.preset} fits on the GPU ({format_bytes(best.total_peak)} per GPU) and needs "
                         f"{format_bytes(best.cpu_bytes_per_node)} of CPU memory per node, more than the "
                         f"{r.cpu_memory_text()}: on nodes with that much, pass --cpu-memory "
                         f"{format_size_up(best.cpu_bytes_per_node)}")  # fmt: skip
        size = format_count(r.params) + " parameters" if r.params else r.model
        smaller = "" if r.params else ", or a smaller --batch-size"
        parts.append(f"nothing fits {size} on {r.gpus_per_node} GPU(s) × {r.num_nodes} node(s) of "
                     f"{format_size(r.gpu_memory)}: add GPUs (--gpus) or nodes (--num-nodes) so sharding divides "
                     f"more, or a lower precision (bf16-true){smaller}")  # fmt: skip
        return "; ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        best = self.recommended
        return {
            "schema": PLAN_SCHEMA,
            "schema_version": PLAN_SCHEMA_VERSION,
            "evidence": self.evidence,
            "request": self.request.as_dict(),
            "model_parameters": self.model_parameters if self.request.traced else self.request.params,
            "recommended": best.preset if best else None,
            "fastest": self.fastest(),
            "rule": RULE,
            "trainer": self.trainer_line(),
            "fabric": self.fabric_line(),
            "check": self.check_command(),
            "hint": self.hint(),
            "suggestions": [each.as_dict() for each in self.suggestions],
            "step": list(self.step),
            "presets": [each.as_dict() for each in self.estimates],
            "notes": list(self.notes),
            "exit_code": self.exit_code,
        }


def _rate(estimate: Estimate) -> float | None:
    speed = estimate.throughput
    return speed.rate if speed is not None and speed.rate > 0 and estimate.evidence != "failed" else None


def _speed(estimate: Estimate) -> float:
    """Minus the estimate's rate to 3 significant digits (nearly equal rates tie), 0 without one."""
    rate = estimate.throughput.rate if estimate.throughput is not None else 0.0
    return -float(f"{rate:.3g}") if rate > 0 else 0.0


def order(estimates: list[Estimate] | tuple[Estimate, ...]) -> tuple[Estimate, ...]:
    """Fitting first, fastest first; ties (and presets without a step time) in the preference order."""
    return tuple(sorted(estimates, key=lambda each: (not each.fits, _speed(each), each.rank, each.preset)))


def plan(request: PlanRequest, progress: Progress | None = None, notes: tuple[str, ...] = (), *,
         suggest_changes: bool = False, faster_changes: bool = False) -> Plan:  # fmt: skip
    """Plan every preset the planner knows (or ``request.presets``): fitting ones first, fastest first;
    ``suggest_changes``: when nothing fits, also plan the smallest changes that make a preset fit (:func:`suggest`:
    more plans, traced ones trace again; ``lightning-presets plan`` asks for them, ``check --model`` does not);
    ``faster_changes``: when a preset fits but a faster one does not, plan the changes that make it fit (:func:`faster`,
    ``plan --faster``).

    With a model, the tracing runs in a child process (:func:`lightning_presets.tools.plan.worker.run`):
    a factory that aborts the interpreter cannot take the caller down. Raises ``ValueError`` for a bad
    request and :class:`lightning_presets.tools.plan.worker.PlanFailed` when the model cannot be planned.
    """
    result = _plan(request, progress, notes)
    if not suggest_changes or not any(each.applicable for each in result.estimates):
        return result
    if not result.fitting:
        return replace(result, suggestions=suggest(request, result, progress))
    return replace(result, suggestions=faster(request, result, progress)) if faster_changes else result


def _plan(request: PlanRequest, progress: Progress | None, notes: tuple[str, ...]) -> Plan:
    notes = (*notes, *unplanned(request))
    if not plannable(request):
        raise ValueError(nothing_to_plan())
    if request.params is not None:
        estimates = [arithmetic_estimate(preset, layout, request, request.params)
                     for preset, layout in plannable(request)]  # fmt: skip
        return Plan(request, order(estimates), notes)
    from lightning_presets.tools.plan import worker as plan_worker  # here: it imports torch only when a model is traced

    estimates, parameters = plan_worker.run(request, progress)
    return Plan(request, order(estimates), notes, parameters)


GPUS_PER_NODE = 8
"""GPUs per node tried up to (an HGX/DGX node's)."""
MORE_NODES = 8
"""More nodes are tried by doubling, up to this many times the request's."""


def _changes(request: PlanRequest, batch: int | None) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """The changes tried when nothing fits, each a sequence of requests from the smallest step up: checkpointing
    (one step), a smaller micro-batch (halved down to 1, traced requests of a known batch), more GPUs (nodes
    doubled)."""
    changes: list[tuple[str, str, list[dict[str, Any]]]] = []
    if request.traced and request.activation_checkpointing == "none":
        changes.append(("checkpointing", "--activation-checkpointing full", [{"activation_checkpointing": "full"}]))
    if request.traced and batch and batch > 1:
        sizes = []
        size = batch
        while size > 1:
            size = max(1, size // 2)
            sizes.append({"batch_size": size})
        changes.append(("micro-batch", "--batch-size {batch_size}", sizes))
    gpus: list[dict[str, Any]] = []
    per_node = request.gpus_per_node
    while per_node * 2 <= GPUS_PER_NODE:
        per_node *= 2
        gpus.append({"gpus_per_node": per_node})
    changes.append(("more GPUs per node", "--gpus {gpus_per_node}", gpus))
    nodes = []
    count = request.num_nodes
    while count * 2 <= MORE_NODES * request.num_nodes:
        count *= 2
        nodes.append({"num_nodes": count, "gpus_per_node": max(per_node, request.gpus_per_node)})
    changes.append(("more nodes", "--gpus {gpus_per_node} --num-nodes {num_nodes}", nodes))
    return changes


def faster(request: PlanRequest, result: Plan, progress: Progress | None = None) -> tuple[Suggestion, ...]:
    """When a preset fits but one that does not would run faster (full sharding that misses by a few GiB, where an
    offload preset fits): the smallest change of the same job (checkpointing, a smaller micro-batch; not more GPUs)
    that makes one of the faster presets fit, kept where it is still faster than the recommended preset."""
    best = _rate(result.fitting[0]) or 0.0
    quicker = tuple(each.preset for each in result.estimates
                    if not each.fits and each.applicable and (_rate(each) or 0.0) > best)  # fmt: skip
    if not best or not quicker:
        return ()
    found = suggest(replace(request, presets=quicker), result, progress, kinds=("checkpointing", "micro-batch"))
    return tuple(each for each in found if each.rate is not None and each.rate > best)


def suggest(request: PlanRequest, result: Plan, progress: Progress | None = None,
            kinds: tuple[str, ...] | None = None) -> tuple[Suggestion, ...]:  # fmt: skip
    """When nothing fits: for each kind of change (:func:`_changes`; ``kinds``: only these), the smallest that makes a
    preset fit, planned as the request itself is (traced changes trace again), with that plan's fastest preset and
    its speed."""
    batch = next((each.batch for each in result.estimates if each.batch), None)
    found: list[Suggestion] = []
    for kind, flag, steps in _changes(request, batch):
        if kinds is not None and kind not in kinds:
            continue
        for step in steps:
            changed = replace(request, **step)
            tried = _plan(changed, progress, ())
            best = tried.recommended
            if best is None:
                continue
            rate = best.throughput.rate if best.throughput is not None and best.throughput.rate > 0 else None
            unit = "tokens/s/GPU" if best.throughput is not None and best.throughput.tokens_per_s_per_gpu else (
                "samples/s")  # fmt: skip
            found.append(Suggestion(flag.format(**step), best.preset, rate, unit, best.total_peak))
            break
    return tuple(found)
