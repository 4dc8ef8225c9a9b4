"""Finding a model's repeated blocks: the unit FSDP wraps and activation checkpointing recomputes."""

from __future__ import annotations

from torch import nn

from lightning_presets.registry import private


def find_repeated_blocks(model: nn.Module) -> set[type[nn.Module]]:
    """The block type of the largest ``ModuleList``/``Sequential`` of two or more modules of one type.

    "Largest" counts parameters, so a transformer's layer stack wins over a small repeated head.
    Returns an empty set when the model has no such container.

    One pass over the module tree, without recursion: each module's parameter count is its own parameters plus its
    children's, counted once per module (a deep chain of containers costs linear time, not quadratic, and never
    meets the interpreter's recursion limit). A parameter shared by two blocks of one container counts in both.
    """
    order: list[nn.Module] = []  # every module after all of its children (post-order), each once
    state: dict[int, bool] = {}  # id -> finished
    stack: list[tuple[nn.Module, bool]] = [(model, False)]
    while stack:
        module, expanded = stack.pop()
        if expanded:
            state[id(module)] = True
            order.append(module)
            continue
        if id(module) in state:
            continue
        state[id(module)] = False
        stack.append((module, True))
        stack.extend((child, False) for child in private.child_modules(module) if id(child) not in state)
    sizes: dict[int, int] = {}
    best: tuple[int, type[nn.Module]] | None = None
    for module in order:
        own = sum(parameter.numel() for parameter in private.own_parameters(module))
        children = private.child_modules(module)
        sizes[id(module)] = own + sum(sizes.get(id(child), 0) for child in children)
        if not isinstance(module, (nn.ModuleList, nn.Sequential)) or len(children) < 2:
            continue
        types = {type(child) for child in children}
        if len(types) != 1:
            continue
        size = sizes[id(module)]
        if size and (best is None or size > best[0]):
            best = (size, types.pop())
    return {best[1]} if best else set()


def describe_children(model: nn.Module, limit: int = 6) -> str:
    """``encoder (Encoder), head (Linear)``: the top-level children, for messages."""
    children = [f"{name} ({type(child).__name__})" for name, child in model.named_children()]
    if len(children) > limit:
        children = [*children[:limit], f"... {len(children) - limit} more"]
    return ", ".join(children) or "none"
