"""What one traced step computed and moved, per rank: operator classes with their FLOPs and bytes, and the
collectives with their groups and bytes (made by :class:`lightning_presets.tools.plan.counting.OpCounter`;
plain data, no torch: the step time is computed from it for any GPU)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Collective:
    """Bytes one rank's collectives of one kind moved over a group of ``group_size`` ranks, in one step."""

    kind: str
    group_size: int
    crosses_nodes: bool
    """Whether the group's ranks are on more than one node (its bytes cross the network, not NVLink)."""
    bytes: int
    """The full (gathered, or reduced) tensor's bytes, summed over the calls: what a ring moves
    ``(g - 1)/g`` of per rank (twice for an all-reduce)."""
    calls: int
    phase: str
    overlaps: bool = True
    """Issued asynchronously (``c10d``: FSDP's prefetched all-gathers, its reduce-scatters, DDP's buckets): it can
    hide behind compute. A functional collective (DTensor's tensor-parallel all-reduces) is waited for at once
    in eager mode: it cannot."""

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "group_size": self.group_size, "crosses_nodes": self.crosses_nodes,
                "bytes": self.bytes, "calls": self.calls, "phase": self.phase, "overlaps": self.overlaps}  # fmt: skip


@dataclass(frozen=True, slots=True)
class OpCost:
    """One operator's shape class in one phase: how often it ran, its FLOPs and the bytes it read and wrote."""

    name: str
    phase: str
    dtype: str
    """The first input's dtype (``bfloat16``, ``float32``): which peak its FLOPs run at."""
    calls: int
    flops: int
    """Over every call (as the bytes)."""
    bytes: int
    pointwise: bool
    """Neither a matmul nor attention: memory-bound, and what a compiler fuses."""
    fused_bytes: int
    """Bytes left when consecutive pointwise operators are fused (inputs made by a pointwise operator are read
    from registers, not memory): ``torch.compile``'s Inductor fusion, as modelled."""
    shape_key: int = 0
    """Which input shapes this class is (a hash of them; 0: not known, -1: several summed): two traces' classes
    are matched by it (:mod:`lightning_presets.tools.plan.depth`)."""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "phase": self.phase, "dtype": self.dtype, "calls": self.calls, "flops": self.flops,
                "bytes": self.bytes, "pointwise": self.pointwise, "fused_bytes": self.fused_bytes,
                "shape_key": self.shape_key}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class StepCounts:
    """What one traced step computed and moved, per rank."""

    ops: tuple[OpCost, ...] = ()
    collectives: tuple[Collective, ...] = ()
    tokens: int | None = None
    """Token ids the forward's first embedding looked up: the tokens of one step on this rank."""

    @property
    def flops(self) -> int:
        return sum(op.flops for op in self.ops if op.phase != "optimizer")

    def phase_flops(self, phase: str) -> int:
        return sum(op.flops for op in self.ops if op.phase == phase)

    @property
    def comm_bytes(self) -> int:
        return sum(each.bytes for each in self.collectives)

    def collective_bytes(self, kind: str) -> int:
        return sum(each.bytes for each in self.collectives if each.kind == kind)

    def as_dict(self) -> dict[str, Any]:
        return {"ops": [op.as_dict() for op in self.ops], "collectives": [each.as_dict() for each in self.collectives],
                "tokens": self.tokens}  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepCounts:
        return cls(ops=tuple(OpCost(**op) for op in data["ops"]),
                   collectives=tuple(Collective(**each) for each in data["collectives"]),
                   tokens=data["tokens"])  # fmt: skip

    def scaled(self, factor: float) -> StepCounts:
        """Every count times ``factor`` (rounded): a step repeated, or the counts of a model ``factor`` as deep."""
        return StepCounts(
            ops=tuple(OpCost(op.name, op.phase, op.dtype, op.calls, round(op.flops * factor), round(op.bytes * factor),
                             op.pointwise, round(op.fused_bytes * factor), op.shape_key) for op in self.ops),
            collectives=tuple(Collective(c.kind, c.group_size, c.crosses_nodes, round(c.bytes * factor), c.calls,
                                         c.phase,
                                         c.overlaps)
                              for c in self.collectives),
            tokens=self.tokens,
        )  # fmt: skip
