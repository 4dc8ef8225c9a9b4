"""Failure signatures: known errors of distributed runs, with their cause and fix (``lightning-presets explain``,
and the notes added to an exception raised inside a preset's run)."""

from __future__ import annotations

from lightning_presets.guards.failures.model import CATEGORIES, Match, Signature, matches
from lightning_presets.guards.failures.notes import annotate, explained, explaining, explanation
from lightning_presets.guards.failures.probes import PROBES, run_probe
from lightning_presets.guards.failures.signatures import SIGNATURES, UNKNOWN_EXCEPTION

__all__ = [
    "CATEGORIES",
    "PROBES",
    "SIGNATURES",
    "UNKNOWN_EXCEPTION",
    "Match",
    "Signature",
    "annotate",
    "explained",
    "explaining",
    "explanation",
    "matches",
    "run_probe",
]
