"""Guard rules: pure functions over a snapshot, each declaring its code, severity and examples."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from lightning_presets.core.findings import Finding, Severity

Stage = Literal["options", "construction", "model", "setup"]
"""When a rule runs.

``options``: on the preset's arguments, when the strategy object is built.
``construction``: on the final :class:`~lightning_presets.Context`, inside ``Trainer(...)``/``Fabric(...)``.
``model``: on the context and the model, before the first collective and before any heavy work.
``setup``: on the context and the model once it is complete (after ``configure_model``), just before the
strategy wraps it; run by the family's own hook.
"""


class Problem(NamedTuple):
    """What a rule function returns when it fires: the message and the hint."""

    message: str
    hint: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Rule:
    """A guard: one concern, one stable code, a failing and a fixed example for the docs."""

    code: str
    severity: Severity
    stage: Stage
    title: str
    """One line for ``show`` and ``docs/errors.md``."""
    check: Callable[..., Problem | None]
    fails: str
    """Code that triggers the rule."""
    fixed: str
    """The nearest code that passes it."""

    def __call__(self, *args: Any) -> Finding | None:
        problem = self.check(*args)
        if problem is None:
            return None
        return Finding(code=self.code, severity=self.severity, message=problem.message, hint=problem.hint)


def rule(
    code: str, severity: Severity, stage: Stage, title: str, *, fails: str, fixed: str
) -> Callable[[Callable[..., Problem | None]], Rule]:
    """Turn a function returning :class:`Problem` or ``None`` into a :class:`Rule`."""

    def wrap(check: Callable[..., Problem | None]) -> Rule:
        return Rule(code=code, severity=severity, stage=stage, title=title, check=check, fails=fails, fixed=fixed)

    return wrap


def run_rules(rules: Iterable[Rule], stage: Stage, *args: Any) -> list[Finding]:
    """Every finding of the rules of one stage, in declaration order."""
    findings = []
    for each in rules:
        if each.stage == stage:
            finding = each(*args)
            if finding is not None:
                findings.append(finding)
    return findings
