"""Failure signatures: known errors of distributed runs, with their cause and fix (``lightning-presets explain``,
and the notes added to an exception raised inside a preset's run).

Only :mod:`.notes` loads with the guard heads; the signatures and probes load on first use (an exception to explain,
``explain``), through the names below.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from lightning_presets.failures.notes import annotate, explained, explaining, explanation

if TYPE_CHECKING:
    from lightning_presets.failures.model import CATEGORIES, Match, Signature, matches
    from lightning_presets.failures.probes import PROBES, run_probe
    from lightning_presets.failures.signatures import SIGNATURES, UNKNOWN_EXCEPTION

_LAZY = {
    "CATEGORIES": "model", "Match": "model", "Signature": "model", "matches": "model",
    "PROBES": "probes", "run_probe": "probes",
    "SIGNATURES": "signatures", "UNKNOWN_EXCEPTION": "signatures",
}  # fmt: skip

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


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
