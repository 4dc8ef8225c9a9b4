"""Memory of one traced step, as torch's trackers attribute it: what :func:`lightning_presets.tools.plan.trace.trace`
measures with.

``torch.distributed._tools``' ``FSDPMemTracker`` (FSDP2) and ``MemTracker`` (otherwise) attribute every storage to
parameters, gradients, optimizer state, activations and temporaries as the step runs; :class:`_Peaks` replaces
their per-module peak bookkeeping with the three peaks the plan needs, and :class:`SavedBytes` counts what
autograd saves for backward.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
from torch import nn

PARAMETERS = ("Sharded Param", "Unsharded Param", "Buffer", "Parameter")
GRADIENTS = ("Sharded Grad", "Unsharded Grad", "Gradient")
OPTIMIZER = ("OptState", "Optstate")
STATES = PARAMETERS + GRADIENTS + OPTIMIZER
HOST_RESIDENT = ("Sharded Param", "Sharded Grad", "OptState")
"""What FSDP2's CPU offload policy keeps in CPU memory: the shards, their gradients and the optimizer state."""


def storages(tensor: torch.Tensor) -> list[Any]:
    from torch.distributed._tools.common_utils import get_untyped_storages

    return list(get_untyped_storages(tensor))


def _is_parameter(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, nn.Parameter) or isinstance(getattr(tensor, "_base", None), nn.Parameter)


class SavedBytes:
    """Bytes of the distinct storages saved for backward while it is active, parameters (and their views)
    excluded: the activation memory held from the end of the forward pass until backward frees it."""

    def __init__(self) -> None:
        self.bytes = 0
        self._held: dict[int, Any] = {}

    def _pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if not _is_parameter(tensor):
            for storage in storages(tensor):
                if id(storage) not in self._held:
                    self._held[id(storage)] = storage
                    self.bytes += storage.nbytes()
        return tensor

    @contextlib.contextmanager
    def counting(self) -> Iterator[SavedBytes]:
        with torch.autograd.graph.saved_tensors_hooks(self._pack, _unpack):
            yield self
        self._held.clear()  # the ids were held only to keep them unique while counting


def _unpack(tensor: torch.Tensor) -> torch.Tensor:
    return tensor


def category_sum(snapshot: Mapping[Any, Mapping[Any, int]], names: tuple[str, ...]) -> int:
    return sum(
        amount for device in snapshot.values() for key, amount in device.items()
        if str(getattr(key, "value", key)) in names
    )  # fmt: skip


def _total(snapshot: Mapping[Any, Mapping[Any, int]]) -> int:
    return sum(device.get("Total", 0) for device in snapshot.values())


class _Peaks:
    """Mixed into torch's trackers in place of their per-module peak bookkeeping (a deep copy of the snapshot per
    new peak per active module, most of a trace's time): the peaks of the device share, of everything, and of
    the transient memory, over the whole step."""

    _curr_mem_snap: dict[Any, dict[Any, int]]
    _mod_tracker: Any
    lp_host: tuple[str, ...] = ()
    lp_peak = lp_peak_all = lp_transient = 0
    lp_blocks: tuple[nn.Module, ...] = ()
    """The repeated blocks, in order: when set, the three peaks are also kept per moment of the step
    (``lp_segments``), for :mod:`lightning_presets.tools.plan.depth`."""
    lp_phase = "forward"
    lp_segments: dict[tuple[str, str], list[int]]
    lp_seen: dict[str, set[int]]
    lp_last: dict[str, int]

    def _lp_where(self) -> list[tuple[str, str]]:
        """The kinds of the present moment: (phase, where in the stack). Inside a block: ``first``, ``second``,
        ``penultimate``, ``last`` (by index; a block may be two of them) or ``middle``; outside every block:
        ``pre`` or ``post`` (before or after every block ran in this phase), else ``after-`` the kind of the block
        that ran last."""
        blocks, parents, phase = self.lp_blocks, self._mod_tracker.parents, self.lp_phase
        index = next((i for i, block in enumerate(blocks) if self._mod_tracker.get_known_fqn(block) in parents), None)
        seen = self.lp_seen.setdefault(phase, set())
        if index is not None:
            seen.add(index)
            self.lp_last[phase] = index
            return [(phase, where) for where in block_kinds(index, len(blocks))]
        if not seen:
            return [(phase, "pre")]
        if len(seen) == len(blocks):
            return [(phase, "post")]
        return [(phase, f"after-{where}") for where in block_kinds(self.lp_last[phase], len(blocks))]

    def _update_peak_stats(self, peak_state: Any) -> None:
        snapshot = self._curr_mem_snap
        total = _total(snapshot)
        segments = []
        if self.lp_blocks:
            segments = [self.lp_segments.setdefault(where, [0, 0, 0]) for where in self._lp_where()]
            low = min(min(each) for each in segments)
        else:
            low = min(self.lp_peak, self.lp_peak_all, self.lp_transient)
        if total <= low:
            return  # each peak is at most the total: none can grow
        peak = total - category_sum(snapshot, self.lp_host)
        transient = total - category_sum(snapshot, STATES)
        self.lp_peak_all = max(self.lp_peak_all, total)
        self.lp_peak = max(self.lp_peak, peak)
        self.lp_transient = max(self.lp_transient, transient)
        for segment in segments:
            segment[:] = [max(segment[0], peak), max(segment[1], total), max(segment[2], transient)]


def block_kinds(index: int, count: int) -> list[str]:
    """Which of ``first``, ``second``, ``penultimate``, ``last`` block ``index`` of ``count`` is (else ``middle``)."""
    kinds = [kind for kind, at in (("first", 0), ("second", 1), ("penultimate", count - 2), ("last", count - 1))
             if index == at]  # fmt: skip
    return kinds or ["middle"]


class _NestedCalls:
    """Mixed into ``FSDPMemTracker``: a module entered again in the same forward (a ``training_step`` that calls
    ``self(...)`` while the preset routes the step through the root's ``__call__``, as Lightning's forward
    redirection does) runs FSDP's own hook without the tracker's per-module statistics, which refuse a second
    entry; its memory is still counted where it is allocated."""

    memory_tracking: dict[Any, Any]
    _mod_tracker: Any

    def _fsdp_state_pre_forward(self, fsdp_mod: Any, original: Callable[..., Any]) -> Callable[..., Any]:
        tracked = super()._fsdp_state_pre_forward(fsdp_mod, original)  # type: ignore[misc]

        def pre_forward(*args: Any, **kwargs: Any) -> Any:
            if fsdp_mod in self.memory_tracking and not self._mod_tracker.is_bw:
                return original(*args, **kwargs)
            return tracked(*args, **kwargs)

        return pre_forward


def tracker(
    model: nn.Module, optimizers: list[torch.optim.Optimizer], offloaded: bool, blocks: tuple[nn.Module, ...] = ()
) -> Any:
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.fsdp import FSDPModule

    outermost = next((module for module in model.modules() if isinstance(module, FSDPModule)), None)
    tracker: Any
    if outermost is not None:
        tracker = type("FSDPPeaks", (_Peaks, _NestedCalls, FSDPMemTracker), {})(
            outermost, optimizers[0] if optimizers else None
        )
    else:
        tracker = type("Peaks", (_Peaks, MemTracker), {})()
        tracker.track_external(model, *optimizers)
    tracker.lp_host = HOST_RESIDENT if offloaded else ()
    tracker.lp_blocks, tracker.lp_segments, tracker.lp_seen, tracker.lp_last = blocks, {}, {}, {}
    return tracker
