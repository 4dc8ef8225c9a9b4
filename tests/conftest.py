"""Shared fixtures: simulated CUDA, a fresh catalog, and fresh interpreters."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

import lightning_presets  # noqa: F401  (registers explicitly when autoload is off)
from lightning_presets import _catalog
from lightning_presets._simulation import SimulatedGPU, simulated_cuda


@pytest.fixture
def cuda8() -> Iterator[SimulatedGPU]:
    """Lightning sees 8 CUDA devices of compute capability 9.0; CUDA itself is never touched."""
    with simulated_cuda(8) as gpu:
        yield gpu


@pytest.fixture
def fresh_catalog() -> Iterator[None]:
    """Entry points and trust variables are read again by the next catalog use, and after the test."""
    _catalog.clear_cache()
    yield
    _catalog.clear_cache()


def run_python(
    code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this environment and capture its output."""
    full_env = {**os.environ, "PYTHONWARNINGS": "default", **(env or {})}
    return subprocess.run(
        [sys.executable, *args, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )
