"""Trust: which distributions' entry points may load (``LIGHTNING_PRESETS_ALLOW`` / ``LIGHTNING_PRESETS_DENY``), and
the finding for a preset they leave out (LP015)."""

from __future__ import annotations

import os
from typing import Literal, Protocol

from lightning_presets.core.environment import (
    ALLOW_VARIABLE,
    DENY_VARIABLE,
    distribution_names,
    normalize_distribution,
)
from lightning_presets.core.findings import Finding
from lightning_presets.registry import codes
from lightning_presets.registry.entry_points import OWN_DISTRIBUTION


class Provenance(Protocol):
    """Where a catalog entry comes from (a :class:`~lightning_presets.registry.catalog.Entry`)."""

    @property
    def name(self) -> str: ...
    @property
    def distribution(self) -> str: ...
    @property
    def version(self) -> str: ...


def trust_status(distribution: str) -> Literal["ok", "denied"]:
    """``denied`` when ``LIGHTNING_PRESETS_DENY`` names it or an ``ALLOW`` list leaves it out, else ``ok``."""
    name = normalize_distribution(distribution)
    if name in distribution_names(DENY_VARIABLE):
        return "denied"
    allow = distribution_names(ALLOW_VARIABLE)
    if allow and name not in allow and name != OWN_DISTRIBUTION:
        return "denied"
    return "ok"


def trust_key() -> tuple[str, str]:
    """The trust variables' values, as a cache key: what a loaded catalog depends on."""
    return os.environ.get(ALLOW_VARIABLE, ""), os.environ.get(DENY_VARIABLE, "")


def denied(entry: Provenance, noun: str) -> Finding:
    """LP015: the preset exists, but the trust variables leave its distribution out."""
    name = normalize_distribution(entry.distribution)
    deny = os.environ.get(DENY_VARIABLE, "")
    if name in distribution_names(DENY_VARIABLE):
        why, fix = f"denied by {DENY_VARIABLE}={deny}", f"remove {name} from {DENY_VARIABLE}"
    else:
        allow = os.environ.get(ALLOW_VARIABLE, "")
        why, fix = f"left out by {ALLOW_VARIABLE}={allow}", f"add {name} to {ALLOW_VARIABLE}"
    return codes.DENIED_PRESET.finding(
        f"{noun} preset {entry.name!r} from {entry.distribution} {entry.version} is {why}, so it is not loaded "
        "in this process",
        f"{fix} (in every process of the job: workers read it too), or pick another preset",
    )
