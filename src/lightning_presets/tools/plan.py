"""Which preset fits a model: a documented, arithmetic-only estimate of per-GPU memory for each preset.

Evidence: none. Nothing is built, measured or launched; the numbers are arithmetic over the model below.

Memory model (the "model states" accounting of the ZeRO paper, Rajbhandari et al. 2020):

* Every parameter costs ``weights + grads + optimizer`` bytes. With AdamW and mixed precision that is
  16 bytes per parameter. Lightning's ``bf16-mixed``/``16-mixed`` keeps fp32 weights and autocasts, so
  the 16 bytes are 4 (fp32 weights) + 4 (fp32 grads) + 8 (Adam's two fp32 moments); DeepSpeed keeps
  half-precision weights and an fp32 master copy in the optimizer instead: 2 + 2 + 12. ``*-true``
  precisions keep everything in that dtype (bf16-true AdamW: 2 + 2 + 4). ``sgd`` means SGD with
  momentum: one state instead of Adam's two (and DeepSpeed's fp32 master copy in mixed precision).
* Sharding divides a component by the number of ranks that share it:
  DDP shards nothing; ``fsdp_grad_op`` (ZeRO-2 / SHARD_GRAD_OP) shards grads and optimizer states but
  holds full weights between forward and backward; ``fsdp2`` (full shard, ZeRO-3) shards all three over
  the world; ``fsdp_hybrid_shard`` shards all three within a node and replicates across nodes;
  ``tp2d_hybrid`` splits tensors over the GPUs of a node and shards over nodes (all three divided by the
  world size); offload presets keep the offloaded components in CPU memory (counted per node).
* Activations are not modelled. A fixed fraction of every GPU (``headroom``, default 30%) is set aside
  for activations, the all-gathered working set of FSDP, communication buckets, the CUDA context and
  allocator fragmentation: model states must fit in the rest. Large batches or long sequences can need
  more: raise ``headroom``, or pick a preset that checkpoints activations (the ``*_ckpt`` ones).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from lightning_presets.registry import catalog

PLAN_SCHEMA = "lightning-presets/plan"
PLAN_SCHEMA_VERSION = 1
DEFAULT_HEADROOM = 0.3
GIB = 2**30

Optimizer = Literal["adamw", "sgd"]
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")
PRECISIONS: tuple[str, ...] = ("bf16-mixed", "16-mixed", "32-true", "bf16-true", "16-true", "64-true")
_DTYPE_BYTES = {"32-true": 4, "64-true": 8, "bf16-true": 2, "16-true": 2}
_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}

Sharding = Literal["none", "grad_op", "full", "node", "offload_optimizer", "offload_all"]


@dataclass(frozen=True, slots=True)
class BytesPerParam:
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def bytes_per_param(precision: str, optimizer: str, *, deepspeed: bool = False) -> BytesPerParam:
    """Bytes of weights, gradients and optimizer state per parameter (see the module docstring)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    states = 2 if optimizer == "adamw" else 1
    if precision.endswith("-mixed"):
        if deepspeed:  # half-precision weights and grads; fp32 master copy + fp32 states in the optimizer
            return BytesPerParam(2, 2, 4 + 4 * states)
        return BytesPerParam(4, 4, 4 * states)  # Lightning AMP: fp32 weights, autocast
    size = _DTYPE_BYTES[precision]
    return BytesPerParam(size, size, size * states)


@dataclass(frozen=True, slots=True, kw_only=True)
class PresetModel:
    """How one built-in preset places model states."""

    name: str
    rank: int
    """Preference when several fit: lower is faster."""
    sharding: Sharding
    summary: str
    deepspeed: bool = False
    needs_multi_node: bool = False
    needs_multi_gpu_node: bool = False
    extra: str | None = None
    """The ``lightning-presets`` extra the preset needs."""
    note: str = ""


# Preference order: no sharding first, then the least communication that fits. On several nodes hybrid
# sharding ranks before full sharding (its all-gathers stay inside a node). Offload last: CPU memory and
# PCIe traffic trade speed for fitting; ZeRO-2 offload keeps weights on the GPU, so it is the fastest of them.
PRESET_MODELS: tuple[PresetModel, ...] = (
    PresetModel(name="ddp_static_graph", rank=0, sharding="none",
                summary="DDP: every GPU holds full weights, grads and optimizer states"),
    PresetModel(name="ddp_bf16_compress", rank=1, sharding="none",
                summary="DDP with bf16 gradient compression: memory as DDP, less traffic between nodes"),
    PresetModel(name="fsdp_grad_op", rank=2, sharding="grad_op",
                summary="FSDP SHARD_GRAD_OP: grads and optimizer states sharded, full weights kept"),
    PresetModel(name="fsdp_hybrid_shard", rank=3, sharding="node", needs_multi_node=True,
                summary="FSDP HYBRID_SHARD: everything sharded within a node, replicated across nodes",
                note="needs several nodes (LP110)"),
    PresetModel(name="fsdp2", rank=4, sharding="full",
                summary="FSDP2 full shard: weights, grads and optimizer states sharded over every GPU"),
    PresetModel(name="tp2d_hybrid", rank=5, sharding="full", needs_multi_gpu_node=True,
                summary="tensor parallel inside a node × FSDP2 across nodes: everything divided by the world",
                note="needs a configure_model that applies a tensor-parallel plan"),
    PresetModel(name="deepspeed_zero2_offload", rank=6, sharding="offload_optimizer", deepspeed=True,
                extra="deepspeed",
                summary="ZeRO-2 with the optimizer in CPU memory: full weights and sharded grads on the GPU"),
    PresetModel(name="fsdp2_offload_ckpt", rank=7, sharding="offload_all",
                summary="FSDP2 full shard, weights/grads/optimizer in CPU memory, activation checkpointing"),
    PresetModel(name="fsdp_offload_ckpt", rank=8, sharding="offload_all",
                summary="FSDP full shard, weights/grads/optimizer in CPU memory, activation checkpointing"),
    PresetModel(name="deepspeed_zero3_offload_ckpt", rank=9, sharding="offload_all", deepspeed=True,
                extra="deepspeed",
                summary="ZeRO-3 with weights and optimizer in CPU memory, activation checkpointing"),
)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class PlanRequest:
    params: int
    gpus_per_node: int
    num_nodes: int = 1
    gpu_memory: int = 80 * GIB
    precision: str = "bf16-mixed"
    optimizer: str = "adamw"
    headroom: float = DEFAULT_HEADROOM
    cpu_memory: int | None = None
    """CPU memory per node in bytes; ``None``: offload presets are not checked against it."""

    def __post_init__(self) -> None:
        problems = []
        if self.params <= 0:
            problems.append(f"params={self.params} must be positive")
        if self.gpus_per_node < 1:
            problems.append(f"gpus={self.gpus_per_node} must be 1 or more")
        if self.num_nodes < 1:
            problems.append(f"num_nodes={self.num_nodes} must be 1 or more")
        if self.gpu_memory <= 0:
            problems.append(f"gpu_memory={self.gpu_memory} must be positive")
        if not 0 <= self.headroom < 1:
            problems.append(f"headroom={self.headroom} must be at least 0 and below 1")
        if problems:
            raise ValueError("; ".join(problems))
        bytes_per_param(self.precision, self.optimizer)  # validates both names

    @property
    def world_size(self) -> int:
        return self.gpus_per_node * self.num_nodes

    @property
    def usable_gpu_bytes(self) -> float:
        return self.gpu_memory * (1 - self.headroom)


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate:
    preset: str
    rank: int
    applicable: bool
    fits: bool
    gpu_bytes: float
    """Model states per GPU."""
    cpu_bytes_per_node: float
    usable_gpu_bytes: float
    per_param: BytesPerParam
    why: str
    extra: str | None = None

    @property
    def headroom_bytes(self) -> float:
        return self.usable_gpu_bytes - self.gpu_bytes

    def as_dict(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "applicable": self.applicable,
            "fits": self.fits,
            "gpu_bytes": round(self.gpu_bytes),
            "gpu_gib": round(self.gpu_bytes / GIB, 2),
            "usable_gpu_bytes": round(self.usable_gpu_bytes),
            "headroom_bytes": round(self.headroom_bytes),
            "cpu_bytes_per_node": round(self.cpu_bytes_per_node),
            "bytes_per_param": {"weights": self.per_param.weights, "grads": self.per_param.grads,
                                "optimizer": self.per_param.optimizer},
            "extra": self.extra,
            "why": self.why,
        }  # fmt: skip


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def estimate(model: PresetModel, request: PlanRequest) -> Estimate:
    """Model states per GPU (and CPU memory per node for offload) for one preset."""
    per = bytes_per_param(request.precision, request.optimizer, deepspeed=model.deepspeed)
    p, world, node = request.params, request.world_size, request.gpus_per_node
    cpu = 0.0
    if model.sharding == "none":
        gpu, how = p * per.total, "nothing sharded"
    elif model.sharding == "grad_op":
        gpu = p * per.weights + p * (per.grads + per.optimizer) / world
        how = f"weights whole, grads + optimizer / {world}"
    elif model.sharding == "full":
        gpu, how = p * per.total / world, f"all / {world}"
    elif model.sharding == "node":
        gpu, how = p * per.total / node, f"all / {node} (one node), replicated × {request.num_nodes}"
    elif model.sharding == "offload_optimizer":
        gpu = p * per.weights + p * per.grads / world
        cpu = p * per.optimizer / request.num_nodes
        how = f"weights whole, grads / {world} on GPU; optimizer in CPU memory"
    else:
        gpu, cpu = 0.0, p * per.total / request.num_nodes
        how = "weights, grads and optimizer in CPU memory; the GPU holds the working set (headroom)"
    usable = request.usable_gpu_bytes
    reasons = [f"{model.summary}; {per.weights:g}+{per.grads:g}+{per.optimizer:g} B/param, {how}"]
    applicable = True
    if model.needs_multi_node and request.num_nodes < 2:
        applicable = False
        reasons.append(f"not applicable on {request.num_nodes} node: {model.note}")
    if model.needs_multi_gpu_node and node < 2:
        applicable = False
        reasons.append(f"not applicable with {node} GPU per node: tensor parallelism needs 2 or more")
    elif model.note and applicable and not model.needs_multi_node:
        reasons.append(model.note)
    fits = applicable and gpu <= usable
    if applicable and gpu > usable:
        reasons.append(f"{_gib(gpu)} of model states per GPU > {_gib(usable)} usable")
    if cpu:
        if request.cpu_memory is None:
            reasons.append(f"needs {_gib(cpu)} of CPU memory per node (not checked: pass --cpu-memory)")
        elif cpu > request.cpu_memory:
            fits = False
            reasons.append(f"needs {_gib(cpu)} of CPU memory per node > {_gib(request.cpu_memory)}")
        else:
            reasons.append(f"needs {_gib(cpu)} of {_gib(request.cpu_memory)} CPU memory per node")
    if model.extra:
        reasons.append(f"needs pip install 'lightning-presets[{model.extra}]'")
    return Estimate(preset=model.name, rank=model.rank, applicable=applicable, fits=fits, gpu_bytes=gpu,
                    cpu_bytes_per_node=cpu, usable_gpu_bytes=usable, per_param=per, why="; ".join(reasons),
                    extra=model.extra)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Plan:
    request: PlanRequest
    estimates: tuple[Estimate, ...]
    """Fitting presets by preference first, then the rest by preference."""
    notes: tuple[str, ...] = field(default=())

    @property
    def fitting(self) -> tuple[Estimate, ...]:
        return tuple(each for each in self.estimates if each.fits)

    @property
    def recommended(self) -> Estimate | None:
        return self.fitting[0] if self.fitting else None

    @property
    def exit_code(self) -> int:
        return 0 if self.fitting else 1

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
        return (
            f"lightning-presets check --strategy {best.preset} --accelerator cuda --devices {r.gpus_per_node} "
            f"--num-nodes {r.num_nodes} --precision {r.precision} --gpus {r.gpus_per_node} "
            f"--gpu-memory {format_size(r.gpu_memory)}"
        )

    def hint(self) -> str | None:
        if self.fitting:
            return None
        r = self.request
        offload = [each for each in self.estimates if each.applicable and each.cpu_bytes_per_node]
        need = min(offload, key=lambda each: each.cpu_bytes_per_node) if offload else None
        cpu = f"; {need.preset} needs {_gib(need.cpu_bytes_per_node)}" if need else ""
        return (
            f"nothing fits {format_count(r.params)} parameters on {r.gpus_per_node} GPU(s) × {r.num_nodes} node(s) "
            f"of {format_size(r.gpu_memory)}: add GPUs (--gpus) or nodes (--num-nodes) so sharding divides more, "
            f"use an offload preset with more CPU memory per node (--cpu-memory{cpu}), "
            "or a lower precision (bf16-true)"
        )

    def as_dict(self) -> dict[str, Any]:
        r = self.request
        best = self.recommended
        return {
            "schema": PLAN_SCHEMA,
            "schema_version": PLAN_SCHEMA_VERSION,
            "evidence": "none: arithmetic estimate of model states only; nothing was built or measured",
            "request": {"params": r.params, "gpus_per_node": r.gpus_per_node, "num_nodes": r.num_nodes,
                        "gpu_memory_bytes": r.gpu_memory, "precision": r.precision, "optimizer": r.optimizer,
                        "headroom": r.headroom, "cpu_memory_bytes": r.cpu_memory},
            "recommended": best.preset if best else None,
            "trainer": self.trainer_line(),
            "fabric": self.fabric_line(),
            "check": self.check_command(),
            "hint": self.hint(),
            "estimates": [each.as_dict() for each in self.estimates],
            "notes": list(self.notes),
            "exit_code": self.exit_code,
        }  # fmt: skip


def plan(request: PlanRequest, models: tuple[PresetModel, ...] = PRESET_MODELS, notes: tuple[str, ...] = ()) -> Plan:
    """Estimate every modelled preset; fitting ones first, each group in preference order."""
    estimates = sorted((estimate(model, request) for model in models), key=lambda each: (not each.fits, each.rank))
    return Plan(request, tuple(estimates), notes)


def parse_count(text: str) -> int:
    """``7B``, ``1.3b``, ``350M``, ``125k``, ``7e9`` or ``7000000000`` -> a parameter count."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([a-zA-Z]?)\s*", text)
    if not match or match.group(2).lower() not in _COUNT_SUFFIX:
        raise ValueError(f"{text!r} is not a parameter count such as 7B, 350M or 7000000000")
    value = round(float(match.group(1)) * _COUNT_SUFFIX[match.group(2).lower()])
    if value <= 0:
        raise ValueError(f"{text!r} is not a positive parameter count")
    return value


def format_count(count: int) -> str:
    for suffix, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            return f"{count / size:.3g}{suffix}"
    return str(count)


def format_size(size: int) -> str:
    """Bytes as the ``--gpu-memory`` flag takes them (``80GiB`` when exact)."""
    for suffix, unit in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def count_parameters(spec: str) -> int:
    """Parameters of ``module:attr`` (an ``nn.Module`` or a factory returning one), built on the meta device."""
    import importlib

    import torch

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"--model {spec!r} is not module:attr, e.g. my_project.models:build_model")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not isinstance(target, torch.nn.Module):
        with torch.device("meta"):  # no memory is allocated for the weights
            target = target()
    if not isinstance(target, torch.nn.Module):
        raise ValueError(f"--model {spec!r} gave a {type(target).__name__}, not a torch.nn.Module")
    return sum(parameter.numel() for parameter in target.parameters())


def unmodelled() -> tuple[str, ...]:
    """A note naming installed strategy presets the memory model does not cover (third-party, TPU)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        names = sorted(set(catalog.strategy_catalog().presets) - {model.name for model in PRESET_MODELS})
    return (f"not estimated (no memory model): {', '.join(names)}",) if names else ()


def describe_models() -> Mapping[str, str]:
    return {model.name: model.summary for model in PRESET_MODELS}
