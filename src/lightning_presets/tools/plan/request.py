"""What ``plan`` is asked: a model (a bare parameter count, or a factory to trace), the cluster, and the what-ifs.

Validated on construction (``ValueError`` naming every problem); serialised for the child process that traces
(:mod:`lightning_presets.tools.plan.worker`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.tools.plan import hardware
from lightning_presets.tools.plan.layouts import bytes_per_param
from lightning_presets.tools.plan.text import GIB, MAX_PARAMS, format_bytes

PLAN_SCHEMA = "lightning-presets/plan"
PLAN_SCHEMA_VERSION = 4
HEADROOM_ARITHMETIC = 0.3
"""``--params``: a share of each GPU for everything but model states (activations are not modelled)."""
HEADROOM_TRACED = 0.1
"""``--model``: a share of each GPU for the CUDA context, NCCL buffers and fragmentation (not traced)."""
CPU_MEMORY_PER_GPU_MEMORY = 2
"""Without ``--cpu-memory``, a node is assumed to have twice its GPUs' memory as CPU memory."""
MAX_BATCH = 2**16
KERNELS = ("cuda", "cpu")
ACTIVATION_CHECKPOINTING = ("none", "full")
FP8 = ("none", "torchao", "te")
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
    gpu_type: str = hardware.DEFAULT_GPU
    """The GPU whose peak FLOP/s, memory bandwidth and links time the step (:data:`hardware.GPUS`)."""
    inter_node_bandwidth: float | None = None
    """GB/s per GPU between nodes; ``None``: a 400 Gb/s port (50 GB/s)."""
    nvlink_bandwidth: float | None = None
    """GB/s per GPU per direction inside a node; ``None``: the GPU type's link."""
    activation_checkpointing: str = "none"
    """``full``: plan the presets that do not checkpoint activations as if they checkpointed every block."""
    compile: bool = False
    """Time the step as ``torch.compile`` runs it (fused pointwise operators, fewer launches)."""
    fp8: str = "none"
    """Time the Linear layers in fp8: ``torchao`` (``Float8Linear``) or ``te`` (Transformer Engine); memory as bf16
    (:data:`.throughput.FP8_EVIDENCE`)."""
    full_trace: bool = False
    """Trace every block, even where the model's identical blocks allow tracing 3 and 4 of them and extrapolating
    (:mod:`.depth`): slower, to check the extrapolation on this model."""

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
        if self.full_trace and self.model is None:
            problems.append("full_trace traces a model (--model)")
        if self.max_batch and self.model is None:
            problems.append("the largest batch is searched on a traced model (--model)")
        try:
            hardware.gpu(self.gpu_type)
        except ValueError as error:
            problems.append(str(error))
        for name, value in (("inter_node_bandwidth", self.inter_node_bandwidth),
                            ("nvlink_bandwidth", self.nvlink_bandwidth)):  # fmt: skip
            if value is not None and not value > 0:
                problems.append(f"{name}={value} must be a positive number of GB/s")
        if self.fp8 not in FP8:
            problems.append(f"fp8={self.fp8!r} is not one of {', '.join(FP8)}")
        if self.activation_checkpointing not in ACTIVATION_CHECKPOINTING:
            problems.append(f"activation_checkpointing={self.activation_checkpointing!r} is not one of "
                            f"{', '.join(ACTIVATION_CHECKPOINTING)}")  # fmt: skip
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
    def cluster(self) -> hardware.Cluster:
        return hardware.cluster(self.gpu_type, self.gpus_per_node, self.num_nodes, self.inter_node_bandwidth,
                                self.nvlink_bandwidth)  # fmt: skip

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
                "presets": list(self.presets), "gpu_type": self.gpu_type,
                "inter_node_bandwidth_gbps": self.inter_node_bandwidth, "nvlink_bandwidth_gbps": self.nvlink_bandwidth,
                "activation_checkpointing": self.activation_checkpointing, "compile": self.compile,
                "full_trace": self.full_trace, "fp8": self.fp8}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PlanRequest:
        return cls(gpus_per_node=data["gpus_per_node"], params=data["params"], model=data["model"],
                   num_nodes=data["num_nodes"], gpu_memory=data["gpu_memory_bytes"], precision=data["precision"],
                   optimizer=data["optimizer"], headroom=data["headroom"], cpu_memory=data["cpu_memory_bytes"],
                   batch_size=data["batch_size"], batch=data["batch"], kernels=data["kernels"],
                   max_batch=data["max_batch"], presets=tuple(data["presets"]), gpu_type=data["gpu_type"],
                   inter_node_bandwidth=data["inter_node_bandwidth_gbps"],
                   nvlink_bandwidth=data["nvlink_bandwidth_gbps"],
                   activation_checkpointing=data["activation_checkpointing"], compile=data["compile"],
                   full_trace=data["full_trace"], fp8=data.get("fp8", "none"))  # fmt: skip


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
