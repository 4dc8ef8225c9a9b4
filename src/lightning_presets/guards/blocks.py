"""Finding a model's repeated blocks: the unit FSDP wraps and activation checkpointing recomputes."""

from __future__ import annotations

from torch import nn


def find_repeated_blocks(model: nn.Module) -> set[type[nn.Module]]:
    """The block type of the largest ``ModuleList``/``Sequential`` of two or more modules of one type.

    "Largest" counts parameters, so a transformer's layer stack wins over a small repeated head.
    Returns an empty set when the model has no such container.
    """
    best: tuple[int, type[nn.Module]] | None = None
    for container in model.modules():
        if not isinstance(container, (nn.ModuleList, nn.Sequential)) or len(container) < 2:
            continue
        types = {type(child) for child in container}
        if len(types) != 1:
            continue
        size = sum(parameter.numel() for parameter in container.parameters())
        if size and (best is None or size > best[0]):
            best = (size, types.pop())
    return {best[1]} if best else set()


def describe_children(model: nn.Module, limit: int = 6) -> str:
    """``encoder (Encoder), head (Linear)``: the top-level children, for messages."""
    children = [f"{name} ({type(child).__name__})" for name, child in model.named_children()]
    if len(children) > limit:
        children = [*children[:limit], f"... {len(children) - limit} more"]
    return ", ".join(children) or "none"
