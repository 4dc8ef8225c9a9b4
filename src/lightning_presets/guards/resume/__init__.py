"""Resume guards: before a checkpoint is loaded, whether the preset can resume it, and the conversion when it cannot.

The rules (stage ``resume``, :mod:`~lightning_presets.guards.resume.rules`) are pure functions of the job's
:class:`~lightning_presets.core.context.Context` and a :class:`~lightning_presets.guards.resume.state.Resume`: the
checkpoint's facts (:mod:`lightning_presets.checkpoints`) and how the job loads it. Every rank reads the same
files and the same configuration, so every rank reaches the same verdict without communicating. A refusal's hint
names a :class:`~lightning_presets.checkpoints.conversions.Conversion` (:func:`conversion_for` gives the object
itself); the rules' documented examples are in :mod:`~lightning_presets.guards.resume.examples`.

:func:`resume_findings` is the one entry point: the strategies' ``load_checkpoint`` hook
(:mod:`lightning_presets.guards.strategy`) calls it, and so does ``lightning-presets check --resume-from PATH``
(:mod:`lightning_presets.tools.check.engine`) with the strategy it constructed; ``lightning-presets show`` lists what
each preset resumes (:func:`resumable`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightning_presets.checkpoints import MAX_TEXT, CheckpointReadError, clean, local_path, read_checkpoint
from lightning_presets.checkpoints.conversions import (
    Command,
    Conversion,
    Python,
    Step,
    command_line,
    render,
    to_one_file,
)
from lightning_presets.core.context import Context
from lightning_presets.core.environment import skipped_rules
from lightning_presets.core.findings import Finding
from lightning_presets.core.rules import Rule, run_rules
from lightning_presets.guards.resume.rules import CONVERSIONS, RESUME_RULES, conversion_for
from lightning_presets.guards.resume.state import Resume, checkpoints_of, loadable, resumable

__all__ = [
    "CONVERSIONS",
    "RESUME_RULES",
    "Command",
    "Conversion",
    "Python",
    "Resume",
    "Step",
    "command_line",
    "conversion_for",
    "checkpoints_of",
    "loadable",
    "render",
    "resumable",
    "resume_facts",
    "resume_findings",
    "to_one_file",
]


def _deepspeed_settings(strategy: Any) -> tuple[int | None, bool, bool]:
    """(ZeRO stage, load_universal, load_full_weights) of a DeepSpeed strategy; (None, False, False) otherwise."""
    config = getattr(strategy, "config", None)
    if not isinstance(config, Mapping):
        return None, False, False
    zero = config.get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, Mapping) else None
    checkpoint = config.get("checkpoint")
    universal = bool(checkpoint.get("load_universal")) if isinstance(checkpoint, Mapping) else False
    return (stage if type(stage) is int else None), universal, getattr(strategy, "load_full_weights", False) is True


def _default_checkpoint_io(strategy: Any) -> bool:
    """Whether ``strategy`` reads checkpoints with Lightning's own ``TorchCheckpointIO`` (or has none)."""
    try:
        plugin = getattr(strategy, "checkpoint_io", None)
    except Exception:  # Fabric's ModelParallelStrategy and FSDPStrategy raise: they take no CheckpointIO
        return True
    for _ in range(4):  # AsyncCheckpointIO wraps the one that reads
        inner = getattr(plugin, "checkpoint_io", None) if type(plugin).__name__ == "AsyncCheckpointIO" else None
        if inner is None:
            break
        plugin = inner
    return plugin is None or type(plugin).__name__ == "TorchCheckpointIO"


def _strategy_settings(strategy: Any) -> dict[str, Any]:
    """What the resume rules read of the strategy that will load the checkpoint, as :class:`Resume`'s fields."""
    try:
        stage, universal, full_weights = _deepspeed_settings(strategy)
        default_io = _default_checkpoint_io(strategy)
    except Exception:  # a strategy whose attributes raise: its settings are unknown, the checkpoint is still read
        stage, universal, full_weights, default_io = None, False, False, True
    return {
        "zero_stage": stage,
        "load_universal": universal,
        "load_full_weights": full_weights,
        "default_checkpoint_io": default_io,
    }


def resume_facts(
    path: object,
    *,
    strategy: Any = None,
    how: str = "fit(ckpt_path=...)",
    restores_optimizer: bool = True,
    state_optimizers: tuple[str, ...] | None = None,
    strict: bool = True,
) -> Resume | None:
    """What the resume rules read: the checkpoint at ``path`` and the job's loading settings (``strategy``: the
    Lightning strategy that will load it). ``None`` when ``path`` is not a local path or does not exist: Lightning
    reports those itself."""
    text = local_path(path)
    if text is None:
        return None
    settings = _strategy_settings(strategy)
    failed = False
    try:
        facts, unreadable = read_checkpoint(text), ""
    except FileNotFoundError:
        return None
    except CheckpointReadError as error:
        facts, unreadable, failed = None, clean(str(error), MAX_TEXT * 4), error.internal
    return Resume(
        path=text,
        checkpoint=facts,
        unreadable=unreadable,
        reader_failed=failed,
        how=how,
        restores_optimizer=restores_optimizer,
        state_optimizers=state_optimizers,
        strict=strict,
        **settings,
    )


def resume_findings(
    path: object,
    context: Context,
    *,
    strategy: Any = None,
    how: str = "fit(ckpt_path=...)",
    restores_optimizer: bool = True,
    own: tuple[Rule, ...] = (),
    state_optimizers: tuple[str, ...] | None = None,
    strict: bool = True,
) -> list[Finding]:
    """Every finding of the resume rules (and of the preset's ``own`` rules of stage ``resume``) for loading
    ``path`` into the job ``context``.

    The hook in :mod:`lightning_presets.guards.strategy` calls it before ``load_checkpoint``; ``lightning-presets
    check --resume-from PATH`` calls it with the strategy it constructed.
    """
    own = tuple(each for each in own if each.stage == "resume" and each not in RESUME_RULES)
    if not checkpoints_of(context.family).checked and not own:  # XLA's own format, a family declaring none: nothing
        return []
    skipped = skipped_rules()
    if "ALL" in skipped or all(str(each.code).upper() in skipped for each in (*RESUME_RULES, *own)):
        return []  # LIGHTNING_PRESETS_SKIP: not even read
    resume = resume_facts(
        path,
        strategy=strategy,
        how=how,
        restores_optimizer=restores_optimizer,
        state_optimizers=state_optimizers,
        strict=strict,
    )
    if resume is None:
        return []
    return run_rules((*RESUME_RULES, *own), "resume", context, resume)
