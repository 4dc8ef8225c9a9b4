"""The planner's data and per-preset estimates: the request, one preset's figures, and how they are made.

``tools.plan`` puts them together into a plan; ``tools.plan_worker`` makes the traced ones in a child
process. Nothing here starts a process.
"""

from __future__ import annotations

import math
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from lightning_presets.core.environment import DENY_VARIABLE
from lightning_presets.core.preset import Preset
from lightning_presets.registry import catalog
from lightning_presets.registry.codes import MISSING_DEPENDENCY
from lightning_presets.registry.requirements import is_importable
from lightning_presets.tools.plan import layouts
from lightning_presets.tools.plan.layouts import Layout, bytes_per_param

PLAN_SCHEMA = "lightning-presets/plan"
PLAN_SCHEMA_VERSION = 3
GIB = 2**30
HEADROOM_ARITHMETIC = 0.3
"""``--params``: a share of each GPU for everything but model states (activations are not modelled)."""
HEADROOM_TRACED = 0.1
"""``--model``: a share of each GPU for the CUDA context, NCCL buffers and fragmentation (not traced)."""
CPU_MEMORY_PER_GPU_MEMORY = 2
"""Without ``--cpu-memory``, a node is assumed to have twice its GPUs' memory as CPU memory."""
MAX_PARAMS = 10**18
MAX_BATCH = 2**16
KERNELS = ("cuda", "cpu")
_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}
Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``: called while tracing (``total`` may grow as batch sizes are searched)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    """A model (a bare parameter count, or a factory to trace) and the cluster to plan it for."""

    gpus_per_node: int
    params: int | None = None
    model: str | None = None
    """``MODULE:FACTORY``: a function or class returning a LightningModule (or nn.Module) with an
    ``example_input_array``; traced."""
    num_nodes: int = 1
    gpu_memory: int = 80 * GIB
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    """For ``--params``, and for a model without ``configure_optimizers``."""
    headroom: float | None = None
    """Share of each GPU not planned for; ``None``: 0.3 with ``params``, 0.1 with ``model``."""
    cpu_memory: int | None = None
    """CPU memory per node in bytes; ``None``: assumed (:data:`CPU_MEMORY_PER_GPU_MEMORY`)."""
    batch_size: int | None = None
    """Overrides the batch dimension of the batch (``example_input_array`` or ``batch``)."""
    batch: str | None = None
    """``MODULE:FUNCTION`` returning one batch as the dataloader yields it, for ``training_step``; without it,
    ``example_input_array`` is the batch."""
    kernels: str = "cuda"
    """Whose kernels the step is planned with: ``cuda`` (the target: attention as CUDA's fused kernels keep it,
    foreach optimizers) or ``cpu`` (as a run on CPU takes them: to compare the plan with one)."""
    max_batch: bool = False
    """Also search the largest micro-batch that fits, per preset (traced runs)."""
    presets: tuple[str, ...] = ()
    """Plan only these presets; all the planner knows when empty."""
    timeout_s: float = 900.0

    def __post_init__(self) -> None:
        problems = []
        if (self.params is None) == (self.model is None):
            problems.append("give either params or model")
        if self.params is not None and not 0 < self.params <= MAX_PARAMS:
            problems.append(f"params={self.params} must be between 1 and {MAX_PARAMS:.0e}")
        if self.gpus_per_node < 1:
            problems.append(f"gpus={self.gpus_per_node} must be 1 or more")
        if self.num_nodes < 1:
            problems.append(f"num_nodes={self.num_nodes} must be 1 or more")
        if self.gpu_memory <= 0:
            problems.append(f"gpu_memory={self.gpu_memory} must be positive")
        if self.headroom is not None and not 0 <= self.headroom < 1:
            problems.append(f"headroom={self.headroom} must be at least 0 and below 1")
        if self.cpu_memory is not None and self.cpu_memory <= 0:
            problems.append(f"cpu_memory={self.cpu_memory} must be positive")
        if self.batch_size is not None and not 0 < self.batch_size <= MAX_BATCH:
            problems.append(f"batch_size={self.batch_size} must be between 1 and {MAX_BATCH}")
        if self.batch_size is not None and self.model is None:
            problems.append("batch_size needs a model (--model)")
        if self.batch is not None and self.model is None:
            problems.append("batch needs a model (--model)")
        if self.kernels not in KERNELS:
            problems.append(f"kernels={self.kernels!r} is not one of {', '.join(KERNELS)}")
        if self.max_batch and self.model is None:
            problems.append("the largest batch is searched on a traced model (--model)")
        if self.model is not None:
            problems += _spec_problems(self.model, "--model")
        if self.batch is not None:
            problems += _spec_problems(self.batch, "--batch")
        if problems:
            raise ValueError("; ".join(problems))
        bytes_per_param(self.precision, self.optimizer)  # validates both names

    @property
    def traced(self) -> bool:
        return self.model is not None

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def effective_headroom(self) -> float:
        if self.headroom is not None:
            return self.headroom
        return HEADROOM_TRACED if self.traced else HEADROOM_ARITHMETIC

    @property
    def usable_gpu_bytes(self) -> float:
        return self.gpu_memory * (1 - self.effective_headroom)

    @property
    def cpu_memory_per_node(self) -> int:
        if self.cpu_memory is not None:
            return self.cpu_memory
        return CPU_MEMORY_PER_GPU_MEMORY * self.gpus_per_node * self.gpu_memory

    def cpu_memory_text(self) -> str:
        if self.cpu_memory is not None:
            return f"{_gib(self.cpu_memory)} of CPU memory per node"
        return (f"{_gib(self.cpu_memory_per_node)} of CPU memory per node assumed ({CPU_MEMORY_PER_GPU_MEMORY} × "
                f"{self.gpus_per_node} × {_gib(self.gpu_memory)} of GPU memory; pass --cpu-memory)")  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {"params": self.params, "model": self.model, "gpus_per_node": self.gpus_per_node,
                "num_nodes": self.num_nodes, "gpu_memory_bytes": self.gpu_memory, "precision": self.precision,
                "optimizer": self.optimizer, "headroom": self.effective_headroom,
                "cpu_memory_bytes": self.cpu_memory, "cpu_memory_bytes_assumed": self.cpu_memory is None,
                "cpu_memory_per_node_bytes": self.cpu_memory_per_node, "batch_size": self.batch_size,
                "batch": self.batch, "kernels": self.kernels, "max_batch": self.max_batch,
                "presets": list(self.presets)}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanRequest:
        return cls(gpus_per_node=data["gpus_per_node"], params=data["params"], model=data["model"],
                   num_nodes=data["num_nodes"], gpu_memory=data["gpu_memory_bytes"], precision=data["precision"],
                   optimizer=data["optimizer"], headroom=data["headroom"], cpu_memory=data["cpu_memory_bytes"],
                   batch_size=data["batch_size"], batch=data["batch"], kernels=data["kernels"],
                   max_batch=data["max_batch"], presets=tuple(data["presets"]))  # fmt: skip


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
                   offloaded=tuple(data["offloaded_per_gpu_bytes"][key]
                                   for key in ("parameters", "gradients", "optimizer")))  # fmt: skip


def _gib(value: float) -> str:
    return format_bytes(value)


def import_path() -> list[str]:
    """Where the planner's child imports ``--model`` from: the current directory first, as ``python -m`` and
    ``python -c`` put it (the console script puts its own folder there instead), then this process's path."""
    import os

    here = os.getcwd()
    return list(dict.fromkeys([here, *(entry or here for entry in sys.path)]))


def _spec_problems(spec: str, flag: str) -> list[str]:
    """What is wrong with ``MODULE:FUNCTION`` that can be told without importing anything."""
    from importlib.machinery import PathFinder

    module, sep, attr = spec.partition(":")
    if not sep or not re.fullmatch(r"[A-Za-z_][\w.]*", module.strip()) or not attr.strip():
        return [f"{flag} {spec!r} is not MODULE:FUNCTION, e.g. my_project.models:build_model"]
    top = module.strip().split(".")[0]
    try:
        found = top in sys.modules or PathFinder.find_spec(top, import_path()) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        return [f"{flag} {spec}: no module named {top!r} here (run from the directory that holds it, or install it)"]
    return []


# --------------------------------------------------------------------------------------------- presets


def _layouts() -> list[tuple[Preset, Layout]]:
    """Every installed strategy preset of a family the planner knows, in preference order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        presets = catalog.strategy_catalog().presets
    found = [(preset, layout) for preset in presets.values() if (layout := layouts.layout_of(preset)) is not None]
    return sorted(found, key=lambda pair: (pair[1].rank, pair[0].name))


def planned_presets() -> list[str]:
    """The names of the presets the planner can plan, in preference order."""
    return [preset.name for preset, _ in _layouts()]


def nothing_to_plan() -> str:
    """Why there is no preset to plan: the catalog has none with a GPU memory layout (denied, or not installed)."""
    import os

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = sorted(catalog.strategy_catalog().presets)
    deny = os.environ.get(DENY_VARIABLE, "").strip()
    why = f"{DENY_VARIABLE}={deny} is set" if deny else "none is installed"
    return (f"nothing to plan: no strategy preset with a GPU memory layout is loaded ({why}; loaded: "
            f"{', '.join(loaded) or 'none'}); remove lightning-presets from {DENY_VARIABLE} to plan its "
            "presets")  # fmt: skip


def plannable(request: PlanRequest) -> list[tuple[Preset, Layout]]:
    """The presets to plan for ``request`` (``request.presets``, or all), in preference order."""
    found = _layouts()
    if not found:
        return []
    unknown = sorted(set(request.presets) - {preset.name for preset, _ in found})
    if unknown:
        raise ValueError(f"cannot plan {', '.join(unknown)}: the presets with a GPU memory layout are "
                         f"{', '.join(preset.name for preset, _ in found)}")  # fmt: skip
    return [(preset, layout) for preset, layout in found if not request.presets or preset.name in request.presets]


def unplanned(request: PlanRequest) -> tuple[str, ...]:
    """A note naming the installed strategy presets the planner has no layout for (TPU, unknown families)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        presets = catalog.strategy_catalog().presets
    names = sorted(
        name for name, preset in presets.items()
        if layouts.layout_of(preset) is None and (not request.presets or name in request.presets)
    )  # fmt: skip
    return (f"not planned (no GPU memory layout): {', '.join(names)}",) if names else ()


def mesh_sizes(preset: Preset, layout: Layout, request: PlanRequest) -> dict[str, int] | None:
    """The device mesh the preset builds for this cluster (ModelParallelStrategy presets), else ``None``."""
    if layout.family != "model_parallel" or preset.mesh is None:
        return None
    return preset.mesh.resolve(preset.init_params, request.gpus_per_node, request.num_nodes)


def _degenerate(preset: Preset, layout: Layout, request: PlanRequest) -> str | None:
    """Why the preset's mesh on this cluster makes it another preset in disguise (the planner recommends that one)."""
    sizes = preset.mesh.resolve(preset.init_params, request.gpus_per_node, request.num_nodes) if preset.mesh else None
    if not sizes:
        return None
    if layout.tensor_parallel and sizes.get("tensor_parallel", 1) < 2:
        return (f"with {request.gpus_per_node} GPU per node the tensor-parallel size would be 1: that is FSDP2 "
                "across nodes, use strategy='fsdp2'")  # fmt: skip
    if layout.kind == "hybrid" and sizes.get("replicate", 1) < 2:
        return (f"with {request.num_nodes} node the mesh has a single replica: that is full sharding inside the node "
                "with extra process groups, use strategy='fsdp2' (or plan --num-nodes 2 or more)")  # fmt: skip
    return None


def applicability(preset: Preset, layout: Layout, request: PlanRequest) -> tuple[list[str], str | None]:
    """Why the preset does not apply to this job (empty when it does), and an install command if it needs one.

    The job is checked as ``lightning-presets check`` checks it, on simulated GPUs: the presets' own guards.
    A missing optional dependency is not a reason: the plan is for the target machine.
    """
    from lightning_presets.tools.check.engine import check_job
    from lightning_presets.tools.check.request import CheckRequest

    install = next((each.install_command for each in preset.requires if not is_importable(each.module)), None)
    arguments = {"strategy": preset.name, "accelerator": "cuda", "devices": request.gpus_per_node,
                 "num_nodes": request.num_nodes, "precision": request.precision}  # fmt: skip
    report = check_job(CheckRequest(arguments=arguments, gpus=request.gpus_per_node, gpu_memory=request.gpu_memory))
    reasons = [f"{each.code}: {each.message}" for each in report.findings
               if each.severity == "error" and each.code != MISSING_DEPENDENCY.code]  # fmt: skip
    degenerate = _degenerate(preset, layout, request)
    if degenerate:
        reasons.append(degenerate)
    return reasons, install


# --------------------------------------------------------------------------------------------- estimates


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
    layout: Layout, request: PlanRequest, traced: Any, reasons: list[str], install: str | None
) -> Estimate:
    """An estimate from a trace (:class:`lightning_presets.tools.plan.trace.Traced`).

    Traced layouts take every figure from the trace; the others take the model states from their formula
    and add the trace's activations and transient peak (activations and temporaries of the unwrapped model).
    """
    if layout.traceable:
        states = (traced.parameters, traced.gradients, traced.optimizer)
        host = sum(states) if traced.offloaded else 0
        on_gpu = 0 if traced.offloaded else 1
        how = "DDP replica: the module traced unwrapped, with DDP's gradient buckets held between steps" if (
            layout.kind == "replica") else "the preset's own wrapping, traced"  # fmt: skip
        estimate = finish(layout, request, reasons=reasons, install=install, evidence="traced",
                          parameters=traced.parameters * on_gpu, gradients=traced.gradients * on_gpu,
                          optimizer=traced.optimizer * on_gpu, activations=traced.activations,
                          total_peak=traced.peak, offloaded_per_gpu=host, cpu_per_node=host * request.gpus_per_node,
                          formula=how + (" (weights, gradients and optimizer state in CPU memory)" if host else ""),
                          notes=traced.notes, batch=traced.batch)  # fmt: skip
        offloaded = states if traced.offloaded else (0, 0, 0)
        return replace(estimate, rank_peak=traced.peak_all, offloaded=offloaded, step=traced.step)
    states_ = layouts.model_states(layout, _sizes(request, traced.facts.numel, traced.facts))
    estimate = finish(layout, request, reasons=reasons, install=install,
                      evidence="arithmetic + traced activations", parameters=states_.parameters,
                      gradients=states_.gradients, optimizer=states_.optimizer, activations=traced.activations,
                      total_peak=states_.gpu + states_.working_set + traced.transient_peak,
                      offloaded_per_gpu=states_.cpu_per_node / request.gpus_per_node,
                      cpu_per_node=states_.cpu_per_node,
                      formula=f"{states_.formula}; + traced activations and temporaries of the model unwrapped",
                      notes=traced.notes, batch=traced.batch)  # fmt: skip
    return replace(estimate, step=traced.step)


def with_max_batch(estimate: Estimate, batch: int | None, note: str | None) -> Estimate:
    return replace(estimate, max_batch=batch, max_batch_note=note)


# --------------------------------------------------------------------------------------------- text


def parse_count(text: str) -> int:
    """``7B``, ``1.3b``, ``350M``, ``125k``, ``7e9`` or ``7000000000`` -> a parameter count."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([a-zA-Z]?)\s*", text)
    if not match or match.group(2).lower() not in _COUNT_SUFFIX:
        raise ValueError(f"{text!r} is not a parameter count such as 7B, 350M or 7000000000")
    value = float(match.group(1)) * _COUNT_SUFFIX[match.group(2).lower()]
    if not math.isfinite(value) or value > MAX_PARAMS:
        raise ValueError(f"{text!r} is more parameters than any model has (at most {MAX_PARAMS:.0e})")
    if round(value) <= 0:
        raise ValueError(f"{text!r} is not a positive parameter count")
    return round(value)


def format_count(count: int | None) -> str:
    if count is None:
        return "?"
    for suffix, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            return f"{count / size:.3g}{suffix}"
    return str(count)


def format_bytes(size: float) -> str:
    """``26.5 GiB``, ``812.3 KiB``: one decimal in the largest unit that keeps the number at least 1."""
    for suffix, unit in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= unit:
            return f"{size / unit:.1f} {suffix}"
    return f"{size:.0f} B"


def format_size(size: int) -> str:
    """Bytes as the ``--gpu-memory`` flag takes them (``80GiB`` when exact)."""
    for suffix, unit in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def format_size_up(size: float) -> str:
    """At least ``size`` bytes, in whole GiB as ``--cpu-memory`` takes them."""
    return f"{math.ceil(size / GIB)}GiB"
