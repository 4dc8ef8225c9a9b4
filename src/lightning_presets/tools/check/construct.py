"""Build the real Trainer/Fabric quietly and turn everything it raises or warns into findings."""

from __future__ import annotations

import contextlib
import logging
import traceback
import warnings
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from lightning_presets.core.context import Context
from lightning_presets.core.findings import Finding, PresetConfigError, PresetWarning
from lightning_presets.registry import private
from lightning_presets.tools.simulation.lightning import entry_points_scanned_once

# What a check never needs, and what costs time or prints: loggers, checkpoints, progress bars, summaries.
TRAINER_QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False,
                 "enable_model_summary": False}  # fmt: skip


@dataclass(slots=True)
class Outcome:
    """What one construction attempt gave."""

    built: Any = None
    """The Trainer or Fabric, when construction succeeded."""
    strategy: Any = None
    """The strategy, when construction got as far as creating it (even if it then failed)."""
    context: Context | None = None
    """The preset guards' snapshot, when they ran."""
    findings: list[Finding] = field(default_factory=list)
    error: BaseException | None = None
    """Lightning's own exception, if it rejected the configuration."""
    warnings: list[str] = field(default_factory=list)
    """Lightning's own warnings, as text."""
    attempted: bool = False
    """Whether the Trainer/Fabric constructor was called at all."""


_depth = 0


@contextlib.contextmanager
def session() -> Iterator[None]:
    """A batch of checks: Lightning's info logging ("GPU available", tips) silenced, entry points scanned once.

    Re-entrant: a check inside a session (the matrix) does not pay for it again.
    """
    global _depth
    if _depth:
        _depth += 1
        try:
            yield
        finally:
            _depth -= 1
        return
    disabled = logging.root.manager.disable
    with contextlib.ExitStack() as stack:
        # Global on purpose: Lightning's packages re-point a shared rank-zero logger as they are imported,
        # and optional backends (deepspeed) log a warning when Lightning first imports them.
        # Lightning's own warnings go through `warnings` and are still collected.
        logging.disable(logging.WARNING)
        stack.enter_context(entry_points_scanned_once())
        _depth = 1
        try:
            yield
        finally:
            _depth = 0
            logging.disable(disabled)


def _from_traceback(error: BaseException, outcome: Outcome) -> None:
    """Recover the strategy (and the guards' snapshot) from the frames the exception went through."""
    for frame, _ in traceback.walk_tb(error.__traceback__):
        owner = frame.f_locals.get("self")
        if owner is None:
            continue
        if type(owner).__name__ in private.CONNECTOR_CLASS_NAMES and "strategy" in getattr(owner, "__dict__", {}):
            outcome.strategy = vars(owner)["strategy"]
        elif hasattr(owner, "_lp_preset") and private.has_launcher_hook(owner):
            outcome.strategy = owner
            outcome.context = getattr(owner, "_lp_context", None) or outcome.context


def construct(factory: Any, kwargs: Mapping[str, Any]) -> Outcome:
    """Call ``factory(**kwargs)`` (Trainer or Fabric); guard findings, Lightning's error and warnings collected."""
    outcome = Outcome(attempted=True)
    with session(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome.built = factory(**kwargs)
        except PresetConfigError as error:
            outcome.findings.extend(error.findings)
            _from_traceback(error, outcome)
        except Exception as error:  # Lightning's own rejection, reported with its original text
            outcome.error = error
            _from_traceback(error, outcome)
    for record in caught:
        if isinstance(record.message, PresetWarning):
            outcome.findings.append(record.message.finding)
        elif not issubclass(record.category, DeprecationWarning):
            outcome.warnings.append(str(record.message))
    if outcome.built is not None:
        outcome.strategy = outcome.built.strategy
        outcome.context = getattr(outcome.strategy, "_lp_context", None)
    return outcome
