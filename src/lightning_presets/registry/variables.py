"""The package's own environment variables, reported: a value one of them does not take, and the rules
``LIGHTNING_PRESETS_SKIP`` switches off (``check`` and ``doctor`` list them, so that a job with every rule skipped is
never shown as simply VALID)."""

from __future__ import annotations

from collections.abc import Mapping

from lightning_presets.core.codes import Code
from lightning_presets.core.environment import SKIP_VARIABLE, skipped_rules, unknown_values
from lightning_presets.core.findings import Finding

UNKNOWN_VALUE = Code(
    code="LP017", severity="warning", stage="doctor", title="a package variable set to a value it does not take",
    fails="LIGHTNING_PRESETS_SKIP=LP3O5 lightning-presets doctor   # not a code: LP305 still runs",
    fixed="LIGHTNING_PRESETS_SKIP=LP305 lightning-presets doctor",
)  # fmt: skip
"""Reported by ``doctor`` and ``check``, and warned once when the presets are registered."""

RULES_SKIPPED = Code(
    code="LP018", severity="warning", stage="doctor", title="rules switched off by LIGHTNING_PRESETS_SKIP",
    fails="LIGHTNING_PRESETS_SKIP=all lightning-presets doctor   # check would show no finding of any rule",
    fixed="lightning-presets doctor   # LIGHTNING_PRESETS_SKIP unset",
)  # fmt: skip
"""Reported by ``doctor`` and ``check`` (never at construction, where the skipped rules are meant to be quiet)."""


def variable_findings(environ: Mapping[str, str] | None = None) -> list[Finding]:
    """LP017 for each value a variable does not take; LP018 when rules are skipped (which ones)."""
    findings = [
        UNKNOWN_VALUE.finding(f"{variable}={value!r} is not a value it takes: it is ignored", f"use {accepted}")
        for variable, value, accepted in unknown_values(environ)
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
