"""One preset's estimate: its memory per GPU, whether it fits, how fast its step runs, and how each is known.

:func:`arithmetic_estimate` (``--params``, and presets that do not apply) and :func:`traced_estimate` (from a
:class:`lightning_presets.tools.plan.trace.Traced`) make them; :mod:`lightning_presets.tools.plan.planner`
puts them together into a plan, and :mod:`lightning_presets.tools.plan.worker` makes the traced ones in a child
process. Nothing here starts a process.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from lightning_presets.core.preset import Preset
from lightning_presets.tools.plan import layouts
from lightning_presets.tools.plan.layouts import Layout
from lightning_presets.tools.plan.presets import applicability
from lightning_presets.tools.plan.request import PlanRequest
from lightning_presets.tools.plan.text import format_bytes
from lightning_presets.tools.plan.throughput import Throughput

__all__ = ["Estimate", "PlanRequest", "arithmetic_estimate", "finish", "traced_estimate", "with_max_batch"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    """One preset's memory per GPU, whether it fits, and how we know."""

    preset: str
    rank: tuple[int, int, int]
    summary: str
    applicable: bool
    fits: bool
    evidence: str
    """``traced``, ``arithmetic + traced activations``, ``arithmetic``, or ``failed`` (the trace broke)."""
    parameters: int
    gradients: int
    optimizer: int
    activations: int | None
    """Bytes saved for backward at the end of the forward pass; ``None`` when not modelled (``--params``)."""
    total_peak: int
    """The step's peak per GPU (traced), or the model states plus the gathered weights (arithmetic)."""
    usable_gpu_bytes: int
    offloaded_per_gpu: int = 0
    """Bytes each GPU's rank keeps in CPU memory (offloaded weights, gradients and optimizer state)."""
    cpu_bytes_per_node: int = 0
    cpu_fits: bool = True
    formula: str = ""
    why: tuple[str, ...] = ()
    install: str | None = None
    """The command that installs what the preset needs, when it is missing here."""
    batch: int | None = None
    max_batch: int | None = None
    max_batch_note: str | None = None
    rank_peak: int | None = None
    """The traced step's peak of everything the rank holds, CPU-offloaded state included (traced presets)."""
    offloaded: tuple[int, int, int] = (0, 0, 0)
    """Parameters, gradients and optimizer state each GPU's rank keeps in CPU memory."""
    step: tuple[str, ...] = ()
    """How the traced step ran: the plan's evidence."""
    throughput: Throughput | None = None
    """The step time and tokens/s (traced presets; ``None`` with ``--params``: no step to time)."""

    @property
    def headroom_bytes(self) -> int:
        return self.usable_gpu_bytes - self.total_peak

    @property
    def gpu_fits(self) -> bool:
        return self.total_peak <= self.usable_gpu_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "per_gpu_bytes": {"parameters": self.parameters, "gradients": self.gradients,
                              "optimizer": self.optimizer, "activations": self.activations,
                              "total_peak": self.total_peak},
            "fits": self.fits,
            "evidence": self.evidence,
            "applicable": self.applicable,
            "usable_gpu_bytes": self.usable_gpu_bytes,
            "headroom_bytes": self.headroom_bytes,
            "offloaded_bytes_per_gpu": self.offloaded_per_gpu,
            "cpu_bytes_per_node": self.cpu_bytes_per_node,
            "cpu_fits": self.cpu_fits,
            "formula": self.formula,
            "summary": self.summary,
            "why": list(self.why),
            "install": self.install,
            "batch": self.batch,
            "max_micro_batch": self.max_batch,
            "max_micro_batch_note": self.max_batch_note,
            "rank_peak_bytes": self.rank_peak,
            "offloaded_per_gpu_bytes": dict(zip(("parameters", "gradients", "optimizer"), self.offloaded, strict=True)),
            "step": list(self.step),
            "rank": list(self.rank),
            "throughput": None if self.throughput is None else self.throughput.as_dict(),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Estimate:
        per = data["per_gpu_bytes"]
        return cls(preset=data["preset"], rank=tuple(data["rank"]), summary=data["summary"],
                   applicable=data["applicable"], fits=data["fits"], evidence=data["evidence"],
                   parameters=per["parameters"], gradients=per["gradients"], optimizer=per["optimizer"],
                   activations=per["activations"], total_peak=per["total_peak"],
                   usable_gpu_bytes=data["usable_gpu_bytes"], offloaded_per_gpu=data["offloaded_bytes_per_gpu"],
                   cpu_bytes_per_node=data["cpu_bytes_per_node"], cpu_fits=data["cpu_fits"],
                   formula=data["formula"], why=tuple(data["why"]), install=data["install"], batch=data["batch"],
                   max_batch=data["max_micro_batch"], max_batch_note=data["max_micro_batch_note"],
                   rank_peak=data["rank_peak_bytes"], step=tuple(data["step"]),
                   throughput=None if data["throughput"] is None else Throughput.from_dict(data["throughput"]),
                   offloaded=tuple(data["offloaded_per_gpu_bytes"][key]
                                   for key in ("parameters", "gradients", "optimizer")))  # fmt: skip


def _gib(value: float) -> str:
    return format_bytes(value)


def _sizes(request: PlanRequest, params: int, facts: Any = None) -> layouts.Sizes:
    return layouts.Sizes(
        params=params, gpus_per_node=request.gpus_per_node, num_nodes=request.num_nodes,
        precision=request.precision, optimizer=request.optimizer,
        largest_layer=getattr(facts, "largest_layer", 0), root_params=getattr(facts, "root_params", 0),
        block_params=getattr(facts, "block_params", 0),
    )  # fmt: skip


def finish(
    layout: Layout,
    request: PlanRequest,
    *,
    reasons: list[str],
    install: str | None,
    evidence: str,
    parameters: float,
    gradients: float,
    optimizer: float,
    activations: int | None,
    total_peak: float,
    offloaded_per_gpu: float,
    cpu_per_node: float,
    formula: str,
    notes: tuple[str, ...] = (),
    batch: int | None = None,
) -> Estimate:
    """An :class:`Estimate` from its figures: the verdict and the reasons, in words."""
    usable = int(request.usable_gpu_bytes)
    why = [layout.summary, *notes]
    applicable = not reasons
    why += [f"not applicable: {reason}" for reason in reasons]
    gpu_fits = total_peak <= usable
    cpu_fits = cpu_per_node <= request.cpu_memory_per_node
    if applicable and not gpu_fits:
        why.append(f"peak {_gib(total_peak)} per GPU > {_gib(usable)} usable")
    if cpu_per_node:
        verdict = "≤" if cpu_fits else ">"
        assumed = " (assumed)" if request.cpu_memory is None else ""
        why.append(f"needs {_gib(cpu_per_node)} of CPU memory per node {verdict} {_gib(request.cpu_memory_per_node)}"
                   f"{assumed}")  # fmt: skip
    if install:
        why.append(f"needs {install} (not installed here)")
    return Estimate(
        preset=layout.preset, rank=layout.rank, summary=layout.summary, applicable=applicable,
        fits=applicable and gpu_fits and cpu_fits, evidence=evidence, parameters=round(parameters),
        gradients=round(gradients), optimizer=round(optimizer), activations=activations,
        total_peak=round(total_peak), usable_gpu_bytes=usable, offloaded_per_gpu=round(offloaded_per_gpu),
        cpu_bytes_per_node=round(cpu_per_node), cpu_fits=cpu_fits, formula=formula, why=tuple(why),
        install=install, batch=batch,
    )  # fmt: skip


def arithmetic_estimate(
    preset: Preset, layout: Layout, request: PlanRequest, params: int, facts: Any = None, more: tuple[str, ...] = ()
) -> Estimate:
    """Model states by the layout's formula: ``--params``, and presets not traced (``facts``: the model's sizes;
    ``more``: reasons the preset does not apply that the trace found)."""
    reasons, install = applicability(preset, layout, request)
    reasons = [*reasons, *more]
    states = layouts.model_states(layout, _sizes(request, params, facts))
    return finish(layout, request, reasons=reasons, install=install, evidence="arithmetic",
                  parameters=states.parameters, gradients=states.gradients, optimizer=states.optimizer,
                  activations=None, total_peak=states.gpu + states.working_set,
                  offloaded_per_gpu=states.cpu_per_node / request.gpus_per_node, cpu_per_node=states.cpu_per_node,
                  formula=states.formula)  # fmt: skip


def traced_estimate(
    layout: Layout,
    request: PlanRequest,
    traced: Any,
    reasons: list[str],
    install: str | None,
    mesh: Mapping[str, int] | None = None,
) -> Estimate:
    """An estimate from a trace (:class:`lightning_presets.tools.plan.trace.Traced`).

    Traced layouts take every figure from the trace; the others take the model states from their formula
    and add the trace's activations and transient peak (activations and temporaries of the unwrapped model).
    The step time is the trace's operators and collectives, or the strategy's collectives by formula
    (:func:`lightning_presets.tools.plan.speed.preset_throughput`); ``mesh``: the preset's device mesh.
    """
    from lightning_presets.tools.plan.speed import preset_throughput

    speed = preset_throughput(layout, request, traced, mesh)
    if layout.traceable:
        states = (traced.parameters, traced.gradients, traced.optimizer)
        host = sum(states) if traced.offloaded else 0
        on_gpu = 0 if traced.offloaded else 1
        how = "DDP replica: the module traced unwrapped, with DDP's gradient buckets held between steps" if (
            layout.kind == "replica") else "the preset's own wrapping, traced"  # fmt: skip
        estimate = finish(layout, request, reasons=reasons, install=install, evidence=_evidence("traced", traced),
                          parameters=traced.parameters * on_gpu, gradients=traced.gradients * on_gpu,
                          optimizer=traced.optimizer * on_gpu, activations=traced.activations,
                          total_peak=traced.peak, offloaded_per_gpu=host, cpu_per_node=host * request.gpus_per_node,
                          formula=how + (" (weights, gradients and optimizer state in CPU memory)" if host else ""),
                          notes=traced.notes, batch=traced.batch)  # fmt: skip
        offloaded = states if traced.offloaded else (0, 0, 0)
        return replace(estimate, rank_peak=traced.peak_all, offloaded=offloaded, step=traced.step, throughput=speed)
    states_ = layouts.model_states(layout, _sizes(request, traced.facts.numel, traced.facts))
    estimate = finish(layout, request, reasons=reasons, install=install,
                      evidence=_evidence("arithmetic + traced activations", traced), parameters=states_.parameters,
                      gradients=states_.gradients, optimizer=states_.optimizer, activations=traced.activations,
                      total_peak=states_.gpu + states_.working_set + traced.transient_peak,
                      offloaded_per_gpu=states_.cpu_per_node / request.gpus_per_node,
                      cpu_per_node=states_.cpu_per_node,
                      formula=f"{states_.formula}; + traced activations and temporaries of the model unwrapped",
                      notes=traced.notes, batch=traced.batch)  # fmt: skip
    return replace(estimate, step=traced.step, throughput=speed)


def _evidence(kind: str, traced: Any) -> str:
    """``traced``, or ``traced, 3 and 4 of 80 blocks extrapolated`` (:mod:`lightning_presets.tools.plan.depth`)."""
    extrapolated = getattr(traced, "depth", None)
    return f"{kind}, {extrapolated}" if extrapolated else kind


def with_max_batch(estimate: Estimate, batch: int | None, note: str | None) -> Estimate:
    return replace(estimate, max_batch=batch, max_batch_note=note)
