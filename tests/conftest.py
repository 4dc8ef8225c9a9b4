"""Shared fixtures: simulated CUDA, a fresh catalog, a broken entry point, a recording FSDP, and fresh interpreters."""

from __future__ import annotations

import os
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

# pytest-xdist's workers start with COLUMNS=80 and LINES=24 of their own; the CLI's plain output (and the golden
# files) follow COLUMNS, so each worker gets the terminal size variables the controlling process had.
_SIZES = ("COLUMNS", "LINES")
if "PYTEST_XDIST_WORKER" in os.environ:
    for _name in _SIZES:
        _value = os.environ.get(f"_LIGHTNING_PRESETS_TEST_{_name}")
        if _value is None:
            os.environ.pop(_name, None)
        else:
            os.environ[_name] = _value
else:
    for _name in _SIZES:
        if _name in os.environ:
            os.environ[f"_LIGHTNING_PRESETS_TEST_{_name}"] = os.environ[_name]


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
def quick_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    """The matrix command without its two thousand checks (for tests of where and how it writes)."""
    from lightning_presets.cli import _matrix as matrix_cli

    monkeypatch.setattr(matrix_cli, "compute", lambda modes, progress=None: ([], 0.0))


@pytest.fixture
def recording_fsdp() -> Iterator[list[dict[str, Any]]]:
    """torch's ``FullyShardedDataParallel`` replaced by ``helpers.RecordingFSDP``; yields the recorded wrap calls."""
    from helpers import RecordingFSDP  # here, not at the top: conftest stays free of torch

    RecordingFSDP.calls = []
    with mock.patch("torch.distributed.fsdp.FullyShardedDataParallel", RecordingFSDP):
        yield RecordingFSDP.calls


# --- the suite's own budget: a slow addition fails the developer's run, not CI's 90-minute limit ----------------

SUITE_BUDGET_SECONDS = 720
"""The whole suite's pytest session, at most, on the reference machine: 1.5 × its measured time on a fresh clone of
this project's 2-core machine (470 s on 2026-12-02, README "How long CI takes"). Over it, times this machine's
slowness against that one (``tests/calibration.py``, measured when the session starts; never below 1), the session
fails with the figures: a healthy slower or busier machine passes, a test that runs far longer than its share
does not."""
MIN_TESTS, MIN_PROVES = 1688, 73
"""Floors of the whole suite: no test and no executed proof is dropped to make it faster (what the suite collected
before its runs moved to the harness, at commit e6ba095: 1,688 tests, 73 of them marked ``proves``)."""
_STARTED = pytest.StashKey[float]()


def _whole_suite(config: pytest.Config) -> bool:
    """The README's test command: every test under ``tests/``, none selected away."""
    tests = (Path(__file__).resolve().parent).as_posix()
    args = [Path(arg.split("::")[0]).resolve().as_posix() for arg in config.args]
    return (
        args in ([], [tests], [Path(config.rootpath).resolve().as_posix()])
        and not config.option.keyword
        and not config.option.markexpr
        and not config.getoption("deselect", None)
        and not config.getoption("lf", False)
        and not config.getoption("exitfirst", False)
    )


SPEED_VARIABLE = "LIGHTNING_PRESETS_SUITE_SPEED"
"""A number: the machine's slowness against the reference machine, instead of calibrating it (``tests/test_ci.py``)."""
_SCALE = pytest.StashKey[tuple[float, str]]()


def _judged(config: pytest.Config) -> bool:
    """Whether this session's time is judged against the budget (the whole suite, or a forced budget)."""
    return not hasattr(config, "workerinput") and (_whole_suite(config) or bool(os.environ.get(BUDGET_VARIABLE)))


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist starts its workers: the calibration runs on a quiet session
def pytest_sessionstart(session: pytest.Session) -> None:
    import time

    session.stash[_STARTED] = time.monotonic()
    if not _judged(session.config):
        return
    forced = os.environ.get(SPEED_VARIABLE)
    if forced:
        session.stash[_SCALE] = (max(1.0, float(forced)), f"{SPEED_VARIABLE}={forced}")
        return
    from calibration import REFERENCE_SECONDS, calibrate, scale

    workers = session.config.getoption("numprocesses", None) or 1
    measured = calibrate(int(workers) if str(workers).isdigit() else 1)
    session.stash[_SCALE] = (
        scale(measured),
        f"a calibration workload took {measured:.2f} s here ({workers} side by side), {REFERENCE_SECONDS:.2f} s on "
        "the reference machine",
    )


def pytest_collection_finish(session: pytest.Session) -> None:
    if not _whole_suite(session.config):
        return
    proves = sum(1 for item in session.items if item.get_closest_marker("proves") is not None)
    if len(session.items) < MIN_TESTS or proves < MIN_PROVES:
        raise pytest.UsageError(
            f"the whole suite collected {len(session.items)} tests, {proves} of them marked proves; the floors are "
            f"{MIN_TESTS} and {MIN_PROVES} (tests/conftest.py): a test or a proof was lost"
        )


BUDGET_VARIABLE = "LIGHTNING_PRESETS_SUITE_BUDGET"
"""Seconds: the budget for any session, not only the whole suite's (``tests/test_ci.py`` checks the check)."""


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    import time

    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: the controlling process judges the session
        return
    started = session.stash.get(_STARTED, None)
    forced = os.environ.get(BUDGET_VARIABLE)
    whole = _whole_suite(session.config) and session.testscollected >= MIN_TESTS
    if started is None or not (whole or forced):
        return
    base = float(forced) if forced else SUITE_BUDGET_SECONDS
    factor, why = session.stash.get(_SCALE, (1.0, "not calibrated"))
    budget = base * factor
    elapsed = time.monotonic() - started
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [
        f"the session took {elapsed:.0f} s; its budget is {budget:.0f} s: {base:.0f} s (tests/conftest.py "
        f"SUITE_BUDGET_SECONDS) x {factor:.2f}, this machine's slowness now ({why})"
    ]
    if elapsed > budget:
        lines.append("over budget: make the new tests share their runs (tests/harness.py), or say why they cannot")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    for line in lines:
        if reporter is not None:
            reporter.write_line(line)
