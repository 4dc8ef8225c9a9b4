"""Rule builders for the concerns many presets share: an accelerator they need, a single device, no repeated block, an
option that takes one of a few values.

Each returns an ordinary :class:`~lightning_presets.core.rules.Rule`; the preset supplies its own code, wording
and examples. Messages are ``str.format`` templates over :func:`fields`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from lightning_presets.core.context import Context, Options, PrecisionContext
from lightning_presets.core.findings import Severity
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.inspection.blocks import describe_children, find_repeated_blocks

# Models the documented examples of the block rules start from (``torch.nn`` is in the examples' namespace).
NO_BLOCKS = "model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))   # no repeated block\n"
BLOCKS = "model = nn.Sequential(*(nn.TransformerEncoderLayer(64, 4, 128) for _ in range(4)))   # 4 identical blocks\n"


def fields(ctx: Context) -> dict[str, Any]:
    """What a message template may name: ``{accelerator}``, ``{devices}``, ``{nodes}``, ``{world}``,
    ``{world_arithmetic}``, ``{preset}``, ``{precision}``, ``{constructor}`` (``Trainer`` or ``Fabric``)."""
    return {
        "accelerator": ctx.accelerator,
        "devices": ctx.devices_per_node,
        "nodes": ctx.num_nodes,
        "world": ctx.world_size,
        "world_arithmetic": ctx.world_arithmetic,
        "preset": ctx.preset,
        "precision": ctx.precision,
        "constructor": ctx.constructor,
    }


def needs_accelerator(
    code: str,
    title: str,
    *,
    accelerators: tuple[str, ...],
    why: str,
    hint: str,
    fails: str,
    fixed: str,
    show: tuple[str, ...] = ("accelerator",),
    **declared: Any,
) -> Rule:
    """An error unless the accelerator is one of ``accelerators``; the message starts with the user's call."""

    def check(ctx: Context) -> Problem | None:
        if ctx.accelerator in accelerators:
            return None
        values = fields(ctx)
        return Problem(f"{ctx.call(*show)}: {why.format(**values)}", hint.format(**values))

    return rule(code, "error", "construction", title, fails=fails, fixed=fixed, **declared)(check)


def needs_cuda(code: str, title: str, *, why: str, hint: str, fails: str, fixed: str, **declared: Any) -> Rule:
    """An error unless the accelerator is CUDA."""
    return needs_accelerator(
        code, title, accelerators=("cuda",), why=why, hint=hint, fails=fails, fixed=fixed, **declared
    )


def one_device(
    code: str, title: str, *, why: str, hint: str, fails: str, fixed: str, severity: Severity = "warning",
    per_node: bool = False, **declared: Any,
) -> Rule:  # fmt: skip
    """Fires when the whole job has one process (``per_node``: when each node has one): a warning where it only wastes
    effort, an error where it fails."""

    def check(ctx: Context) -> Problem | None:
        if (ctx.devices_per_node if per_node else ctx.world_size) > 1:
            return None
        values = fields(ctx)
        return Problem(f"{ctx.call('devices', 'num_nodes')}: {why.format(**values)}", hint.format(**values))

    return rule(code, severity, "construction", title, fails=fails, fixed=fixed, **declared)(check)


def _given(value: Any) -> bool:
    if isinstance(value, (set, frozenset, list, tuple, dict)):
        return bool(value)
    return value is not None and value is not False


def repeated_block(
    code: str,
    title: str,
    *,
    consequence: str,
    hint: str,
    setup: str,
    unless_given: tuple[str, ...] = (),
    unless_model: Callable[[nn.Module], bool] | None = None,
    **declared: Any,
) -> Rule:
    """A setup-stage warning when the model has no repeated block to wrap or checkpoint.

    It stays silent when every option in ``unless_given`` was set (the user named the blocks), or when
    ``unless_model(model)`` says the preset leaves this model alone (it shards itself). ``consequence``
    may contain ``{checkpointing}``: " and nothing is checkpointed" for presets that checkpoint activations.
    ``setup`` is the examples' call that sets the model up: after a model without repeated blocks (:data:`NO_BLOCKS`)
    it fails, after one with them (:data:`BLOCKS`) it is fixed.
    """

    def check(ctx: Context, model: nn.Module) -> Problem | None:
        if unless_given and all(_given(ctx.options.get(key)) for key in unless_given):
            return None
        if (unless_model is not None and unless_model(model)) or find_repeated_blocks(model):
            return None
        checkpointing = " and nothing is checkpointed" if ctx.activation_checkpointing else ""
        return Problem(
            f"{ctx.call()}: no repeated block found in {type(model).__name__} (top-level children: "
            f"{describe_children(model)}); {consequence.format(checkpointing=checkpointing)}",
            hint.format(**fields(ctx)),
        )

    return rule(code, "warning", "setup", title, fails=NO_BLOCKS + setup, fixed=BLOCKS + setup, **declared)(check)


def one_of(
    code: str,
    title: str,
    *,
    key: str,
    default: Any,
    choices: tuple[str, ...],
    what: str,
    consequence: str = "",
    accepts: Callable[[Any], bool] | None = None,
    hint: str = "",
    **declared: Any,
) -> Rule:
    """An ``options`` error unless the option ``key`` (``default`` when not given) is one of ``choices`` (or, given
    ``accepts``, is a value it accepts): the message says ``key=value is not {what}``, then ``consequence``; the hint
    lists the choices unless ``hint`` says otherwise."""

    def check(options: Options | PrecisionContext) -> Problem | None:
        value = options.values.get(key, default)
        if accepts(value) if accepts is not None else value in choices:
            return None
        return Problem(
            f"{options.call(key)}: {key}={value!r} is not {what}{consequence}",
            hint or f"use one of {', '.join(map(repr, choices))}",
        )

    return rule(code, "error", "options", title, **declared)(check)
