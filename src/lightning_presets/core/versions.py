"""The versions lightning-presets supports and was tested with: one source for every ``tested_with`` record, the
``doctor``'s supported range and the README.

The Lightning range is the ``lightning`` requirement in ``pyproject.toml`` (a test checks they agree). CI runs the
whole suite on :data:`LIGHTNING` and a subset on each other version in :data:`LIGHTNING_TESTED` (``.ci/run``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

SUPPORTED_LIGHTNING = ">=2.5,<2.7"
"""The Lightning releases the guards may hook into (private API: ``_configure_launcher``, the connectors)."""
LIGHTNING = "2.6.6"
"""The Lightning release the whole suite runs on."""
LIGHTNING_TESTED = ("2.5.6", "2.6.6")
"""Every Lightning release CI runs on, one per supported minor."""
TORCH = "2.13.0"
"""The torch release the whole suite runs on."""
SUPPORTED_TORCH = ">=2.7"
"""FSDP2 (``fsdp2``, ``fsdp2_offload_ckpt``, ``tp2d_hybrid``) runs on CPU from torch 2.7 (2.4-2.6 need CUDA streams)."""
TORCH_TESTED = ("2.7.0", TORCH, "2.15.0")
"""The ends of the range (the oldest declared, the newest on PyPI, on CPU) and :data:`TORCH`; CI runs the runtime and
construction tests of every family on each, with the optional packages that import there."""


def tested(evidence: str, **packages: str) -> Mapping[str, str]:
    """A ``tested_with`` record: the Lightning and torch versions, other packages, and the evidence reached.

    ``packages`` may also set ``torch`` where a preset's tests ran on fewer releases (its package does not import on
    the others, or it needs its own torch).
    """
    return MappingProxyType(
        {"lightning": ", ".join(LIGHTNING_TESTED), "torch": ", ".join(TORCH_TESTED), **packages, "evidence": evidence}
    )


def recorded(tested_with: Mapping[str, str], package: str) -> tuple[str, ...]:
    """The versions of ``package`` a ``tested_with`` record lists (``"2.5.6, 2.6.6"`` gives both)."""
    return tuple(version.strip() for version in tested_with.get(package, "").split(",") if version.strip())
