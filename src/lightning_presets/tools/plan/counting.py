"""What one traced step computes and moves: FLOPs and bytes per operator, and the bytes of every collective.

:class:`OpCounter` is a ``TorchDispatchMode`` active for the whole traced step (under ``FakeTensorMode``: only
shapes, so the figures are exact for the shapes, whatever the values). Per operator it records:

* **FLOPs** by torch's own formulas (``torch.utils.flop_counter.flop_registry``: matmuls, convolutions), and for
  every ``scaled_dot_product_attention`` operator by one formula of ours: forward ``4·b·h·s_q·s_k·d`` (the
  ``QKᵀ`` and ``PV`` products), backward twice that (``dV``, ``dP``, ``dQ``, ``dK``), causal or not, as torch's
  formulas count the fused kernels. torch has no formula for the CPU kernel
  ``aten._scaled_dot_product_flash_attention_for_cpu`` (its FLOPs would vanish on a ``--kernels cpu`` trace);
  ours covers it.
* **Bytes** read and written (the inputs' and outputs' sizes; views move nothing), for a per-operator roofline.
* **Collectives** (``c10d`` and ``_c10d_functional``: all-gather, reduce-scatter, all-reduce, ...), with the
  size of the group they span and the bytes each rank sends and receives in total (the gathered or reduced
  tensor's size).

Under DTensor (tensor parallelism) an operator first reaches the mode with DTensor arguments at their global
shape; the mode declines those (``NotImplemented``), DTensor runs its local operators, and those reach the mode
on plain tensors: what is counted is what this rank computes. Operators are aggregated by (name, shapes,
phase), so an 80-layer model's counts are a few hundred entries, and the step time can be computed for any
GPU afterwards (:mod:`lightning_presets.tools.plan.throughput`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from lightning_presets.tools.plan.counts import Collective, OpCost, StepCounts

__all__ = ["Collective", "OpCost", "OpCounter", "StepCounts", "attention_flops", "collective_kind"]

PHASES = ("forward", "backward", "optimizer")
MATMULS = frozenset({"mm", "addmm", "bmm", "baddbmm", "matmul", "convolution", "convolution_backward", "_grouped_mm"})
_ATTENTION_FORWARD = frozenset({
    "_scaled_dot_product_flash_attention", "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_attention_math", "_flash_attention_forward", "_efficient_attention_forward",
})  # fmt: skip
_ATTENTION_BACKWARD = frozenset({f"{name}_backward" for name in _ATTENTION_FORWARD} | {
    "_flash_attention_backward", "_efficient_attention_backward"})  # fmt: skip
_FREE = frozenset({
    "view", "_unsafe_view", "reshape", "transpose", "t", "permute", "expand", "as_strided", "slice", "select",
    "unsqueeze", "squeeze", "detach", "alias", "split", "split_with_sizes", "chunk", "unbind", "narrow",
    "_reshape_alias", "lift_fresh", "set_", "empty", "empty_like", "empty_strided", "new_empty",
    "new_empty_strided", "_to_copy_noop", "is_same_size", "_local_scalar_dense", "resize_", "record_stream",
    "wait_tensor", "_has_compatible_shallow_copy_type", "sym_size", "sym_stride", "sym_numel", "sym_storage_offset",
})  # fmt: skip
COLLECTIVE_KINDS = {
    "allgather": "all_gather", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
    "allreduce": "all_reduce", "all_reduce": "all_reduce", "broadcast": "broadcast", "all_to_all": "all_to_all",
    "alltoall": "all_to_all",
}  # fmt: skip
"""Name fragments of the ``c10d``/``_c10d_functional`` operators, and the collective each is."""


def _tensors(values: Iterable[Any]) -> list[torch.Tensor]:
    return [value for value in values if isinstance(value, torch.Tensor)]


def _nbytes(tensor: torch.Tensor) -> int:
    return int(tensor.numel()) * tensor.element_size()


def attention_flops(name: str, args: tuple[Any, ...]) -> int:
    """FLOPs of one fused attention operator: ``4·b·h·s_q·s_k·d`` forward, twice that backward."""
    backward = name in _ATTENTION_BACKWARD
    offset = 1 if backward else 0  # the backward operators take the output's gradient first
    query, key = args[offset], args[offset + 1]
    if name in ("_flash_attention_forward", "_efficient_attention_forward", "_flash_attention_backward",
                "_efficient_attention_backward"):  # fmt: skip
        batch, s_q, heads, dim = query.shape  # (batch, length, heads, dim)
        s_k = key.shape[1]
    else:
        *lead, s_q, dim = query.shape
        batch, heads = (math.prod(lead[:-1]), lead[-1]) if lead else (1, 1)
        s_k = key.shape[-2]
    forward = 4 * batch * heads * s_q * s_k * dim
    return int(2 * forward if backward else forward)


def _group_ranks(args: list[Any]) -> tuple[int, ...] | None:
    """The global ranks of the group a collective spans: a (boxed) process group argument, or a functional
    collective's group name; ``None`` when there is neither."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d
    from torch.distributed.distributed_c10d import ProcessGroup

    resolve = getattr(distributed_c10d, "_resolve_process_group")  # noqa: B009  # a group name -> its group

    for value in args:
        group = None
        if isinstance(value, torch._C.ScriptObject):
            try:
                group = ProcessGroup.unbox(value)
            except RuntimeError:  # another script object (a reduce op, a work handle)
                continue
        elif isinstance(value, str) and value:
            try:
                group = resolve(value)
            except (KeyError, RuntimeError, ValueError):  # not a group name (a reduce op's name)
                continue
        if group is not None:
            return tuple(dist.get_process_group_ranks(group))
    return None


def collective_kind(name: str) -> str | None:
    lowered = name.lower()
    if "coalesced" in lowered and "reduce_scatter" not in lowered and "gather" not in lowered:
        return None
    return next((kind for fragment, kind in COLLECTIVE_KINDS.items() if fragment in lowered), None)


class OpCounter(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's class is untyped
    """Counts FLOPs, bytes and collectives per operator while active; ``phase`` is set by the caller."""

    def __init__(self, fake_mode: Any, gpus_per_node: int) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.fake_mode, self.gpus_per_node = fake_mode, gpus_per_node
        self.phase = "forward"
        self.tokens: int | None = None
        """Token ids the step's first embedding looked up (``None``: the model embeds none)."""
        self._ops: dict[tuple[Any, ...], list[Any]] = {}
        self._collectives: dict[tuple[str, int, bool, str, bool], list[int]] = {}
        self._pointwise_made: dict[int, Any] = {}
        """Storages written by the latest pointwise operators (a fused chain's intermediates); a bounded window."""

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if any(not issubclass(kind, torch._subclasses.fake_tensor.FakeTensor) and kind is not torch.Tensor
               and kind is not torch.nn.Parameter for kind in types):  # fmt: skip
            return NotImplemented  # DTensor and other subclasses: count the local operators they run
        out = func(*args, **kwargs)
        namespace = getattr(func, "namespace", "")
        name = func._opname if hasattr(func, "_opname") else str(func)
        flat_args, _ = tree_flatten((args, kwargs))
        if any(getattr(each, "fake_mode", self.fake_mode) is not self.fake_mode for each in _tensors(flat_args)):
            return out  # DTensor's sharding propagation runs the op at global shape in a fake mode of its own
        if namespace in ("c10d", "_c10d_functional", "c10d_functional", "_dtensor"):
            self._collective(name, flat_args, out, overlaps=namespace == "c10d")
            return out
        if namespace != "aten" or name in _FREE:
            return out  # views, allocations, and queries such as prim::device move nothing
        flat_out, _ = tree_flatten(out)
        inputs, outputs = _tensors(flat_args), _tensors(flat_out)
        if name in _ATTENTION_FORWARD or name in _ATTENTION_BACKWARD:
            flops, pointwise = attention_flops(name, args), False
        elif name in MATMULS or func._overloadpacket in _flop_registry():
            flops, pointwise = _registry_flops(func, args, kwargs, out), False
        else:
            flops, pointwise = 0, True
        moved = sum(_nbytes(each) for each in inputs) + sum(_nbytes(each) for each in outputs)
        fused = moved
        if pointwise:
            fused -= sum(_nbytes(each) for each in inputs if _storage_key(each) in self._pointwise_made)
            for each in outputs:
                self._pointwise_made[_storage_key(each)] = None
            while len(self._pointwise_made) > 64:
                self._pointwise_made.pop(next(iter(self._pointwise_made)))
        if name == "embedding" and self.tokens is None and self.phase == "forward" and len(inputs) > 1:
            self.tokens = int(inputs[1].numel())
        shapes = tuple(tuple(each.shape) for each in inputs)
        dtype = str(inputs[0].dtype).removeprefix("torch.") if inputs else "float32"
        key = (name, self.phase, dtype, shapes, pointwise)
        entry = self._ops.setdefault(key, [0, 0, 0, 0])
        entry[0] += 1
        entry[1] += flops
        entry[2] += moved
        entry[3] += fused
        return out

    def _collective(self, name: str, flat_args: list[Any], out: Any, *, overlaps: bool) -> None:
        import torch.distributed as dist

        kind = collective_kind(name)
        if kind is None:
            return
        ranks = _group_ranks(flat_args) or tuple(range(dist.get_world_size() if dist.is_initialized() else 1))
        group, crosses = len(ranks), len({rank // self.gpus_per_node for rank in ranks}) > 1
        tensors = _tensors(flat_args)
        if not tensors:
            return
        # the full tensor: a gather's output, a reduce-scatter's input, an all-reduce's (in-place) tensor
        size = max(map(_nbytes, tensors))
        if kind == "all_gather":
            size = max(size, sum(map(_nbytes, _tensors(tree_flatten(out)[0]))))
        entry = self._collectives.setdefault((kind, group, crosses, self.phase, overlaps), [0, 0])
        entry[0] += size
        entry[1] += 1

    def counts(self) -> StepCounts:
        ops = tuple(
            OpCost(name, phase, dtype, calls, flops, moved, pointwise, fused, hash(shapes))
            for (name, phase, dtype, shapes, pointwise), (calls, flops, moved, fused) in self._ops.items()
        )
        collectives = tuple(
            Collective(kind, group, crosses, size, calls, phase, overlaps)
            for (kind, group, crosses, phase, overlaps), (size, calls) in self._collectives.items()
        )
        return StepCounts(ops=ops, collectives=collectives, tokens=self.tokens)


def _storage_key(tensor: torch.Tensor) -> int:
    try:
        return id(tensor.untyped_storage())
    except (RuntimeError, NotImplementedError):
        return id(tensor)


def _flop_registry() -> dict[Any, Any]:
    from torch.utils.flop_counter import flop_registry

    return flop_registry


def _registry_flops(func: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], out: Any) -> int:
    formula = _flop_registry().get(func._overloadpacket)
    if formula is None:
        return 0
    return int(formula(*args, **kwargs, out_val=out))
