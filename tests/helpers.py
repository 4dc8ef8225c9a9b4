"""Constants and helpers shared by several test files (fixtures live in conftest.py).

Import them the way the tests import ``models``: ``from helpers import QUIET, NAMESPACES``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest
from torch import nn

from lightning_presets import PresetConfigError
from lightning_presets.core.context import Context

SCRIPTS = Path(__file__).resolve().parent / "scripts"

# Trainer kwargs that silence the logger, progress bar, model summary and checkpointing.
QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}

# (target, constructor module, constructor name) of the four namespaces.
NAMESPACES = [
    ("trainer", "lightning.pytorch", "Trainer"),
    ("fabric", "lightning.fabric", "Fabric"),
    ("pytorch_lightning", "pytorch_lightning", "Trainer"),
    ("lightning_fabric", "lightning_fabric", "Fabric"),
]
NAMESPACE_IDS = [namespace[0] for namespace in NAMESPACES]


def context(
    preset: str,
    options: dict[str, Any],
    *,
    accelerator: str = "cuda",
    devices_per_node: int = 8,
    num_nodes: int = 1,
    precision: str = "bf16-mixed",
    precision_plugin: str | None = "MixedPrecision",
    **more: Any,
) -> Context:
    """The rule context of a Trainer job with the preset ``preset`` and its ``options``: 8 CUDA devices on one node in
    bf16 and Lightning's own cluster environment unless told otherwise (``more``: any other field of
    :class:`Context`). Change one field of it with ``dataclasses.replace``."""
    return Context(
        preset=preset,
        target="trainer",
        kind="trainer",
        accelerator=accelerator,
        devices_per_node=devices_per_node,
        num_nodes=num_nodes,
        precision=precision,
        precision_plugin=precision_plugin,
        cluster_environment="LightningEnvironment",
        options=options,
        **more,
    )


def codes(excinfo: pytest.ExceptionInfo[PresetConfigError]) -> tuple[str, ...]:
    return excinfo.value.codes


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the ``lightning-presets`` CLI in this process; its exit code and captured stdout."""
    from lightning_presets.cli import main

    code = main(list(argv))
    return code, capsys.readouterr().out


# --- FSDP1 without CUDA: torch's FullyShardedDataParallel replaced by a recorder (fixture ``recording_fsdp``)


class RecordingFSDP(nn.Module):
    """Stands in for torch's FullyShardedDataParallel: records the wrap arguments, returns the module."""

    calls: ClassVar[list[dict[str, Any]]] = []

    def __new__(cls, module: nn.Module | None = None, **kwargs: Any) -> Any:
        if module is None:  # a "manually wrapped" marker instance
            return super().__new__(cls)
        cls.calls.append(kwargs)
        return module


def setup_model(strategy: Any, model: nn.Module) -> nn.Module:
    """The hook each side overrides: ``_setup_model`` (Trainer) or ``setup_module`` (Fabric)."""
    if hasattr(strategy, "_setup_model"):
        return strategy._setup_model(model)  # type: ignore[no-any-return]
    return strategy.setup_module(model)  # type: ignore[no-any-return]


def wrapped_modules(policy: Any, model: nn.Module) -> set[nn.Module]:
    """The modules an FSDP wrap policy selects in ``model`` (what FSDP and checkpointing would wrap)."""
    return set(policy._run_policy(model, set(), {}))


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


class Started:
    """A command started in the background (``start_python``); ``result()`` waits for it."""

    def __init__(
        self, command: list[str], *, env: dict[str, str], timeout: float, cwd: str | Path | None = None,
        input: str | None = None, stdout: int | None = None,
    ) -> None:  # fmt: skip
        """``input``, when given, is written into a pipe that is the command's stdin (closed after it); ``stdout``, a
        file descriptor the command writes its stdout to instead of a pipe read here (``result().stdout`` is then
        ``None``)."""
        self.command, self.timeout = command, timeout
        self.started = time.monotonic()
        stdin: int | None = None
        if input is not None:  # small: it fits in the pipe's buffer, so the write never waits for the reader
            stdin, writer = os.pipe()
            with os.fdopen(writer, "w") as feed:
                feed.write(input)
        self.process = subprocess.Popen(
            command, stdin=stdin, stdout=subprocess.PIPE if stdout is None else stdout, stderr=subprocess.PIPE,
            text=True, env=env, cwd=cwd,
            start_new_session=True,
        )  # fmt: skip
        if stdin is not None:
            os.close(stdin)
        self._result: subprocess.CompletedProcess[str] | None = None
        self.seconds: float | None = None
        """From the start to the end of the command, once ``result()`` returned."""

    def result(self) -> subprocess.CompletedProcess[str]:
        """What ``subprocess.run(..., capture_output=True, text=True, timeout=timeout)`` returns (the timeout counts
        from the start); raises ``subprocess.TimeoutExpired`` as it does, after killing the command's group."""
        if self._result is None:
            left = max(0.1, self.timeout - (time.monotonic() - self.started))
            try:
                stdout, stderr = self.process.communicate(timeout=left)
            except subprocess.TimeoutExpired:
                self.kill()
                raise
            self.seconds = time.monotonic() - self.started
            self._result = subprocess.CompletedProcess(self.command, self.process.returncode, stdout, stderr)
        return self._result

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.communicate()


def start_python(code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120) -> Started:
    """``run_python`` started in the background: several fresh interpreters that cannot share one (each needs its
    own import-time environment or flags) then start side by side, and each test reads its own ``result()``."""
    full_env = {**os.environ, "PYTHONWARNINGS": "default", **(env or {})}
    return Started([sys.executable, *args, "-c", textwrap.dedent(code)], env=full_env, timeout=timeout)


def run_forked(
    code: str, *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``run_python``'s result for ``python -c code``, forked from the harness's server (torch, Lightning and the
    presets already imported) instead of a fresh interpreter; stdout and stderr are merged into ``stdout`` (and
    ``stderr`` is empty). Only for claims that do not depend on the interpreter's start or on what is imported
    before the code runs; ``env`` may not change an import-time variable (``harness.run_command`` refuses it)."""
    from harness import run_command

    job = run_command([sys.executable, "-c", textwrap.dedent(code)], env={"PYTHONWARNINGS": "default", **(env or {})},
                      timeout=timeout)  # fmt: skip
    assert job.outcome in ("trained", "raised", "died"), job.describe()
    return subprocess.CompletedProcess([sys.executable, "-c", code], job.returncode, job.stdout, "")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``lightning-presets *argv`` in this process: (exit code, stdout, stderr); never a traceback."""
    from lightning_presets.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err


REFERENCE_CHECK = ("check", "--strategy", "ddp", "--accelerator", "cpu", "--devices", "2")
"""A small valid check (a DDP job of 2 CPU processes): the cost a refusal or a fuzzed command is compared with."""


def cli_cpu_seconds(*argv: str) -> tuple[int, float]:
    """(exit code, CPU seconds of this process) of ``lightning-presets *argv`` run in this process, its output
    discarded. CPU time: another process on the machine adds nothing to it."""
    import gc
    import io

    from lightning_presets.cli import main

    collecting = gc.isenabled()
    gc.disable()  # a collection of the whole process's objects is not the command's cost
    start = time.process_time()
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            try:
                code = main(list(argv))
            except SystemExit as exit_:
                code = int(exit_.code or 0) if not isinstance(exit_.code, str) else 2
        return code, time.process_time() - start
    finally:
        if collecting:
            gc.enable()


def cheaper_than_a_check(*argv: str, plus: Callable[[], object] | None = None) -> tuple[bool, str]:
    """Whether ``lightning-presets *argv`` costs less CPU than :data:`REFERENCE_CHECK` (the least of 3 runs of each),
    and the figures: a refusal comes before the work a check does. ``plus``: work the refusal may do besides (e.g.
    a bounded read), measured alike and allowed twice."""
    reference = reference_check_seconds()
    extra = min(_cpu_seconds(plus) for _ in range(3)) if plus is not None else 0.0
    cost = min(cli_cpu_seconds(*argv)[1] for _ in range(3))
    shown = f"{argv}: {cost * 1000:.1f} ms of CPU, a small check {reference * 1000:.1f} ms, plus {extra * 1000:.1f} ms"
    return cost < reference + 2 * extra, shown


def _cpu_seconds(call: Callable[[], object]) -> float:
    start = time.process_time()
    call()
    return time.process_time() - start


_reference: list[float] = []


def reference_check_seconds() -> float:
    """CPU seconds of :data:`REFERENCE_CHECK` in this process, once per process: the least of three runs after one
    that imports what a check imports. A test of a cost compares with it (a ratio, measured in the same run on the
    same machine), never with an absolute number of seconds."""
    if not _reference:
        code, _ = cli_cpu_seconds(*REFERENCE_CHECK)
        assert code == 0, f"the reference check {REFERENCE_CHECK} exited {code}"
        _reference.append(min(cli_cpu_seconds(*REFERENCE_CHECK)[1] for _ in range(3)))
    return _reference[0]


class Fresh:
    """Fresh interpreters a module's tests read, started side by side: ``Fresh(request, {key: (start, tests)})``
    starts at once every ``start()`` whose ``tests`` (names, ``name[id]`` for one parameter) the session selected;
    ``fresh[key]`` is its ``Started`` (started then, if it was not yet). ``close()`` kills what is still running."""

    def __init__(self, request: pytest.FixtureRequest, runs: dict[str, tuple[Callable[[], Started], tuple[str, ...]]]):
        self.starters = {key: start for key, (start, _) in runs.items()}
        self.started: dict[str, Started] = {}
        self.failed: dict[str, BaseException] = {}
        """What a ``start()`` started together raised (a skip too): raised again by the test that reads it."""
        selected = {item.name for item in request.session.items if item.path == request.path}
        selected |= {name.partition("[")[0] for name in selected}
        for key, (_, tests) in runs.items():
            if selected & set(tests):
                try:
                    self[key]
                except (Exception, pytest.skip.Exception) as error:  # a skip too: it belongs to that test
                    self.failed[key] = error

    def __getitem__(self, key: str) -> Started:
        if key in self.failed:
            raise self.failed[key]
        if key not in self.started:
            self.started[key] = self.starters[key]()
        return self.started[key]

    def close(self) -> None:
        for run in self.started.values():
            run.kill()
