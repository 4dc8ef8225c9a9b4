"""Shared fixtures: simulated CUDA, a fresh catalog, a broken entry point, a recording FSDP, and fresh interpreters."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any
from unittest import mock

import pytest

# The repository's generators (docs/errors.md, the README's evidence table) live outside the package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import lightning_presets  # noqa: F401  (registers explicitly when autoload is off)
from lightning_presets.registry import catalog as _catalog
from lightning_presets.tools.simulation import SimulatedGPU, simulated_cuda


@pytest.fixture
def cuda8() -> Iterator[SimulatedGPU]:
    """Lightning sees 8 CUDA devices of compute capability 9.0; CUDA itself is never touched."""
    with simulated_cuda(8) as gpu:
        yield gpu


@pytest.fixture
def forbid_cuda_init(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """torch's CUDA initialisation raises and is recorded while the test runs, so that "no CUDA context was created"
    can fail even on a CPU build of torch (where ``torch.cuda.is_initialized()`` is always ``False``).

    Yields the stacks of the attempts; a test asserts it is empty (a swallowed attempt is still recorded).
    """
    import traceback

    import torch

    attempts: list[str] = []

    def forbidden(*args: Any, **kwargs: Any) -> None:
        attempts.append("".join(traceback.format_stack(limit=8)))
        raise RuntimeError("this test forbids initialising CUDA")

    monkeypatch.setattr(torch.cuda, "_lazy_init", forbidden)
    return attempts


@pytest.fixture
def fresh_catalog() -> Iterator[None]:
    """Entry points and trust variables are read again by the next catalog use, and after the test."""
    _catalog.clear_cache()
    yield
    _catalog.clear_cache()


@pytest.fixture
def install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """``install(*dists, named=True)`` makes hand-made distributions discoverable for this test only (written into
    a directory on ``sys.path``); their modules are forgotten afterwards."""
    from _dists import write_installed

    monkeypatch.syspath_prepend(str(tmp_path))
    for variable in ("LIGHTNING_PRESETS_ALLOW", "LIGHTNING_PRESETS_DENY"):
        monkeypatch.delenv(variable, raising=False)
    packages: list[str] = []

    def install(*dists: Any, named: bool = True) -> None:
        for dist in dists:
            write_installed(dist, tmp_path, named=named)
            packages.append(dist.package)

    yield install
    for package in packages:
        sys.modules.pop(package, None)


@pytest.fixture
def broken_entry(monkeypatch: pytest.MonkeyPatch, fresh_catalog: None) -> None:
    """One more entry point in the strategy group, whose module does not exist."""
    original = _catalog._entry_points

    def with_broken(group: str) -> Iterator[metadata.EntryPoint]:
        yield from original(group)
        if group == _catalog.STRATEGY_GROUP:
            yield metadata.EntryPoint("acme_broken", "acme_missing_module:PRESET", group)

    monkeypatch.setattr(_catalog, "_entry_points", with_broken)


@pytest.fixture
def recording_fsdp() -> Iterator[list[dict[str, Any]]]:
    """torch's ``FullyShardedDataParallel`` replaced by ``helpers.RecordingFSDP``; yields the recorded wrap calls."""
    from helpers import RecordingFSDP  # here, not at the top: conftest stays free of torch

    RecordingFSDP.calls = []
    with mock.patch("torch.distributed.fsdp.FullyShardedDataParallel", RecordingFSDP):
        yield RecordingFSDP.calls
