"""A preset's step time from its trace: which collectives and offload traffic it has, traced or by formula.

FSDP2 and tensor-parallel presets run their own wrapping in the trace: their collectives are the traced ones
(:class:`lightning_presets.tools.plan.counting.OpCounter`), and an FSDP2 offload preset's host traffic is the
shards its gathers copy in and the gradient shards its reductions copy out. A DDP replica is traced unwrapped
(no collectives run): its gradients' all-reduce is DDP's, by formula. FSDP1 and DeepSpeed are traced
unwrapped, without their optimizer: their collectives, offload traffic and optimizer step are their
strategy's, by the formulas below (ZeRO's communication volumes, Rajbhandari et al. 2020, §7), in the compute
dtype they gather (``param_dtype``, DeepSpeed's half-precision weights).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_presets.tools.plan.counts import Collective
from lightning_presets.tools.plan.layouts import Layout, bytes_per_param, compute_bytes
from lightning_presets.tools.plan.request import PlanRequest
from lightning_presets.tools.plan.throughput import Offload, Throughput, estimate, ring_units

ADAM_BYTES_PER_PARAM = 28
"""AdamW's step on fp32 state reads the weight, gradient and two moments and writes the weight and the moments:
7 × 4 bytes per parameter."""
DEEPSPEED_ADAM_BYTES_PER_PARAM = 30
"""DeepSpeed's (CPU) Adam on its fp32 master copy also writes the half-precision weight: 28 + 2."""


def _units(traced: Any) -> int:
    """FSDP units: the repeated blocks and the root (one gather each per pass)."""
    facts = traced.facts
    if facts.block_params <= 0:
        return 1
    return max(1, round(int(facts.numel - facts.root_params) / int(facts.block_params))) + 1


def _arithmetic_collectives(layout: Layout, request: PlanRequest, traced: Any) -> tuple[Collective, ...]:
    """The collectives of the presets whose wrapping was not traced, per rank and step."""
    params, world, node, nodes = traced.facts.numel, request.world_size, request.gpus_per_node, request.num_nodes
    across = nodes > 1
    units = _units(traced)
    if layout.kind == "replica":
        grad = (
            compute_bytes(request.precision)
            if layout.rank[2]
            else bytes_per_param(request.precision, request.optimizer).grads
        )
        size = round(params * grad)  # DDP all-reduces fp32 gradients; the bf16 compression hook halves them
        return (Collective("all_reduce", world, across, size, ring_units(size), "backward"),)
    half = compute_bytes(request.precision)
    size = round(params * half)
    if layout.memory.zero_optimizer:
        gathers = [Collective("all_gather", world, across, size, units, "forward"),
                   Collective("all_gather", world, across, size, units, "backward")] if layout.zero_stage == 3 else [
            Collective("all_gather", world, across, size, 1, "optimizer")]  # fmt: skip
        return (*gathers, Collective("reduce_scatter", world, across, size, units, "backward"))
    if layout.kind == "hybrid":
        return (Collective("all_gather", node, False, size, units, "forward"),
                Collective("all_gather", node, False, size, units, "backward"),
                Collective("reduce_scatter", node, False, size, units, "backward"),
                Collective("all_reduce", nodes, True, size // node, units, "backward"))  # fmt: skip
    gathers = [Collective("all_gather", world, across, size, units, "forward")]
    if layout.kind != "grad_op":  # SHARD_GRAD_OP keeps the gathered weights from forward to backward
        gathers.append(Collective("all_gather", world, across, size, units, "backward"))
    return (*gathers, Collective("reduce_scatter", world, across, size, units, "backward"))


def _offload(layout: Layout, request: PlanRequest, traced: Any) -> Offload | None:
    if not layout.offload:
        return None
    shard = traced.facts.numel / request.world_size
    if layout.traceable:  # FSDP2's CPU offload policy, traced: each gather copies its shard in, each reduction out
        counts = traced.counts
        gathered = sum(c.bytes / c.group_size for c in counts.collectives if c.kind == "all_gather")
        reduced = sum(c.bytes / c.group_size for c in counts.collectives if c.kind == "reduce_scatter")
        optimizer = sum(op.bytes for op in counts.ops if op.phase == "optimizer")
        return Offload(to_gpu=gathered, to_cpu=reduced, optimizer_bytes=optimizer)
    if layout.memory.zero_optimizer:
        half = compute_bytes(request.precision)
        fetched = 2 if layout.offload_parameters else 1  # ZeRO-3 fetches its shard for both passes' gathers
        return Offload(
            to_gpu=fetched * half * shard,
            to_cpu=half * shard,
            optimizer_bytes=DEEPSPEED_ADAM_BYTES_PER_PARAM * shard,
            vectorised=True,
        )
    weights = bytes_per_param(request.precision, request.optimizer)  # FSDP1 cpu_offload: fp32 shards on the host
    return Offload(
        to_gpu=2 * weights.weights * shard, to_cpu=weights.grads * shard, optimizer_bytes=ADAM_BYTES_PER_PARAM * shard
    )


def preset_throughput(layout: Layout, request: PlanRequest, traced: Any,
                      mesh: Mapping[str, int] | None = None) -> Throughput | None:  # fmt: skip
    """The step time of ``layout`` on the request's cluster from its trace (:class:`..trace.Traced`); ``None`` when
    the trace counted no operator (nothing to time)."""
    if not traced.counts.ops:
        return None
    traced_comm = layout.traceable and layout.kind != "replica"
    collectives = None if traced_comm else _arithmetic_collectives(layout, request, traced)
    shard = traced.facts.numel / (1 if layout.kind == "replica" else request.world_size)
    optimizer = (
        0.0
        if layout.traceable or layout.offload
        else ((DEEPSPEED_ADAM_BYTES_PER_PARAM if layout.memory.zero_optimizer else ADAM_BYTES_PER_PARAM) * shard)
    )
    notes = []
    if request.compile:
        notes.append("--compile: pointwise operators fused (each moves only what a fused kernel reads and writes) "
                     "and one launch per matmul; FLOPs and communication as eager")  # fmt: skip
    return estimate(traced.counts, request.cluster, samples=traced.batch,
                    tensor_parallel=(mesh or {}).get("tensor_parallel", 1), collectives=collectives,
                    offload=_offload(layout, request, traced), gpu_optimizer_bytes=optimizer, compile=request.compile,
                    comm_source="traced" if traced_comm else "arithmetic", notes=tuple(notes),
                    fp8=request.fp8)  # fmt: skip
