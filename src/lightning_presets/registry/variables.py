"""The package's own environment variables, reported: a value one of them does not take, and the rules
``LIGHTNING_PRESETS_SKIP`` switches off (``check`` and ``doctor`` list them, so that a job with every rule skipped is
never shown as simply VALID)."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from lightning_presets.core.codes import Code
from lightning_presets.core.environment import (
    AUTOLOAD_OFF,
    AUTOLOAD_ON,
    SKIP_VARIABLE,
    skipped_rules,
    unknown_values,
)
from lightning_presets.core.findings import Finding


def _reported(code: str, title: str, fails: str, fixed: str) -> Code:
    """A warning about the package's own variables, reported by ``doctor`` (and ``check``): stage ``doctor``."""
    return Code(code=code, severity="warning", stage="doctor", title=title, fails=fails, fixed=fixed)


UNKNOWN_VALUE = _reported("LP017", "a package variable set to a value it does not take",
    "LIGHTNING_PRESETS_SKIP=LP3O5 lightning-presets doctor   # not a code: LP305 still runs",
    "LIGHTNING_PRESETS_SKIP=LP305 lightning-presets doctor")  # fmt: skip
"""Reported by ``doctor`` and ``check``, and warned once when the presets are registered."""

RULES_SKIPPED = _reported("LP018", "rules switched off by LIGHTNING_PRESETS_SKIP",
    "LIGHTNING_PRESETS_SKIP=all lightning-presets doctor   # check would show no finding of any rule",
    "lightning-presets doctor   # LIGHTNING_PRESETS_SKIP unset")  # fmt: skip
"""Reported by ``doctor`` and ``check`` (never at construction, where the skipped rules are meant to be quiet)."""


HANDSHAKE_VARIABLE = "LIGHTNING_PRESETS_HANDSHAKE"
"""``0`` (or another false value) switches the start-up handshake of fingerprints across ranks off; on by default."""
JOIN_TIMEOUT_VARIABLE = "LIGHTNING_PRESETS_JOIN_TIMEOUT"
"""Seconds between the join watchdog's reports of who is missing while the process group forms (``0``: no watchdog);
set explicitly below the process group's timeout, the waiting ranks end with the report after that many seconds."""
DIAGNOSE_VARIABLE = "LIGHTNING_PRESETS_DIAGNOSE"
"""``1`` (or another true value) records collectives and reports a collective that not every rank entered."""
COLLECTIVE_TIMEOUT_VARIABLE = "LIGHTNING_PRESETS_COLLECTIVE_TIMEOUT"
"""In diagnose mode: seconds a collective may wait for its peers once the first step is done."""
JOIN_TIMEOUT_DEFAULT = 300.0
COLLECTIVE_TIMEOUT_DEFAULT = 300.0
RUNTIME_VARIABLES = (HANDSHAKE_VARIABLE, JOIN_TIMEOUT_VARIABLE, DIAGNOSE_VARIABLE, COLLECTIVE_TIMEOUT_VARIABLE)
_SWITCH = f"one of {', '.join(AUTOLOAD_ON)} (on) or {', '.join(AUTOLOAD_OFF)} (off)"
_SECONDS = "a number of seconds (0 switches it off)"


def _switch(variable: str, default: bool, environ: Mapping[str, str] | None = None) -> tuple[bool, str | None]:
    """The switch's value, and the raw value when it is not one a switch takes (then ``default`` applies)."""
    raw = (os.environ if environ is None else environ).get(variable)
    value = (raw or "").strip().lower()
    if not value:
        return default, None
    if value in AUTOLOAD_ON:
        return True, None
    if value in AUTOLOAD_OFF:
        return False, None
    return default, raw


def _seconds(variable: str, default: float, environ: Mapping[str, str] | None = None) -> tuple[float, str | None]:
    """The number of seconds (``0``: off), and the raw value when it is not a number of seconds (then ``default``)."""
    raw = (os.environ if environ is None else environ).get(variable)
    if raw is None or not raw.strip():
        return default, None
    try:
        value = float(raw.strip())
    except ValueError:
        return default, raw
    if not math.isfinite(value) or value < 0:
        return default, raw
    return value, None


def handshake_enabled(environ: Mapping[str, str] | None = None) -> bool:
    return _switch(HANDSHAKE_VARIABLE, True, environ)[0]


def diagnose_enabled(environ: Mapping[str, str] | None = None) -> bool:
    return _switch(DIAGNOSE_VARIABLE, False, environ)[0]


def join_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds; ``0`` means no join watchdog."""
    return _seconds(JOIN_TIMEOUT_VARIABLE, JOIN_TIMEOUT_DEFAULT, environ)[0]


def collective_timeout(environ: Mapping[str, str] | None = None) -> float:
    """Seconds; ``0`` means no collective timeout of ours after the first step."""
    return _seconds(COLLECTIVE_TIMEOUT_VARIABLE, COLLECTIVE_TIMEOUT_DEFAULT, environ)[0]


def runtime_unknown_values(environ: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """``(variable, value, what it takes)`` for each runtime variable set to a value it does not take."""
    found = []
    for variable in (HANDSHAKE_VARIABLE, DIAGNOSE_VARIABLE):
        raw = _switch(variable, False, environ)[1]
        if raw is not None:
            found.append((variable, raw, _SWITCH))
    for variable in (JOIN_TIMEOUT_VARIABLE, COLLECTIVE_TIMEOUT_VARIABLE):
        raw = _seconds(variable, 0.0, environ)[1]
        if raw is not None:
            found.append((variable, raw, _SECONDS))
    return found


def variable_findings(environ: Mapping[str, str] | None = None) -> list[Finding]:
    """LP017 for each value a variable does not take; LP018 when rules are skipped (which ones)."""
    findings = [
        UNKNOWN_VALUE.finding(f"{variable}={value!r} is not a value it takes: it is ignored", f"use {accepted}")
        for variable, value, accepted in (*unknown_values(environ), *runtime_unknown_values(environ))
    ]
    skipped = skipped_rules(environ)
    if skipped:
        which = "every rule" if "ALL" in skipped else ", ".join(sorted(skipped))
        findings.append(
            RULES_SKIPPED.finding(
                f"{SKIP_VARIABLE} switches off {which}: what those rules would report is not checked",
                f"unset {SKIP_VARIABLE} (or remove a code from it) to check the job with every rule",
            )
        )
    return findings
