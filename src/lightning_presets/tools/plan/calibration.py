"""The step-time estimate's constants, and the published measurements ``matmul_efficiency`` is fitted on: one row
per GPU generation.

**The term per generation.** A matmul reaches ``peak × efficiency(GPU)``: the datasheet's dense peak times a share
that differs by chip generation, because what a chip sustains differs from its datasheet in different ways (its
largest ``matmul`` reaches 86.9 % of peak on an A100 and 80.3 % on an H100-SXM: :data:`..hardware.MAMF_SOURCE`;
an H100 throttles its clock at its power limit under a whole training step, an A100 much less; FlashAttention-2,
the kernel both published tables ran, reaches 50-73 % of an A100's peak but about 35 % of an H100's: Dao 2023,
https://arxiv.org/abs/2307.08691, and Shah et al. 2024, https://arxiv.org/abs/2407.08608). One constant for every
GPU (fitted on H100 rows) over-predicted every H100 row and under-predicted every A100 row of llm-foundry's tables;
so the share is fitted per generation, on **one** published row each (:data:`CALIBRATED_ROWS`):

* ``hopper`` (H100-SXM, H100-PCIe, H200): llm-foundry's MPT-7B on 8 × H100 80GB, FSDP FULL_SHARD, micro-batch 6 ×
  2,048, no checkpointing: **10,643 tokens/s per GPU**;
* ``ampere`` (A100-40GB, A100-80GB): the same run on 8 × A100 80GB: **4,641 tokens/s per GPU**
  (https://github.com/mosaicml/llm-foundry/blob/main/scripts/train/benchmarking/README.md).

A generation without a row (Blackwell, Ada, CDNA3) takes Hopper's share scaled by the chips' measured matmul
ceilings (``mamf`` of the GPU over H100-SXM's), or Hopper's where none is measured, and its range is widened.
Every other published row is judged, not fitted on: llm-foundry's other rows and torchtitan's Llama 3.1 8B rows
(which calibrated this constant before: they are now held out), by the project's published-runs and throughput
benchmarks (docs/plan.md).

How a row is fitted (the published-runs benchmark's ``--calibrate``): ``mpt_7b`` is traced under the ``fsdp2``
preset at the row's micro-batch for 8 GPUs (the benchmark caches the counts), and the
share is the value at which :func:`..throughput.estimate` gives the published rate (bisection). The preset differs
from llm-foundry's configuration in ways the constant absorbs: it all-gathers fp32 weights and autocasts (their
FSDP gathers bf16 weights), and its LayerNorms run in fp32.

**Priors, not fitted** (one measurement per generation cannot fit more than one constant): ``memory_efficiency``
(the share of HBM bandwidth pointwise kernels reach), ``link_efficiency`` (the share of a link's bandwidth NCCL's
ring reaches: nccl-tests' bus bandwidth on NVLink and InfiniBand is typically 75-85 % of the line rate),
``launch_s`` (eager PyTorch's CPU cost per operator), ``latency_s`` (a collective's fixed cost),
``cpu_bandwidth`` (what ``torch.optim``'s step on CPU tensors reaches of a two-socket node's memory
bandwidth). ``judged_error`` is the ``range`` of an estimate on a calibrated GPU type: the largest error on the
published rows of the calibrated generations the benchmarks judge, rounded up.

torchtitan's selective checkpointing (``bench_throughput.py``): torchtitan's per-operator policy recomputes every
operator of a block but the matmuls it saves (all but every second ``mm``: in a Llama block ``wk``, ``wo`` and
``w3``, 36.5 % of the block's matmul FLOPs, :data:`SELECTIVE_MM_FRACTION`) and attention (saved):
:func:`selective_recompute` applies it to the difference between a trace with and without full checkpointing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from lightning_presets.tools.plan.counts import OpCost, StepCounts
from lightning_presets.tools.plan.hardware import Gpu

MEASURED_TOKENS_PER_S = 5762.0
"""torchtitan, Llama 3.1 8B, 8 × H100, FSDP, bf16, batch 2 × 8,192, selective checkpointing, eager (held out)."""
CALIBRATED_ROWS: dict[str, tuple[str, float]] = {"hopper": ("h100-7b-8", 10643.0), "ampere": ("a100-7b-8", 4641.0)}
"""Per generation, the published row (the published-runs benchmark's id) its efficiency is fitted on and its
tokens/s/GPU."""
SELECTIVE_MM_FRACTION = (1024 + 4096 + 14336) / (4096 + 1024 + 1024 + 4096 + 3 * 14336)
"""Llama 3.1 8B's block: the matmul FLOPs torchtitan's per-operator policy recomputes (``wk``, ``wo``, ``w3``: every
second ``mm`` in the order ``wq wk wv wo w1 w3 w2``) over all of them."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Calibration:
    matmul_efficiency: float
    """Fitted on Hopper: the share of the dense peak matmuls and fused attention reach."""
    generation_efficiency: Mapping[str, float] = field(default_factory=dict)
    """Fitted on the other calibrated generations (``ampere``): their own share of their own peak."""
    memory_efficiency: float = 0.7
    link_efficiency: float = 0.8
    launch_s: float = 5e-6
    latency_s: float = 10e-6
    """A collective call's fixed cost (NCCL's small-message latency is some microseconds per ring step)."""
    cpu_bandwidth: float = 100e9
    """Bytes/s per node the CPU optimizer step streams (``torch.optim`` on CPU tensors; DeepSpeed's CPU Adam twice)."""
    judged_error: float = 0.15

    def efficiency(self, gpu: Gpu) -> float:
        """The share of ``gpu``'s dense peak its matmuls reach: its generation's fitted share, else Hopper's scaled
        by the two chips' measured matmul ceilings (Hopper's where ``gpu``'s is not measured)."""
        if gpu.generation in self.generation_efficiency:
            return self.generation_efficiency[gpu.generation]
        if gpu.generation in ("hopper", "") or gpu.mamf is None:
            return self.matmul_efficiency
        return self.matmul_efficiency * gpu.mamf / HOPPER_MAMF

    def calibrated(self, gpu: Gpu) -> bool:
        return gpu.generation == "hopper" or gpu.generation in self.generation_efficiency

    def with_efficiency(self, generation: str, value: float) -> Calibration:
        if generation == "hopper":
            return replace(self, matmul_efficiency=value)
        return replace(self, generation_efficiency={**self.generation_efficiency, generation: value})


HOPPER_MAMF = 0.803
"""H100-SXM's measured matmul ceiling over its peak (:data:`..hardware.MAMF_SOURCE`)."""

CALIBRATION = Calibration(matmul_efficiency=0.5687, generation_efficiency={"ampere": 0.7388})
"""The shares as ``bench_plan_published.py --calibrate`` fits them on :data:`CALIBRATED_ROWS` (its output says the
values; the test of the calibration rows checks the two agree)."""


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
