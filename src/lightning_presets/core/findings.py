"""Findings, the errors that carry them, and how a list of findings is reported."""

from __future__ import annotations

import re
import sys
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

Severity = Literal["error", "warning"]
_CODE = re.compile(r"LP\d{3}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding:
    """One problem with a configuration: a stable code, what is wrong, and the fix."""

    code: str
    """Stable identifier, ``LP`` and three digits; documented in ``docs/errors.md``."""
    severity: Severity
    """``"error"`` rejects the configuration, ``"warning"`` lets it through."""
    message: str
    """What is wrong, with the user's real values."""
    hint: str
    """The fix."""
    conditional: bool = False
    """A model-stage rule's warning before the model exists: it names what the model must do, and the rule decides
    later (:func:`lightning_presets.core.rules.conditional_findings`)."""

    def __post_init__(self) -> None:
        if not _CODE.fullmatch(self.code):
            raise ValueError(f"finding code {self.code!r} must be 'LP' followed by three digits")
        if self.severity not in ("error", "warning"):
            raise ValueError(f"finding severity {self.severity!r} must be 'error' or 'warning'")

    def __str__(self) -> str:
        label = "" if self.severity == "error" else " (conditional warning)" if self.conditional else " (warning)"
        return f"[{self.code}]{label} {self.message}\n  hint: {self.hint}"

    def as_dict(self) -> dict[str, str]:
        return {"code": self.code, "severity": self.severity, "message": self.message, "hint": self.hint}


class PresetConfigError(ValueError):
    """A preset rejected its configuration. ``.findings`` holds every finding, errors first."""

    def __init__(self, findings: Sequence[Finding]) -> None:
        ordered = sorted(findings, key=lambda finding: finding.severity != "error")
        self.findings: tuple[Finding, ...] = tuple(ordered)
        super().__init__("\n".join(str(finding) for finding in self.findings))

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(finding.code for finding in self.findings)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (list(self.findings),))


class UsageError(ValueError):
    """A request that is malformed itself (the CLI's exit code 2), as opposed to a configuration that is rejected."""


class PresetWarning(UserWarning):
    """A warning finding, raised through :func:`warnings.warn`. ``.finding`` holds it."""

    def __init__(self, finding: Finding) -> None:
        self.finding = finding
        super().__init__(str(finding))

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.finding,))


# Packages whose frames stand between a guard and the user's own line (``Trainer(...)``, ``fit``, ``setup``).
_INTERNAL_PACKAGES = (
    "lightning_presets", "_lightning_presets_autoload", "lightning", "pytorch_lightning", "lightning_fabric",
    "lightning_utilities", "torch", "jsonargparse", "importlib", "contextlib", "functools", "warnings",
)  # fmt: skip


def _internal(module: str) -> bool:
    return any(module == package or module.startswith(package + ".") for package in _INTERNAL_PACKAGES)


def user_stacklevel() -> int:
    """The ``stacklevel`` that makes a warning point at the first frame outside Lightning and this package.

    Counted from the function that calls :func:`warnings.warn` (its caller is ``stacklevel=2``).
    """
    frame = sys._getframe(2)
    level = 2
    while frame.f_back is not None and _internal(str(frame.f_globals.get("__name__", ""))):
        frame = frame.f_back
        level += 1
    return level


def report(findings: Iterable[Finding]) -> None:
    """Raise :class:`PresetConfigError` if any finding is an error, else warn each warning at the user's line."""
    findings = list(findings)
    if any(finding.severity == "error" for finding in findings):
        raise PresetConfigError(findings)
    if findings:
        stacklevel = user_stacklevel()
        for finding in findings:
            warnings.warn(PresetWarning(finding), stacklevel=stacklevel)


# Users meet these in tracebacks and `except` clauses under the public name.
for _public in (Finding, PresetConfigError, PresetWarning):
    _public.__module__ = "lightning_presets"
