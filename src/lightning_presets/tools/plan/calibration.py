"""The step-time estimate's constants, and the one measurement ``matmul_efficiency`` is fitted on.

**The measurement** (the only one fitted on): torchtitan's Llama 3.1 8B on 8 × H100, FSDP, bf16, local batch 2,
sequence 8,192, selective (per-operator) activation checkpointing, eager: **5,762 tokens/s per GPU**
(torchtitan's published Llama 3 H100 benchmark, Table 1, December 2024:
https://github.com/pytorch/torchtitan/blob/main/benchmarks/llama3_h100_202412_torchtitan.md). Its H100s are
96 GB HBM2e parts at 2.4 TB/s, power-capped to 500 W (:data:`..hardware.CALIBRATION_GPU`), whose peak FLOP/s
torchtitan does not know; the fitted efficiency is relative to H100-SXM's datasheet peak, so it absorbs the
power cap: on a 700 W H100-SXM the estimate is likely low.

How it is fitted (the throughput benchmark's ``--calibrate``): ``llama3_8b`` (the same shapes) is
traced under the ``fsdp2`` preset for 8 GPUs with and without full activation checkpointing; the difference
in backward is what recomputation runs. torchtitan's selective policy recomputes every operator of a block but
the matmuls it saves (all but every second ``mm``: in a Llama block ``wk``, ``wo`` and ``w3``, 36.5 % of the
block's matmul FLOPs, :data:`SELECTIVE_MM_FRACTION`) and attention (saved): :func:`selective_recompute`.
``matmul_efficiency`` is then the value at which :func:`..throughput.estimate` gives 5,762 tokens/s
(bisection). The preset differs from torchtitan's configuration in two ways the constant also absorbs: it
all-gathers fp32 weights and autocasts (torchtitan's ``MixedPrecisionPolicy`` gathers bf16 weights).

**Priors, not fitted** (one measurement cannot fit more than one constant): ``memory_efficiency`` (the share
of HBM bandwidth pointwise kernels reach), ``link_efficiency`` (the share of a link's bandwidth NCCL's ring
reaches: nccl-tests' bus bandwidth on NVLink and InfiniBand is typically 75-85 % of the line rate),
``launch_s`` (eager PyTorch's CPU cost per operator), ``latency_s`` (a collective's fixed cost),
``cpu_bandwidth`` (what ``torch.optim``'s step on CPU tensors reaches of a two-socket node's memory
bandwidth). ``judged_error`` is the ``range`` of an estimate on the calibrated GPU type: the largest error on
the published rows the throughput benchmark judges (none of them fitted on: 6.5 %, the compiled
8-GPU row), widened to 15 % because every judged row is the same model from the same source.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_presets.tools.plan.counts import OpCost, StepCounts

MEASURED_TOKENS_PER_S = 5762.0
"""torchtitan, Llama 3.1 8B, 8 × H100, FSDP, bf16, batch 2 × 8,192, selective checkpointing, eager."""
SELECTIVE_MM_FRACTION = (1024 + 4096 + 14336) / (4096 + 1024 + 1024 + 4096 + 3 * 14336)
"""Llama 3.1 8B's block: the matmul FLOPs torchtitan's per-operator policy recomputes (``wk``, ``wo``, ``w3``: every
second ``mm`` in the order ``wq wk wv wo w1 w3 w2``) over all of them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    matmul_efficiency: float
    """Fitted: the share of the dense peak matmuls and fused attention reach."""
    memory_efficiency: float = 0.7
    link_efficiency: float = 0.8
    launch_s: float = 5e-6
    latency_s: float = 10e-6
    """A collective call's fixed cost (NCCL's small-message latency is some microseconds per ring step)."""
    cpu_bandwidth: float = 100e9
    """Bytes/s per node the CPU optimizer step streams (``torch.optim`` on CPU tensors; DeepSpeed's CPU Adam twice)."""
    judged_error: float = 0.15


CALIBRATION = Calibration(matmul_efficiency=0.6550)
"""``matmul_efficiency`` as the throughput benchmark's ``--calibrate`` fits it (its output says the
value; the test of the calibration row checks the two agree)."""


def _key(op: OpCost) -> tuple[str, str, str, bool]:
    return (op.name, op.phase, op.dtype, op.pointwise)


def _totals(counts: StepCounts, phase: str) -> dict[tuple[str, str, str, bool], list[int]]:
    """Calls, FLOPs, bytes and fused bytes per operator (name, phase, dtype, pointwise), over every shape."""
    totals: dict[tuple[str, str, str, bool], list[int]] = {}
    for op in counts.ops:
        if op.phase == phase:
            entry = totals.setdefault(_key(op), [0, 0, 0, 0])
            for index, value in enumerate((op.calls, op.flops, op.bytes, op.fused_bytes)):
                entry[index] += value
    return totals


def recomputed(plain: StepCounts, checkpointed: StepCounts) -> list[OpCost]:
    """The operators full checkpointing adds to backward: ``checkpointed``'s backward beyond ``plain``'s, per
    operator (its shapes summed)."""
    before = _totals(plain, "backward")
    extra = []
    for key, (calls, flops, moved, fused) in _totals(checkpointed, "backward").items():
        had = before.get(key, [0, 0, 0, 0])
        more = (calls - had[0], flops - had[1], moved - had[2], fused - had[3])
        if more[0] > 0 or more[1] > 0:
            name, phase, dtype, pointwise = key
            extra.append(OpCost(name, phase, dtype, max(more[0], 0), max(more[1], 0), max(more[2], 0), pointwise,
                                max(more[3], 0)))  # fmt: skip
    return extra


def selective_recompute(extra: list[OpCost], mm_fraction: float = SELECTIVE_MM_FRACTION) -> list[OpCost]:
    """What torchtitan's per-operator policy recomputes of full checkpointing's ``extra``: every pointwise operator,
    ``mm_fraction`` of the matmuls, no attention (saved)."""
    kept = []
    for op in extra:
        if op.pointwise:
            kept.append(op)
        elif op.name == "mm":
            kept.append(OpCost(op.name, op.phase, op.dtype, max(1, round(op.calls * mm_fraction)),
                               round(op.flops * mm_fraction), round(op.bytes * mm_fraction), False,
                               round(op.fused_bytes * mm_fraction)))  # fmt: skip
    return kept


def with_ops(counts: StepCounts, extra: list[OpCost]) -> StepCounts:
    return StepCounts(ops=(*counts.ops, *extra), collectives=counts.collectives, tokens=counts.tokens)
