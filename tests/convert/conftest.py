"""The evidence plugin (``tests/evidence/proving.py``: the ``proof`` fixture and the check that a test marked
``proves`` observed a failure for every code it names) for the proofs of ``lightning-presets convert``'s refusals."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "evidence"))

from proving import process_group, proof, pytest_runtest_call  # noqa: F401  (this folder's plugin)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "proves(*codes): an evidence test; it must observe a failure for each code (tests/evidence/)"
    )
