"""Where a preset keeps model states, read from its declaration, and the arithmetic of their bytes per GPU.

A :class:`Layout` is derived from a preset's data (family, ``init_params``, ``cpu_offload``,
``activation_checkpointing``, ``mesh``), never from its name, so a third-party preset of a known family is
planned the same way. :func:`model_states` is the arithmetic ("model states" of the ZeRO paper, Rajbhandari
et al. 2020, and DeepSpeed's own estimators) used for a bare parameter count and for the strategies whose
wrapping cannot run under fake tensors (FSDP1 needs CUDA, DeepSpeed needs CUDA and its engine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lightning_presets.core.family import Compute, Family, Memory, Placement
from lightning_presets.core.preset import Preset

PRECISIONS: tuple[str, ...] = ("bf16-mixed", "16-mixed", "32-true", "bf16-true", "16-true", "64-true")
OPTIMIZERS: tuple[str, ...] = ("adamw", "sgd")
_DTYPE_BYTES = {"32-true": 4, "64-true": 8, "bf16-true": 2, "16-true": 2}
DEEPSPEED_BUFFER_FACTOR = 1.5
"""DeepSpeed's ``additional_buffer_factor`` default in its estimators."""

Kind = Placement
_KIND_RANK: dict[str, int] = {
    "replica": 0, "grad_op": 1, "hybrid": 2, "full": 3, "tensor": 4, "offload_optimizer": 5, "offload_all": 6,
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class BytesPerParam:
    weights: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def bytes_per_param(precision: str, optimizer: str, *, deepspeed: bool = False) -> BytesPerParam:
    """Bytes of weights, gradients and optimizer state per parameter.

    Lightning's ``*-mixed`` keeps fp32 weights and autocasts: 4 + 4 + 8 (AdamW's two fp32 moments) = 16;
    DeepSpeed keeps half-precision weights and an fp32 master copy in the optimizer instead: 2 + 2 + 12.
    ``*-true`` keeps everything in that dtype. ``sgd`` is SGD with momentum: one state instead of two.
    """
    if precision not in PRECISIONS:
        raise ValueError(f"precision={precision!r} is not one of {', '.join(PRECISIONS)}")
    if optimizer not in OPTIMIZERS:
        raise ValueError(f"optimizer={optimizer!r} is not one of {', '.join(OPTIMIZERS)}")
    states = 2 if optimizer == "adamw" else 1
    if precision.endswith("-mixed"):
        if deepspeed:
            return BytesPerParam(2, 2, 4 + 4 * states)
        return BytesPerParam(4, 4, 4 * states)
    size = _DTYPE_BYTES[precision]
    return BytesPerParam(size, size, size * states)


def compute_bytes(precision: str) -> int:
    """Bytes per element of the weights a forward computes with (FSDP's ``param_dtype``, DeepSpeed's weights)."""
    return 2 if precision.endswith("-mixed") else _DTYPE_BYTES[precision]


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """How one preset places model states, as its declaration says."""

    preset: str
    family: Family
    memory: Memory
    """The family's memory layout (:attr:`Family.memory`): how the planner counts it."""
    kind: Kind
    traceable: bool
    """Whether the strategy's own wrapping runs under fake tensors on a CPU build (FSDP2, tensor parallel,
    DDP replicas); FSDP1 and DeepSpeed need CUDA and are planned by arithmetic plus a traced model."""
    checkpoint: bool
    offload: bool
    tensor_parallel: bool
    compute: Compute
    """How ``*-mixed`` computes: Lightning's autocast over fp32 weights, FSDP1's ``param_dtype`` plus
    autocast, or DeepSpeed's half-precision module."""
    zero_stage: int = 0
    offload_parameters: bool = False
    multi_node: bool = False
    """Hybrid sharding: needs several nodes."""
    summary: str
    rank: tuple[int, int, int]
    """Preference when several fit: lower is faster (placement, family, then plain before a hook)."""

    def compute_for(self, precision: str) -> Compute:
        return self.compute if precision.endswith("-mixed") else "dtype"


_SUMMARIES: dict[str, str] = {
    "replica": "every GPU holds full weights, gradients and optimizer states",
    "grad_op": "gradients and optimizer states sharded, full weights kept from forward to backward",
    "hybrid": "everything sharded within a node, replicated across nodes",
    "full": "weights, gradients and optimizer states sharded over every GPU",
    "tensor": "tensor parallel inside a node × FSDP2 across nodes",
    "offload_optimizer": "half-precision weights on the GPU, optimizer states and gradients in CPU memory",
    "offload_all": "weights, gradients and optimizer states in CPU memory; the GPU holds the working set",
}


def layout_of(preset: Preset) -> Layout | None:
    """The layout of a preset whose family declares a memory layout (:attr:`Family.memory`), else ``None``."""
    family = preset.family
    memory = family.memory
    placed = memory.place(preset) if memory is not None else None
    if memory is None or placed is None:
        return None
    kind = placed.placement
    hook = 1 if preset.init_params.get("ddp_comm_hook") is not None else 0
    return Layout(
        preset=preset.name,
        family=family,
        memory=memory,
        kind=kind,
        traceable=memory.traceable,
        checkpoint=preset.activation_checkpointing,
        offload=kind in ("offload_all", "offload_optimizer"),
        tensor_parallel=placed.tensor_parallel,
        compute=memory.compute,
        zero_stage=placed.zero_stage,
        offload_parameters=placed.offload_parameters,
        multi_node=kind == "hybrid",
        summary=f"{memory.titled(placed)}: {_SUMMARIES[kind]}" + (", activations checkpointed" if
                                                                  preset.activation_checkpointing else ""),
        rank=(_KIND_RANK[kind], memory.rank, hook),
    )  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class States:
    """Model-state bytes per GPU (and in CPU memory), with the formula that gave them."""

    parameters: float
    gradients: float
    optimizer: float
    cpu_per_node: float
    formula: str
    working_set: float = 0.0
    """Weights gathered for compute on top of the states (FSDP1's current and next unit and its root)."""

    @property
    def gpu(self) -> float:
        return self.parameters + self.gradients + self.optimizer


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """What the arithmetic needs to know about the model and the cluster."""

    params: int
    gpus_per_node: int
    num_nodes: int
    precision: str
    optimizer: str
    largest_layer: int = 0
    """Parameters of the module with the most parameters of its own (DeepSpeed ZeRO-3's gathered layer)."""
    root_params: int = 0
    """Parameters outside the repeated blocks (the root FSDP unit)."""
    block_params: int = 0
    """Parameters of one repeated block (one FSDP unit)."""

    @property
    def world(self) -> int:
        return self.gpus_per_node * self.num_nodes


def _n(per_param: float) -> str:
    return f"{per_param:g}"


def model_states(layout: Layout, sizes: Sizes) -> States:
    """Model states per GPU for a layout, by arithmetic (each branch names its formula)."""
    if layout.memory.zero_optimizer:
        return _deepspeed_states(layout, sizes)
    per = bytes_per_param(sizes.precision, sizes.optimizer)
    p, world, node = sizes.params, sizes.world, sizes.gpus_per_node
    w, g, o = per.weights, per.grads, per.optimizer
    c = compute_bytes(sizes.precision)
    gathered = (sizes.root_params + 2 * sizes.block_params) * c
    known = sizes.root_params or sizes.block_params
    gathered_text = f"{c}(root + 2 blocks) gathered" if known else "the gathered weights not modelled (use --model)"
    if layout.kind == "replica":
        return States(parameters=p * w, gradients=p * g, optimizer=p * o, cpu_per_node=0,
                      formula=f"replica: ({_n(w)} + {_n(g)} + {_n(o)})Ψ")  # fmt: skip
    if layout.kind == "grad_op":
        return States(parameters=p * w / world + p * c, gradients=p * g / world, optimizer=p * o / world,
                      cpu_per_node=0,
                      formula=f"SHARD_GRAD_OP: {_n(w)}Ψ/N + {c}Ψ (weights gathered from forward to backward) + "
                      f"({_n(g)} + {_n(o)})Ψ/N, N={world}")  # fmt: skip
    shards = node if layout.kind == "hybrid" else world
    if layout.kind in ("full", "hybrid", "tensor"):
        return States(parameters=p * w / shards, gradients=p * g / shards, optimizer=p * o / shards,
                      cpu_per_node=0, working_set=0 if layout.traceable else gathered,
                      formula=f"full shard: ({_n(w)} + {_n(g)} + {_n(o)})Ψ/N, N={shards}"
                      + ("" if layout.traceable else f" + {gathered_text}"))  # fmt: skip
    # offload_all (FSDP1 cpu_offload, FSDP2 CPUOffloadPolicy): the shards live in CPU memory.
    return States(parameters=0, gradients=0, optimizer=0, cpu_per_node=p * per.total / sizes.num_nodes,
                  working_set=0 if layout.traceable else gathered,
                  formula=f"CPU offload: ({_n(w)} + {_n(g)} + {_n(o)})Ψ/N in CPU memory per GPU, N={world}"
                  + ("" if layout.traceable else f"; GPU: {gathered_text}"))  # fmt: skip


def _deepspeed_states(layout: Layout, sizes: Sizes) -> States:
    """DeepSpeed's own estimators (``estimate_zero2_model_states_mem_needs``, ``estimate_zero3_...``, 0.19),
    generalised from Adam to ``sizes.optimizer``: fp32 gradients + fp32 weights + fp32 states on the CPU side."""
    p, world, node, nodes = sizes.params, sizes.world, sizes.gpus_per_node, sizes.num_nodes
    weights = compute_bytes(sizes.precision)
    states = 2 if sizes.optimizer == "adamw" else 1
    host = 4 + 4 + 4 * states  # DeepSpeed's 16 for Adam: fp32 gradients, fp32 master weights, two fp32 states
    factor = DEEPSPEED_BUFFER_FACTOR
    layer = 4 * sizes.largest_layer
    if layout.zero_stage == 3:
        if layout.offload_parameters:
            cpu = p * max(4 * node, (weights + host) / nodes) * factor
            return States(
                parameters=layer,
                gradients=0,
                optimizer=0,
                cpu_per_node=cpu,
                formula=f"DeepSpeed estimate_zero3 (offload params + optimizer, zero_init=False): GPU 4 × largest "
                f"layer{'' if layer else ' (not known without --model)'}; "
                f"CPU Ψ·max(4·{node}, {weights + host}/{nodes})·{factor} per node",
            )
        if layout.offload:
            cpu = p * max(4 * node, host / nodes) * factor
            return States(
                parameters=layer + p * weights / world,
                gradients=0,
                optimizer=0,
                cpu_per_node=cpu,
                formula=f"DeepSpeed estimate_zero3 (offload optimizer): GPU 4 × largest layer + "
                f"{weights}Ψ/N; CPU Ψ·max(4·{node}, {host}/{nodes})·{factor} per node, N={world}",
            )
        return States(parameters=layer + p * weights / world, gradients=p * 4 / world,
                      optimizer=p * (host - 4) / world, cpu_per_node=0,
                      formula=f"DeepSpeed estimate_zero3: 4 × largest layer + ({weights} + {host})Ψ/N, "
                      f"N={world}")  # fmt: skip
    if layout.offload:
        cpu = p * max(4 * world, host) * factor
        return States(parameters=p * weights, gradients=0, optimizer=0, cpu_per_node=cpu,
                      formula=f"DeepSpeed estimate_zero2 (offload optimizer): GPU {weights}Ψ; "
                      f"CPU Ψ·max(4·{world}, {host})·{factor} per node")  # fmt: skip
    return States(parameters=p * weights, gradients=p * weights / world + p * 4 / world,
                  optimizer=p * (host - 4) / world, cpu_per_node=0,
                  formula=f"DeepSpeed estimate_zero2: {weights}Ψ + ({weights} + {host})Ψ/N, N={world}")  # fmt: skip


def describe(layout: Layout) -> dict[str, Any]:
    return {"family": layout.family.name, "placement": layout.kind, "summary": layout.summary,
            "activation_checkpointing": layout.checkpoint, "cpu_offload": layout.offload}  # fmt: skip
