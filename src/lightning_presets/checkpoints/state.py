"""What an unpickled state holds: its mappings, the dtypes of its tensors, and the optimizer states and how they are
keyed (read from the placeholders of :mod:`~lightning_presets.checkpoints.unpickler`)."""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import Any

from lightning_presets.checkpoints.facts import KeyStyle
from lightning_presets.checkpoints.unpickler import DTYPE_NAMES, PickledObject, Storage

_DEPTH = 64


def dtype_of(value: Any, depth: int = 0) -> str | None:
    """The dtype of a pickled tensor (``None``: not a tensor)."""
    if isinstance(value, Storage):
        return value.dtype
    if not isinstance(value, PickledObject) or depth > 3 or not value.qualname.startswith("torch."):
        return None
    for argument in value.args:
        if isinstance(argument, Storage):
            return argument.dtype
        if type(argument) is type and issubclass(argument, PickledObject) and argument.qualname[6:] in DTYPE_NAMES:
            return argument.qualname[6:]
        found = dtype_of(argument, depth + 1)
        if found is not None:
            return found
    return None


def mapping_of(value: Any) -> Mapping[Any, Any] | None:
    if isinstance(value, Mapping):
        return value
    if isinstance(value, PickledObject) and value.items and value.qualname.startswith("collections."):
        return value.items
    return None


def dtypes_of(value: Any) -> tuple[str, ...]:
    """Dtypes of the tensors in a (nested) state dict, most frequent first."""
    counts: collections.Counter[str] = collections.Counter()
    seen: set[int] = set()

    def walk(item: Any, depth: int) -> None:
        if depth > _DEPTH or id(item) in seen:
            return
        seen.add(id(item))
        dtype = dtype_of(item)
        if dtype is not None:
            counts[dtype] += 1
            return
        mapping = mapping_of(item)
        children = mapping.values() if mapping is not None else item if isinstance(item, (list, tuple)) else ()
        for child in children:
            walk(child, depth + 1)

    walk(value, 0)
    return tuple(dtype for dtype, _ in counts.most_common())


def is_optimizer_state(value: Any) -> bool:
    """A mapping shaped like an optimizer's ``state_dict()``: ``param_groups`` (torch.optim's, and the wrappers that
    keep them, such as Lookahead's ``fast_state``/``slow_state``/``param_groups``), or a ``state`` of mappings."""
    mapping = mapping_of(value)
    if mapping is None:
        return False
    return "param_groups" in mapping or ("state" in mapping and mapping_of(mapping["state"]) is not None)


def has_tensors(value: Any) -> bool:
    mapping = mapping_of(value)
    return mapping is not None and any(dtype_of(item) is not None for item in mapping.values())


def key_style(state: Any) -> KeyStyle:
    """How an optimizer's state is keyed; ``none`` when there is none or its shape is not torch.optim's."""
    mapping = mapping_of(state)
    if mapping is None:
        return "none"
    keys = list(mapping_of(mapping.get("state")) or ())
    if not keys:  # no step taken yet: the parameter groups still name the parameters
        groups = mapping.get("param_groups")
        keys = [
            param
            for group in (groups if isinstance(groups, list) else [])
            for param in _listed((mapping_of(group) or {}).get("params"))
        ]
    if not keys:
        return "none"
    return "ids" if all(type(key) is int for key in keys) else "names"


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


def as_int(value: Any) -> int | None:
    """An int, or an enum member pickled as its class and value (DeepSpeed's ``ZeroStageEnum``)."""
    if isinstance(value, PickledObject) and len(value.args) == 1:
        value = value.args[0]
    return value if type(value) is int else None
