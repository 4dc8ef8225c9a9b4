"""The collectives a rehearsed rank enters, recorded and compared across ranks (issue 35 item 3).

:func:`recording` wraps ``torch.distributed``'s collective functions for the child's run: each call is recorded (its
kind, the group's size, the tensors' shapes and dtypes, the user's line, the Lightning hook running) and then made
on torch's fake process group, which returns at once. The object collectives (``all_gather_object``,
``broadcast_object_list``, ...) are recorded and answered here with this rank's own objects: the fake group cannot
answer them on a rank other than the source. :func:`disagreements` compares the ranks' sequences in a canonical form
(kind, group size, shapes, dtypes; the objects' sizes are not compared, they may differ legally).

A limit: each rank's collectives return what every rank would return if all held this rank's values, so code whose
shapes follow another rank's values (a size negotiated by a first all-gather, as torchmetrics pads uneven states)
is rehearsed with this rank's own size.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
from collections.abc import Iterator
from typing import Any

TENSORS = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_single", "reduce_scatter",
           "reduce_scatter_tensor", "reduce_scatter_single", "broadcast", "reduce", "gather", "scatter", "all_to_all",
           "all_to_all_single", "barrier", "monitored_barrier")  # fmt: skip
"""The tensor collectives recorded (those this torch has), made on the fake group after they are recorded."""
OBJECTS = ("all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list")
"""The object collectives recorded and answered here."""


def _hooks() -> frozenset[str]:
    """The names of Lightning's hooks a collective may run in (the module's and callbacks' public hooks and steps)."""
    from lightning.pytorch import Callback
    from lightning.pytorch.core.hooks import CheckpointHooks, DataHooks, ModelHooks

    names = {name for cls in (ModelHooks, DataHooks, CheckpointHooks, Callback) for name in vars(cls)}
    names |= {"training_step", "validation_step", "test_step", "predict_step", "configure_optimizers", "forward",
              "backward", "optimizer_step", "lr_scheduler_step"}  # fmt: skip
    return frozenset(name for name in names if not name.startswith("_"))


def _where(hooks: frozenset[str]) -> tuple[str, str]:
    """The user's line (the innermost frame of theirs) and the Lightning hook running (the innermost frame named
    as a hook, else the hook Lightning's caller is running)."""
    from lightning_presets.tools.check.rehearsal.findings import shown, theirs

    line, hook = "", ""
    frame = sys._getframe(2)
    while frame is not None and not (line and hook):
        code = frame.f_code
        if not line and theirs(code.co_filename):
            line = f"{shown(code.co_filename)}:{frame.f_lineno} in {code.co_name}"
        if not hook and code.co_name in hooks and theirs(code.co_filename):  # the user's override of a hook
            hook = code.co_name
        if not hook and isinstance(frame.f_locals.get("hook_name"), str) and "lightning" in code.co_filename:
            hook = str(frame.f_locals["hook_name"])
        frame = frame.f_back  # type: ignore[assignment]
    return line, hook


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [each for item in value for each in _tensors(item)]
    return []


def _group_size(group: Any) -> int:
    import torch.distributed as dist

    try:
        return int(dist.get_world_size(group))
    except (RuntimeError, ValueError):
        return -1


def _answer(kind: str, given: dict[str, Any]) -> None:
    """An object collective answered with this rank's own objects (what every rank would hold if all sent alike)."""
    import torch.distributed as dist

    if kind == "all_gather_object":
        given["object_list"][:] = [given["obj"]] * len(given["object_list"])
    elif kind == "gather_object" and given.get("object_gather_list") is not None:
        given["object_gather_list"][:] = [given["obj"]] * len(given["object_gather_list"])
    elif kind == "scatter_object_list" and given.get("scatter_object_input_list"):
        sent = given["scatter_object_input_list"]
        given["scatter_object_output_list"][0] = sent[dist.get_rank() % len(sent)]
    # broadcast_object_list: each rank keeps its own list


class Recorder:
    """The collectives one rank entered, in order (dicts: ``kind``, ``group``, ``shapes``, ``dtypes``, ``line``,
    ``hook``)."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._hooks = _hooks()

    def wrap(self, kind: str, function: Any) -> Any:
        signature = inspect.signature(function)

        @functools.wraps(function)
        def recorded(*arguments: Any, **keywords: Any) -> Any:
            given = signature.bind(*arguments, **keywords).arguments
            tensors = [] if kind in OBJECTS else _tensors(list(given.values()))
            line, hook = _where(self._hooks)
            self.calls.append({"kind": kind, "group": _group_size(given.get("group")),
                               "shapes": [list(each.shape) for each in tensors],
                               "dtypes": [str(each.dtype).removeprefix("torch.") for each in tensors],
                               "line": line, "hook": hook})  # fmt: skip
            if kind in OBJECTS:
                return _answer(kind, given)
            return function(*arguments, **keywords)

        return recorded


@contextlib.contextmanager
def recording() -> Iterator[Recorder]:
    """Record the collectives made through ``torch.distributed`` (and its ``distributed_c10d`` module) meanwhile."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    recorder = Recorder()
    saved: list[tuple[Any, str, Any]] = []
    for kind in (*TENSORS, *OBJECTS):
        for module in (dist, distributed_c10d):
            original = getattr(module, kind, None)
            if original is not None:
                saved.append((module, kind, original))
                setattr(module, kind, recorder.wrap(kind, original))
    try:
        yield recorder
    finally:
        for module, kind, original in saved:
            setattr(module, kind, original)


UNEVEN = ("all_to_all", "all_to_all_single", "gather", "scatter")
"""Collectives whose tensors may legally differ in shape between ranks (split sizes, the root's lists): compared by
kind and group only."""


def canonical(call: dict[str, Any]) -> tuple[Any, ...]:
    """What must agree between ranks: the kind, the group's size, the tensors' shapes and dtypes; of a list
    ``all_gather``, the output list only (each rank's input may differ where the outputs say so: NCCL gathers uneven
    tensors)."""
    shapes, dtypes = call["shapes"], call["dtypes"]
    if call["kind"] in UNEVEN:
        shapes, dtypes = [], []
    elif call["kind"] == "all_gather" and len(shapes) > 1:
        shapes, dtypes = shapes[:-1], dtypes[:-1]
    return (call["kind"], call["group"], tuple(map(tuple, shapes)), tuple(dtypes))


def _said(calls: list[dict[str, Any]]) -> str:
    """A block of one rank's collectives: their kinds with shapes, and the first user's line and hook among them."""
    if not calls:
        return "no collective"
    kinds = []
    for call in calls[:3]:
        tensors = [f"{dtype}{shape}" for shape, dtype in zip(call["shapes"], call["dtypes"], strict=False)]
        shapes = ", ".join(f"{each} x{tensors.count(each)}" if tensors.count(each) > 1 else each
                           for each in dict.fromkeys(tensors))  # fmt: skip
        kinds.append(f"{call['kind']}({shapes})")
    more = f" and {len(calls) - 3} more" if len(calls) > 3 else ""
    placed = next((call for call in calls if call["line"]), None) or next((c for c in calls if c["hook"]), calls[0])
    where = f" at {placed['line']}" if placed["line"] else ""
    hook = f" (hook {placed['hook']})" if placed["hook"] else ""
    return f"{', '.join(kinds)}{more}{where}{hook}"


def _key(call: dict[str, Any]) -> tuple[Any, ...]:
    return (*canonical(call), call["line"], call["hook"])


def disagreements(sequences: dict[int, list[dict[str, Any]]]) -> list[str]:
    """Where the ranks' sequences depart from the lowest rank's: one sentence per departure, naming the collectives,
    the ranks and the user's line (ranks that depart alike are named together); empty when all agree. The sequences
    are aligned on the collectives and the lines that make them (so the block one rank enters alone is the one
    named); collectives that agree in kind, group, shapes and dtypes agree, whichever lines make them."""
    if not sequences:
        return []
    first = min(sequences)
    found: dict[str, list[int]] = {}
    for rank, calls in sorted(sequences.items()):
        if rank != first:
            sentence = _departure(first, sequences[first], calls)
            if sentence:
                found.setdefault(sentence, []).append(rank)
    out = []
    for sentence, ranks in found.items():
        one = len(ranks) == 1
        names = f"rank {ranks[0]}" if one else f"ranks {', '.join(map(str, ranks))}"
        sentence = sentence.replace("{other} does not", f"{names} {'does' if one else 'do'} not")
        out.append(sentence.replace("{other} enters", f"{names} {'enters' if one else 'enter'}"))
    return out


def _departure(first: int, reference: list[dict[str, Any]], calls: list[dict[str, Any]]) -> str:
    """The first block where ``calls`` departs from ``reference`` (rank ``first``'s), as a sentence naming the other
    rank as ``{other}``; empty when they agree."""
    import difflib

    matcher = difflib.SequenceMatcher(None, [_key(c) for c in reference], [_key(c) for c in calls], autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        mine, theirs = reference[i1:i2], calls[j1:j2]
        if tag == "equal" or [canonical(c) for c in mine] == [canonical(c) for c in theirs]:
            continue
        if not mine:
            return (
                f"{{other}} enters {_said(theirs)}, which rank {first} does not enter: a collective some ranks "
                "enter and others do not (the others wait in it until the timeout, or pair it with a later one)"
            )
        if not theirs:
            return (
                f"rank {first} enters {_said(mine)}, which {{other}} does not enter: a collective some ranks "
                "enter and others do not (the others wait in it until the timeout, or pair it with a later one)"
            )
        if [c["kind"] for c in mine] == [c["kind"] for c in theirs]:
            return (f"rank {first} enters {_said(mine)} and {{other}} enters {_said(theirs)}: the same collectives "
                    "with different shapes or dtypes")  # fmt: skip
        return (f"rank {first} enters {_said(mine)} where {{other}} enters {_said(theirs)}: the ranks enter "
                "different collectives")  # fmt: skip
    return ""
