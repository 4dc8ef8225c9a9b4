"""The versions lightning-presets supports and was tested with: one source for every ``tested_with`` record, the
``doctor``'s supported range and the README.

The Lightning range is the ``lightning`` requirement in ``pyproject.toml`` (a test checks they agree). CI runs the
whole suite on each version in :data:`LIGHTNING_TESTED` (``.ci/run``).
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


def tested(
    evidence: str,
    *,
    construction: str,
    runtime_cpu: str = "",
    runtime_gpu: str = "",
    **packages: str,
) -> Mapping[str, str]:
    """A ``tested_with`` record: the Lightning and torch versions, other packages, the evidence reached, and one
    claim per evidence level (an empty claim means not run). The record names no test file: the test suite maps each
    claim to the test that makes it, the README's "What has been run" table is generated from both, and a test
    checks that every claim has its test, that the test exists and that runtime tests run real processes.

    ``packages`` may also set ``torch`` where a preset's tests ran on fewer releases (its package does not import on
    the others, or it needs its own torch).
    """
    claims = {"construction": construction, "runtime_cpu": runtime_cpu, "runtime_gpu": runtime_gpu}
    return MappingProxyType(
        {
            "lightning": ", ".join(LIGHTNING_TESTED),
            "torch": ", ".join(TORCH_TESTED),
            **packages,
            "evidence": evidence,
            **claims,
        }
    )


CLAIMS = (
    ("construction", "construction on simulated hardware"),
    ("runtime_cpu", "runtime on CPU"),
    ("runtime_gpu", "runtime on GPU"),
)
"""The claim keys of a ``tested_with`` record, and how the README names them."""


def recorded(tested_with: Mapping[str, str], package: str) -> tuple[str, ...]:
    """The versions of ``package`` a ``tested_with`` record lists (``"2.5.6, 2.6.6"`` gives both)."""
    return tuple(version.strip() for version in tested_with.get(package, "").split(",") if version.strip())
