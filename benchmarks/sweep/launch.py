"""Start the processes of one configuration and collect what they wrote.

The ranks are forked by the tests' harness (``tests/harness.py``) from its fork server, which has imported torch,
Lightning and the presets once, and are started the way torchrun starts them (``LOCAL_RANK``, ``MASTER_PORT``):
Lightning then launches nothing itself. That saves the ~9 s each fresh interpreter spends importing on this machine;
``launch="lightning"`` runs the worker as a script instead and lets Lightning's own launcher re-run it for rank 1,
as ``python train.py`` would.
"""

from __future__ import annotations

import importlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "tests" / "scripts"
WORKER = SCRIPTS / "sweep_worker.py"

GRACE_SECONDS = 5.0
"""How long the other ranks may still run once one rank reported an error (they usually wait in a collective)."""


@dataclass
class Processes:
    """What the processes of one run wrote (``<role>.json``, ``<role>.pt``) and how they ended."""

    folder: Path
    results: dict[str, dict[str, Any]] = field(default_factory=dict)
    exit_codes: dict[str, int | None] = field(default_factory=dict)
    killed: set[str] = field(default_factory=set)
    """The processes this module killed (at the timeout, or after the grace period that follows an error)."""
    timed_out: bool = False
    seconds: float = 0.0

    def log_tail(self, role: str, lines: int = 20) -> str:
        path = self.folder / f"{role}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""


def worker() -> Any:
    """``tests/scripts/sweep_worker.py``, the job every process runs (imported from there, as the tests do)."""
    if str(SCRIPTS) not in sys.path:
        sys.path.insert(0, str(SCRIPTS))
    return importlib.import_module("sweep_worker")


def _harness() -> Any:
    """The tests' harness (``tests/harness.py``): the fork server every real run of the tests starts from."""
    tests = str(ROOT / "tests")
    if tests not in sys.path:
        sys.path.insert(0, tests)
    return importlib.import_module("harness")


def _read(folder: Path, role: str) -> dict[str, Any] | None:
    path = folder / f"{role}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _processes(job: Any, folder: Path, roles: list[str]) -> Processes:
    """What the harness's job says, in the sweep's terms (an exit code, or minus the signal that ended a process)."""
    out = Processes(folder=folder, seconds=job.seconds, timed_out=job.outcome == "hung")
    for role, rank in zip(roles, job.ranks, strict=True):
        out.exit_codes[role] = rank.exit_code if rank.signal is None else -rank.signal
        if rank.status in ("hung", "killed"):
            out.killed.add(role)
        result = _read(folder, role)
        if result is not None:
            out.results[role] = result
    return out


def run_ranks(config: dict[str, Any], world_size: int, folder: Path, timeout: float) -> Processes:
    """The ranks, forked by the harness the way torchrun starts them; once one rank fails, the others get
    ``GRACE_SECONDS``."""
    job = _harness().run_job("sweep_worker:harness_rank", config, str(folder), world_size=world_size, cwd=folder,
                             timeout=timeout, grace=GRACE_SECONDS, path=(str(SCRIPTS),))  # fmt: skip
    return _processes(job, folder, [f"rank{rank}" for rank in range(world_size)])


def run_reference(config: dict[str, Any], replicas: int, shuffled: bool, folder: Path, timeout: float) -> Processes:
    """The single-process reference, forked by the harness without launch variables."""
    job = _harness().run_job("sweep_worker:reference_main", config, replicas, shuffled, str(folder), world_size=1,
                             cwd=folder, timeout=timeout, path=(str(SCRIPTS),), launch_env=False)  # fmt: skip
    return _processes(job, folder, ["reference"])


def _wait(handles: dict[str, Any], folder: Path, timeout: float, poll: Any, kill: Any) -> Processes:
    """``run_script``'s wait: after an error in one process, give the others ``GRACE_SECONDS``; kill on timeout."""
    out = Processes(folder=folder)
    start = time.monotonic()
    deadline = start + timeout
    while True:
        codes = {role: poll(handle) for role, handle in handles.items()}
        if all(code is not None for code in codes.values()):
            break
        now = time.monotonic()
        failed = any((_read(folder, role) or {}).get("status") == "error" for role in handles)
        if failed:
            deadline = min(deadline, now + GRACE_SECONDS)
        if now >= deadline:
            out.timed_out = not failed
            for role, handle in handles.items():
                if codes[role] is None:
                    kill(handle)
                    out.killed.add(role)
            codes = {role: poll(handle) for role, handle in handles.items()}
            break
        time.sleep(0.05)
    out.seconds = time.monotonic() - start
    out.exit_codes = codes
    for role in handles:
        result = _read(folder, role)
        if result is not None:
            out.results[role] = result
    return out


def run_script(config: dict[str, Any], world_size: int, folder: Path, timeout: float) -> Processes:
    """``python sweep_worker.py``: rank 0 is a fresh interpreter, and Lightning's launcher starts the other ranks."""
    env = {key: value for key, value in os.environ.items() if key not in ("LOCAL_RANK", "RANK", "WORLD_SIZE")}
    env["MASTER_PORT"] = str(_harness().free_port())
    process = subprocess.Popen(
        [sys.executable, str(WORKER), "--config", json.dumps(config), "--out", str(folder)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip

    def poll(_: Any) -> int | None:
        code = process.poll()
        if code is None:
            return None
        # rank 0 is done; the ranks it launched share its session and finish with it
        return code

    def kill(_: Any) -> None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(5)

    out = _wait({"rank0": process}, folder, timeout, poll, kill)
    for rank in range(1, world_size):
        result = _read(folder, f"rank{rank}")
        if result is not None:
            out.results[f"rank{rank}"] = result
    return out


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="guard-sweep-"))
