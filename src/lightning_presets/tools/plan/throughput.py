"""How fast one training step runs under a preset: a per-operator roofline over the traced step, plus the communication
compute cannot hide, plus offload traffic and the CPU optimizer step.

**Compute** (:func:`compute_seconds`): every operator the trace counted (:mod:`.counting`) takes ``max(FLOPs /
(peak(dtype) · efficiency(GPU)), bytes / (memory bandwidth · memory_efficiency))`` per call; operators that are
neither matmuls nor attention are memory-bound. The GPU runs ahead of Python, so a phase takes the longer of that
and its kernel launches (``launch_s`` each). Checkpointed blocks are recomputed in the trace's backward: their
operators are counted there, so recomputation costs what it costs.

**Communication** (:func:`collective_seconds`): a ring all-gather or reduce-scatter of a full tensor of ``B`` bytes
over ``g`` ranks moves ``B·(g-1)/g`` per rank, an all-reduce twice that, over the link of the level it crosses:
in-node (NVLink, per direction), or, for a group spanning nodes, the slower of the in-node link and the node's
network ports together (NCCL's rings cross each node boundary once per ring, its channels spread over the node's
ports: a group of ``k`` GPUs per node moves ``1/k`` of each rank's bytes through each port), at ``link_efficiency``
of it, plus ``latency_s`` per call. FSDP's all-gathers are prefetched and its reduce-scatters run behind backward,
DDP's bucketed all-reduces too: they hide behind the compute of their phase except the first unit's gather and the
last unit's reduction; what exceeds the phase's compute is exposed. Tensor-parallel all-reduces are waited for at
once (eager): all exposed. Collectives issued after the optimizer step (DeepSpeed's parameter all-gather) are
exposed.

**Offload** (:func:`offload_seconds`): shards copied to the GPU for each gather and gradients copied back over the
host link (PCIe, per direction), hidden like FSDP's gathers; the optimizer step runs on the CPU at ``cpu_bandwidth``
bytes/s per node shared by the node's ranks (memory-bound), never hidden.

**Calibration** (:mod:`.calibration`): the share of the peak matmuls reach is the one constant fitted, per GPU
generation, on one published measurement each (named there); the others are priors, stated, not fitted.
``compile=True`` (``--compile``) changes two things: pointwise operators move only what a fused kernel moves (an
input a pointwise operator wrote is read in registers: :attr:`OpCost.fused_bytes`) and launch once per matmul
(Inductor fuses the rest into few kernels); FLOPs and communication are unchanged. That is a model of Inductor's
fusion, judged (not fitted) against torchtitan's compiled rows in the throughput benchmark."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lightning_presets.tools.plan.calibration import CALIBRATION, Calibration
from lightning_presets.tools.plan.counts import Collective, OpCost, StepCounts
from lightning_presets.tools.plan.hardware import CALIBRATED_TYPES, Cluster

FP8_RECIPES = ("none", "torchao", "te")
"""``--fp8``: none, torchao's ``Float8Linear`` (dynamic tensorwise scaling), or Transformer Engine (delayed scaling)."""
FP8_CAST_BYTES = {"torchao": 2.5, "te": 1.5}
"""Memory traffic of casting a matmul's bf16 inputs to fp8, over the inputs' bf16 bytes, eager: torchao's dynamic
scaling reads each input for its amax and again to cast it, writing one byte per element (2 + 2 + 1 of 2 bytes);
Transformer Engine scales by the previous steps' amax history, so one read and one write (2 + 1 of 2)."""
FP8_CAST_BYTES_COMPILED = 1.5
"""Under ``torch.compile`` the amax and the cast fuse into one pass: 2 + 1 of 2 bytes."""
FP8_EVIDENCE = (
    "modelled, not run: the Linear layers' matmuls at the GPU's fp8 datasheet peak at the generation's calibrated "
    "share, plus the casts of their inputs; judged against torchtitan's Float8 rows (Llama 3.1 8B, compiled, "
    "torchao; docs/plan.md); memory as bf16 (torchtitan's published peak with and without "
    "Float8: 76.8 and 77.0 GiB)"
)

DDP_BUCKET_BYTES = 25 * 2**20
"""DDP's default ``bucket_cap_mb``: the last bucket's all-reduce cannot overlap."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Offload:
    """What an offload preset moves between GPU and CPU per step, and the CPU optimizer step's bytes."""

    to_gpu: float = 0.0
    to_cpu: float = 0.0
    optimizer_bytes: float = 0.0
    """Bytes the CPU optimizer step reads and writes (per rank)."""
    vectorised: bool = False
    """DeepSpeed's CPU Adam (AVX, OpenMP) rather than ``torch.optim`` on CPU tensors."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Throughput:
    """One preset's estimated step time and throughput per GPU."""

    step_time_s: float
    tokens_per_s_per_gpu: float | None
    samples_per_s: float | None
    """Samples per second of the whole cluster."""
    mfu: float
    """Model FLOPs (3 × the forward's, no recomputation) per second over the GPU's dense peak for the dtype."""
    flops_per_step: int
    """FLOPs one GPU computes in a step, recomputation included."""
    comm_bytes_per_step: int
    """Bytes of the collectives one GPU takes part in (each collective's full tensor)."""
    compute_s: float
    exposed_comm_s: float
    offload_s: float
    low: float
    high: float
    """Tokens/s per GPU (or samples/s without tokens) the estimate trusts: ``range``."""
    notes: tuple[str, ...] = field(default=())
    comm_source: str = "traced"
    """``traced`` (the collectives of the trace) or ``arithmetic`` (the strategy's, by formula)."""

    @property
    def rate(self) -> float:
        return self.tokens_per_s_per_gpu if self.tokens_per_s_per_gpu is not None else (self.samples_per_s or 0.0)

    def as_dict(self) -> dict[str, Any]:
        return {
            "step_time_s": self.step_time_s, "tokens_per_s_per_gpu": self.tokens_per_s_per_gpu,
            "samples_per_s": self.samples_per_s, "mfu": self.mfu, "flops_per_step": self.flops_per_step,
            "comm_bytes_per_step": self.comm_bytes_per_step,
            "breakdown": {"compute_s": self.compute_s, "exposed_comm_s": self.exposed_comm_s,
                          "offload_s": self.offload_s},
            "range": [self.low, self.high], "comm": self.comm_source, "notes": list(self.notes),
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Throughput:
        parts = data["breakdown"]
        return cls(step_time_s=data["step_time_s"], tokens_per_s_per_gpu=data["tokens_per_s_per_gpu"],
                   samples_per_s=data["samples_per_s"], mfu=data["mfu"], flops_per_step=data["flops_per_step"],
                   comm_bytes_per_step=data["comm_bytes_per_step"], compute_s=parts["compute_s"],
                   exposed_comm_s=parts["exposed_comm_s"], offload_s=parts["offload_s"], low=data["range"][0],
                   high=data["range"][1], notes=tuple(data["notes"]), comm_source=data["comm"])  # fmt: skip


def with_fp8(counts: StepCounts, recipe: str, *, compile: bool) -> StepCounts:
    """``counts`` with its bf16 matmuls (``mm``, ``addmm``: the Linear layers) in fp8, each plus the pointwise
    traffic of casting its inputs (:data:`FP8_CAST_BYTES`); attention, the optimizer and everything else as they
    were. The output head's matmul is converted too (torchtitan leaves it in bf16: a few % of the FLOPs)."""
    if recipe == "none":
        return counts
    share = FP8_CAST_BYTES_COMPILED if compile else FP8_CAST_BYTES[recipe]
    ops: list[OpCost] = []
    for op in counts.ops:
        if op.name in ("mm", "addmm") and op.dtype == "bfloat16" and op.flops and op.phase != "optimizer":
            inputs = op.bytes * 2 // 3  # of a matmul's reads and write, its two inputs (an estimate for any shape)
            cast = round(share * inputs)
            ops.append(OpCost(op.name, op.phase, "float8_e4m3fn", op.calls, op.flops, op.bytes, False, op.fused_bytes,
                              op.shape_key))  # fmt: skip
            ops.append(OpCost("fp8_cast", op.phase, "bfloat16", 2 * op.calls, 0, cast, True, cast, op.shape_key))
        else:
            ops.append(op)
    return StepCounts(ops=tuple(ops), collectives=counts.collectives, tokens=counts.tokens)


def op_seconds(op: OpCost, cluster: Cluster, calibration: Calibration, *, compile: bool) -> float:
    """One operator class's GPU time: the roofline of its FLOPs and bytes, per call, times its calls."""
    gpu = cluster.gpu
    moved = op.fused_bytes if compile and op.pointwise else op.bytes
    memory = moved / (gpu.memory_bandwidth * calibration.memory_efficiency)
    if op.pointwise or not op.flops:
        return memory
    return max(op.flops / (gpu.flops_for(op.dtype) * calibration.efficiency(gpu)), memory)


def compute_seconds(ops: Iterable[OpCost], cluster: Cluster, calibration: Calibration, *, compile: bool) -> float:
    """The GPU time of ``ops`` (one phase), or their kernel launches when those take longer."""
    listed = list(ops)
    gpu = sum(op_seconds(op, cluster, calibration, compile=compile) for op in listed)
    launches = sum(op.calls for op in listed if not (compile and op.pointwise))
    return max(gpu, launches * calibration.launch_s)


def collective_seconds(collective: Collective, cluster: Cluster, calibration: Calibration) -> float:
    """A ring collective's time: ``(g-1)/g`` of the full tensor per rank (twice for an all-reduce) over its link.

    A group of ``k`` GPUs on each of its nodes crosses the network in NCCL's rings once per node and ring, and the
    node's ``k`` network ports carry different rings (channels) at once: of the ``(g-1)/g`` each rank moves, the
    ports carry ``1/k`` each, the in-node link the rest. The slower of the two levels sets the time."""
    group = collective.group_size
    if group <= 1:
        return 0.0
    factor = 2.0 if collective.kind == "all_reduce" else 1.0
    bandwidth = cluster.gpu.in_node_bandwidth
    if collective.crosses_nodes:
        per_node = max(1, min(cluster.gpus_per_node, group // max(cluster.num_nodes, 1)))
        bandwidth = min(bandwidth, per_node * cluster.inter_node_bandwidth)
    bandwidth *= calibration.link_efficiency
    return factor * collective.bytes * (group - 1) / group / bandwidth + collective.calls * calibration.latency_s


def _exposed(hidden: float, units: int, window: float) -> float:
    """What of ``hidden`` seconds of overlappable transfers in ``units`` pieces a ``window`` of compute leaves:
    the first (or last) piece, and whatever exceeds the window."""
    if hidden <= 0:
        return 0.0
    first = hidden / max(units, 1)
    return first + max(0.0, hidden - first - window)


def estimate(
    counts: StepCounts,
    cluster: Cluster,
    *,
    samples: int | None,
    tensor_parallel: int = 1,
    collectives: tuple[Collective, ...] | None = None,
    offload: Offload | None = None,
    gpu_optimizer_bytes: float = 0.0,
    compile: bool = False,
    calibration: Calibration = CALIBRATION,
    comm_source: str = "traced",
    notes: tuple[str, ...] = (),
    fp8: str = "none",
) -> Throughput:
    """The step time of one rank's traced ``counts`` on ``cluster``.

    ``collectives`` replaces the traced ones (strategies whose wrapping was not traced: their collectives by
    formula); ``offload``: what an offload preset moves and the CPU optimizer step (its optimizer operators then
    run on the CPU, not the GPU); ``gpu_optimizer_bytes``: an optimizer step the trace did not run (memory-bound,
    on the GPU). ``samples``: the micro-batch of one rank; ``tensor_parallel``: ranks sharing one micro-batch.
    ``fp8``: the Linear layers in fp8 (:func:`with_fp8`; a GPU without fp8 tensor cores ignores it, and says so).
    """
    if fp8 != "none":
        if "fp8" in cluster.gpu.peak_flops:
            counts = with_fp8(counts, fp8, compile=compile)
            notes = (*notes, f"--fp8 {fp8}: {FP8_EVIDENCE}")
        else:
            notes = (*notes, f"--fp8 {fp8}: {cluster.gpu.name} has no fp8 tensor cores; timed in bf16")
    comms = counts.collectives if collectives is None else collectives
    window: dict[str, float] = {}
    for phase in ("forward", "backward", "optimizer"):
        ops = [op for op in counts.ops if op.phase == phase and not (offload and phase == "optimizer")]
        window[phase] = compute_seconds(ops, cluster, calibration, compile=compile) if ops else 0.0
    window["optimizer"] += gpu_optimizer_bytes / (cluster.gpu.memory_bandwidth * calibration.memory_efficiency)
    compute = sum(window.values())

    def exposed(transfers: float) -> float:
        total = 0.0
        for phase in ("forward", "backward", "optimizer"):
            mine = [each for each in comms if each.phase == phase]
            blocking = sum(collective_seconds(each, cluster, calibration) for each in mine if not each.overlaps)
            hidden = sum(collective_seconds(each, cluster, calibration) for each in mine if each.overlaps)
            units = max((each.calls for each in mine if each.overlaps), default=1)
            if phase == "optimizer":
                total += blocking + hidden
                continue
            share = transfers * (1 / 3 if phase == "forward" else 2 / 3)
            total += blocking + _exposed(hidden + share, units, window[phase])
        return total

    transfers = 0.0
    cpu_step = 0.0
    if offload is not None:
        transfers = (offload.to_gpu + offload.to_cpu) / (cluster.gpu.host_bandwidth * calibration.link_efficiency)
        per_rank = calibration.cpu_bandwidth / cluster.gpus_per_node * (2 if offload.vectorised else 1)
        cpu_step = offload.optimizer_bytes / per_rank
    comm_exposed = exposed(0.0)
    offload_s = cpu_step + (exposed(transfers) - comm_exposed)
    step = compute + comm_exposed + offload_s
    forward_flops = counts.phase_flops("forward")
    model_flops = 3 * forward_flops
    dtype = max(((op.dtype, op.flops) for op in counts.ops if op.flops), key=lambda pair: pair[1],
                default=("bfloat16", 0))[0]  # fmt: skip
    if dtype.startswith("float8"):
        dtype = "bfloat16"  # MFU of an fp8 step over the bf16 peak (torchtitan: over the fp8 one it is not defined)
    mfu = model_flops / step / cluster.gpu.flops_for(dtype) if step > 0 else 0.0
    timed = step > 0
    tokens = None if counts.tokens is None or not timed else counts.tokens / tensor_parallel / step
    data_parallel = cluster.world // tensor_parallel
    rate_samples = None if samples is None or not timed else samples * data_parallel / step
    spread, why = trust(cluster, offload is not None, comm_source)
    rate = tokens if tokens is not None else (rate_samples or 0.0)
    return Throughput(
        step_time_s=step, tokens_per_s_per_gpu=tokens, samples_per_s=rate_samples, mfu=mfu,
        flops_per_step=counts.flops, comm_bytes_per_step=sum(each.bytes for each in comms), compute_s=compute,
        exposed_comm_s=comm_exposed, offload_s=offload_s, low=rate * (1 - spread[0]), high=rate * (1 + spread[1]),
        notes=(*notes, *why), comm_source=comm_source,
    )  # fmt: skip


def trust(cluster: Cluster, offload: bool, comm_source: str) -> tuple[tuple[float, float], list[str]]:
    """How far below and above the estimate the rate may be, and why: the calibration's judged error on its own
    GPU type, widened for a type nothing was calibrated on, for an assumed CPU bandwidth and for collectives by
    formula."""
    low, high = CALIBRATION.judged_error, CALIBRATION.judged_error
    why = []
    if cluster.gpu.name not in CALIBRATED_TYPES:
        low, high = low + 0.15, high + 0.15
        why.append(f"{cluster.gpu.name}: not calibrated on this GPU type (calibrated on H100-SXM and A100), range "
                   "widened")  # fmt: skip
    if offload:
        low, high = low + 0.3, high + 0.2
        why.append("offload: the CPU optimizer step at an assumed CPU memory bandwidth, range widened")
    if comm_source != "traced":
        low, high = low + 0.1, high + 0.1
        why.append("collectives by the strategy's formula (its wrapping was not traced), range widened")
    return (min(low, 0.9), high), why


def ring_units(bytes_: float, bucket: float = DDP_BUCKET_BYTES) -> int:
    return max(1, math.ceil(bytes_ / bucket))


def fit_matmul_efficiency(counts: StepCounts, cluster: Cluster, *, samples: int, measured_tokens_per_s: float,
                          calibration: Calibration = CALIBRATION, compile: bool = False) -> float:  # fmt: skip
    """The efficiency of ``cluster``'s GPU generation (:meth:`Calibration.efficiency`) at which :func:`estimate`
    gives ``measured_tokens_per_s`` (bisection: the rate rises with the efficiency)."""
    generation = cluster.gpu.generation or "hopper"
    low, high = 0.01, 1.0
    for _ in range(60):
        middle = (low + high) / 2
        rate = estimate(counts, cluster, samples=samples, compile=compile,
                        calibration=calibration.with_efficiency(generation, middle)).rate  # fmt: skip
        low, high = (middle, high) if rate < measured_tokens_per_s else (low, middle)
    return (low + high) / 2
