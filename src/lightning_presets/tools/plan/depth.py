"""Tracing a deep model at two small depths and extrapolating to its own: the plan of a 70B model in seconds.

A transformer's blocks repeat: every figure of a traced step is affine in the number of blocks ``L`` once the
blocks are identical. Parameters, gradients, optimizer state and saved activations add one block's worth per
block; every operator of a block runs once more per block (same shapes: same FLOPs and bytes per call), every
per-block collective once more; the root (embedding, head, loss) is the intercept. So the planner traces the
step with the first :data:`TRACED_BLOCKS` blocks of the stack (3 and 4) and draws the line through the two
traces to ``L`` (:func:`extrapolate`).

The peak is the one figure that is not a sum: it is the largest of the memory at every moment of the step, and
which moment holds it can change with depth (at 3 blocks an optimizer step's temporaries, at 80 the start of
backward with every block's activations). The tracker therefore keeps the peak of every *moment kind*
(``tracking``: phase × where in the stack: before the blocks, in the first, second, penultimate or last block,
after one, after them all), each of which is affine in ``L`` (the memory in the last block's forward is every
state plus ``L - 1`` blocks' activations); the extrapolated peak is the largest of the extrapolated moment peaks.
Blocks between the second and the penultimate have a neighbour on each side (FSDP2 prefetches the next block's
weights while the previous one's gradients are reduced), so their moments are affine in the block's index and
the largest is at one end: the second or the penultimate. Hence 3 blocks at least in each trace: the second
block, with both neighbours, exists in both.

Extrapolation is used only where the structure allows it (:func:`repeated_stack`): one ``ModuleList`` or
``Sequential`` holds every repeated block, at least :data:`EXTRAPOLATE_FROM` of them, all alike (the same
submodules, parameter and buffer shapes and dtypes, and the same settings: scalar attributes other than a layer
index), no parameter shared between blocks. Otherwise, or if the shortened model does not trace or its
parameters do not add up to the model's, the full model is traced. The depth tests and the plan benchmark
compare both on models small enough to trace in full.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from torch import nn

from lightning_presets.inspection.blocks import find_repeated_blocks
from lightning_presets.tools.plan.counts import Collective, OpCost, StepCounts

EXTRAPOLATE_FROM = 10
"""Blocks from which extrapolating is cheaper than tracing every block (two traces of 3 and 4 blocks cost about
as much as one of 8 or 9)."""
TRACED_BLOCKS = (3, 4)
IGNORED_SEGMENTS = frozenset({"middle", "after-middle"})
"""Moments in a block between the second and the penultimate, or after one: bounded by those two's (from the second
block to the penultimate every block has a neighbour on each side, and its moments are affine in its index)."""
_INDEX_WORDS = ("idx", "index", "layer_id", "layer_number", "layer_num")


class NotExtrapolable(Exception):
    """The shortened model cannot stand for the full one (the message says why): trace it in full."""


@dataclass(frozen=True, slots=True)
class Stack:
    """The model's stack of identical repeated blocks."""

    path: str
    """The container's name in the model (``model.layers``)."""
    count: int
    block: str
    """The blocks' class name."""


def _settings(module: nn.Module) -> tuple[tuple[str, Any], ...]:
    """A module's scalar attributes (sizes, flags, names), a layer index excepted."""
    return tuple(sorted(
        (name, value) for name, value in vars(module).items()
        if not name.startswith("_") and isinstance(value, (bool, int, float, str, type(None)))
        and not any(word in name.lower() for word in _INDEX_WORDS)
    ))  # fmt: skip


def _signature(block: nn.Module) -> tuple[Any, ...]:
    modules = tuple((name, type(each).__qualname__, _settings(each)) for name, each in block.named_modules())
    tensors = tuple((name, tuple(each.shape), str(each.dtype), each.requires_grad)
                    for name, each in (*block.named_parameters(), *block.named_buffers()))  # fmt: skip
    return modules, tensors


def repeated_stack(model: nn.Module) -> Stack | str:
    """The model's stack of identical repeated blocks, or why there is none to extrapolate over (in words)."""
    classes = find_repeated_blocks(model)
    if not classes:
        return "no repeated blocks (a ModuleList or Sequential of one block type) found"
    block = next(iter(classes))
    containers = [(name, each) for name, each in model.named_modules()
                  if isinstance(each, (nn.ModuleList, nn.Sequential)) and len(each) >= 2
                  and all(type(child) is block for child in each.children())]  # fmt: skip
    instances = [each for each in model.modules() if type(each) is block]
    if len(containers) != 1:
        return f"the {block.__name__} blocks are in {len(containers)} containers, not one"
    path, container = containers[0]
    children = list(container.children())
    if len(instances) != len(children):
        return f"{len(instances) - len(children)} {block.__name__} block(s) outside {path}"
    first = _signature(children[0])
    if any(_signature(child) != first for child in children[1:]):
        return f"the {len(children)} {block.__name__} blocks of {path} differ (submodules, shapes, dtypes or settings)"
    seen: set[int] = set()
    for child in children:
        ids = {id(p) for p in child.parameters()}
        if ids & seen:
            return f"the {block.__name__} blocks of {path} share parameters"
        seen |= ids
    return Stack(path, len(children), block.__name__)


def truncate(model: nn.Module, stack: Stack, blocks: int) -> tuple[nn.Module, ...]:
    """Keep the first ``blocks`` blocks of the stack (in place); the blocks kept, in order."""
    container = model.get_submodule(stack.path)
    if not isinstance(container, (nn.ModuleList, nn.Sequential)) or len(container) != stack.count:
        raise NotExtrapolable(f"{stack.path} is not the stack of {stack.count} blocks it was when first built")
    del container[blocks:]
    if {each.__name__ for each in find_repeated_blocks(model)} != {stack.block}:
        raise NotExtrapolable(f"with {blocks} {stack.block} blocks another stack becomes the largest repeated one")
    return tuple(container.children())


def _line(small: float, large: float, at: int) -> int:
    """The value at ``at`` blocks on the line through the two traces (at :data:`TRACED_BLOCKS`), never below 0."""
    low, high = TRACED_BLOCKS
    return max(0, round(large + (large - small) * (at - high) / (high - low)))


def _ops(small: Iterable[OpCost], large: Iterable[OpCost], line: Callable[[float, float], int]) -> tuple[OpCost, ...]:
    """Every operator class on the line: matched by name, phase, dtype and input shapes; the classes whose shapes
    change with the depth (a foreach optimizer operator over every parameter) summed per name, phase and dtype."""

    def key(op: OpCost) -> tuple[Any, ...]:
        return op.name, op.phase, op.dtype, op.pointwise, op.shape_key

    a, b = {key(op): op for op in small}, {key(op): op for op in large}
    out = [OpCost(op.name, op.phase, op.dtype, line(a[k].calls, op.calls), line(a[k].flops, op.flops),
                  line(a[k].bytes, op.bytes), op.pointwise, line(a[k].fused_bytes, op.fused_bytes), op.shape_key)
           for k, op in b.items() if k in a]  # fmt: skip
    rest: dict[tuple[Any, ...], list[list[int]]] = {}
    for side, ops in enumerate((a, b)):
        for k, op in ops.items():
            if k in a and k in b:
                continue
            sums = rest.setdefault(k[:4], [[0, 0, 0, 0], [0, 0, 0, 0]])[side]
            for i, value in enumerate((op.calls, op.flops, op.bytes, op.fused_bytes)):
                sums[i] += value
    for (name, phase, dtype, pointwise), (few, more) in rest.items():
        calls, flops, moved, fused = (line(few[i], more[i]) for i in range(4))
        out.append(OpCost(name, phase, dtype, calls, flops, moved, pointwise, fused, -1))
    return tuple(op for op in out if op.calls or op.flops or op.bytes)


def _collectives(small: Iterable[Collective], large: Iterable[Collective],
                 line: Callable[[float, float], int]) -> tuple[Collective, ...]:  # fmt: skip
    def key(each: Collective) -> tuple[Any, ...]:
        return each.kind, each.group_size, each.crosses_nodes, each.phase, each.overlaps

    a, b = {key(each): each for each in small}, {key(each): each for each in large}
    keys = list(dict.fromkeys([*b, *a]))
    zero = Collective("", 0, False, 0, 0, "")
    out = []
    for k in keys:
        few, more = a.get(k, zero), b.get(k, zero)
        calls = line(few.calls, more.calls)
        if calls:
            out.append(Collective(k[0], k[1], k[2], line(few.bytes, more.bytes), calls, k[3], k[4]))
    return tuple(out)


def counts(small: StepCounts, large: StepCounts, blocks: int) -> StepCounts:
    """The step counts of the model with ``blocks`` blocks from its traces at :data:`TRACED_BLOCKS`."""

    def line(few: float, more: float) -> int:
        return _line(few, more, blocks)

    return StepCounts(ops=_ops(small.ops, large.ops, line),
                      collectives=_collectives(small.collectives, large.collectives, line),
                      tokens=large.tokens)  # fmt: skip


def _peaks(small: Any, large: Any, blocks: int) -> tuple[int, int, int]:
    """(peak, peak of everything, transient peak) at ``blocks``: the largest extrapolated moment peak."""
    a = {seg[:2]: seg[2:] for seg in small.segments if seg[1] not in IGNORED_SEGMENTS}
    b = {seg[:2]: seg[2:] for seg in large.segments if seg[1] not in IGNORED_SEGMENTS}
    for kind in ("first", "second", "penultimate", "last"):
        if ("forward", kind) not in a or ("forward", kind) not in b:
            raise NotExtrapolable(f"the tracker did not see the {kind} block run in the shortened models' forward")
    found = [[_line(few, more, blocks) for few, more in zip(a[k], b[k], strict=True)] for k in b if k in a]
    peak, peak_all, transient = (max(each[i] for each in found) for i in range(3))
    return peak, peak_all, transient


def extrapolate(small: Any, large: Any, stack: Stack, numel: int) -> Any:
    """The :class:`lightning_presets.tools.plan.trace.Traced` of the model with all ``stack.count`` blocks, from
    its traces with the first 3 and 4 (``small``, ``large``). ``numel``: the full model's parameters, which the
    traces' must extrapolate to (else :class:`NotExtrapolable`)."""
    blocks = stack.count

    def line(name: str) -> int:
        return _line(getattr(small, name), getattr(large, name), blocks)

    facts = replace(large.facts, numel=_line(small.facts.numel, large.facts.numel, blocks))
    if facts.numel != numel:
        raise NotExtrapolable(f"{TRACED_BLOCKS[0]} and {TRACED_BLOCKS[1]} blocks extrapolate to {facts.numel:,} "
                              f"parameters, not the model's {numel:,}")  # fmt: skip
    peak, peak_all, transient = _peaks(small, large, blocks)
    low, high = TRACED_BLOCKS
    how = (f"{low} and {high} of the {blocks} {stack.block} blocks of {stack.path} traced and every figure "
           f"extrapolated linearly to {blocks} (the blocks are alike; the peak per moment of the step)")  # fmt: skip
    return replace(
        large, parameters=line("parameters"), gradients=line("gradients"), optimizer=line("optimizer"),
        activations=line("activations"), peak=peak, peak_all=peak_all, transient_peak=transient,
        counts=counts(small.counts, large.counts, blocks), facts=facts, segments=(),
        depth=f"{low} and {high} of {blocks} blocks extrapolated", notes=(*large.notes, how),
    )  # fmt: skip
