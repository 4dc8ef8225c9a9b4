"""The versions the built-in presets were tested with: one source for every ``tested_with`` record."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

LIGHTNING = "2.6.6"
TORCH = "2.13.0"


def tested(evidence: str, **packages: str) -> Mapping[str, str]:
    """A ``tested_with`` record: the Lightning and torch versions, other packages, and the evidence reached."""
    return MappingProxyType({"lightning": LIGHTNING, "torch": TORCH, **packages, "evidence": evidence})
