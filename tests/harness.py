"""Real distributed runs for the tests, in a fraction of a second of overhead each.

``run_job(target, *args)`` starts the ranks of one job the way torchrun starts them (``RANK``, ``LOCAL_RANK``,
``WORLD_SIZE``, ``MASTER_ADDR``/``MASTER_PORT``: Lightning then launches nothing itself), forked from a server that
imported torch, Lightning and the presets once (``harness_server.py``), instead of two fresh interpreters that
import them again for a job that trains for well under a second. Each job has its own timeout, its own scratch
folder (``cwd``, unless given), its own ``MASTER_PORT`` and the environment of the calling test (``os.environ``
then ``env``), and the caller's environment is never changed. The result tells apart a job that trained, one in
which a rank raised (with each rank's exception), one that hung (killed at its timeout) and one whose rank died
(exit code or signal, no exception).

A job that hangs or kills its ranks costs only that job; a server that dies is replaced at the next job.

``launcher="fresh"`` runs the same target the way a user starts it instead, ``python script.py args``, and lets
Lightning's own launcher start the other ranks (or whatever the script does): for tests of import-time behaviour,
the start-up hook, and one run per family through Lightning's real launcher.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
SERVER = HERE / "harness_server.py"
SCRIPTS_PATH = str(HERE / "scripts")
"""``tests/scripts``, for ``path=`` (where the jobs of ``module:function`` targets live)."""
GRACE_SECONDS = 10.0
"""How long the other ranks may still run once one rank has raised or died (they usually wait in a collective)."""
START_SECONDS = 300.0
"""How long the server may take to import everything (about 10 s on a quiet 2-core machine)."""
REPLY_MARGIN_SECONDS = 60.0
"""How much longer than a job's timeout the client waits for the server's answer before replacing the server."""
IMPORT_TIME_VARIABLES = ("LIGHTNING_PRESETS_AUTOLOAD", "LIGHTNING_PRESETS_ALLOW", "LIGHTNING_PRESETS_DENY",
                         "PYTHONPATH", "OMP_NUM_THREADS")  # fmt: skip
"""Read when torch, Lightning or the presets are imported (or when the interpreter starts): a job that sets one to
another value than the server's needs a fresh interpreter, and ``run_job`` says so instead of running it wrong."""
LAUNCH_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK", "GLOBAL_RANK",
                    "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID")  # fmt: skip
"""The caller's launch variables, never passed on: each job gets its own."""
SESSION_ENVIRONMENT = dict(os.environ)
"""The environment when the harness was first imported (at collection, before any test changed it): the server's,
whichever test happens to start it."""
SERVER_ENVIRONMENT = {"OMP_NUM_THREADS": "1"}
"""The server's (and so every job's) defaults: one OpenMP thread per rank, as the tests' launches always set."""


@dataclass
class Rank:
    rank: int
    status: str
    """``trained`` (exit 0), ``raised`` (an exception escaped the target), ``hung`` (killed at the timeout with no
    rank in error), ``killed`` (killed after another rank failed), ``died`` (non-zero exit or a signal, no
    exception)."""
    exit_code: int | None
    signal: int | None
    output: str
    error: dict[str, Any] | None = None
    ended_after: float | None = None
    """Seconds from the job's start to this rank's end."""
    """``type``, ``module``, ``message`` and ``traceback`` of the exception the rank raised."""


@dataclass
class Job:
    outcome: str
    """``trained`` when every rank trained; else the status of the rank that failed first (``raised`` or ``died``),
    or ``hung``."""
    ranks: list[Rank]
    folder: Path
    seconds: float
    launcher: str
    notes: list[str] = field(default_factory=list)

    @property
    def stdout(self) -> str:
        """Every rank's output, rank 0 first (what the ranks would have written into one shared pipe)."""
        return "".join(rank.output for rank in self.ranks)

    @property
    def returncode(self) -> int:
        """0 when every rank trained, else the first non-zero exit code (or 1)."""
        for rank in self.ranks:
            if rank.status != "trained":
                return rank.exit_code or 1
        return 0

    @property
    def first_failure(self) -> Rank | None:
        """The rank that raised or died first (its peers usually fail or wait because of it)."""
        return _first_failure(self.ranks)

    def reports(self, prefix: str = "RESULT ") -> list[Any]:
        """The JSON value after each ``prefix`` in the ranks' output, in rank order."""
        decoder = json.JSONDecoder()
        found = []
        for rank in self.ranks:
            start = rank.output.find(prefix)
            while start != -1:
                found.append(decoder.raw_decode(rank.output, start + len(prefix))[0])
                start = rank.output.find(prefix, start + len(prefix))
        return found

    def errors(self) -> dict[int, dict[str, Any]]:
        return {rank.rank: rank.error for rank in self.ranks if rank.error is not None}

    def describe(self, tail: int = 3000) -> str:
        """For assertion messages: the outcome, each rank's status and the end of its output."""
        lines = [f"job {self.outcome} in {self.seconds:.1f} s ({self.launcher}, {self.folder})", *self.notes]
        for rank in self.ranks:
            lines.append(f"--- rank {rank.rank}: {rank.status} (exit {rank.exit_code}, signal {rank.signal})")
            lines.append(rank.output[-tail:])
        return "\n".join(lines)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class _Server:
    """The fork server process and its two pipes."""

    def __init__(self) -> None:
        read_fd, write_fd = os.pipe()
        env = {**SERVER_ENVIRONMENT, **{k: v for k, v in SESSION_ENVIRONMENT.items() if k not in LAUNCH_VARIABLES}}
        self.environment = env
        self.log = tempfile.NamedTemporaryFile(prefix="harness-server-", suffix=".log", delete=False)  # noqa: SIM115
        self.process = subprocess.Popen(
            [sys.executable, str(SERVER), "--reply-fd", str(write_fd)],
            stdin=subprocess.PIPE, stdout=self.log, stderr=subprocess.STDOUT, pass_fds=(write_fd,), env=env,
            cwd=HERE, text=True, start_new_session=True,
        )  # fmt: skip
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "r")
        hello = self._read(START_SECONDS)
        if hello is None or not hello.get("ready"):
            self.stop()
            raise RuntimeError(f"the harness's fork server did not start: {self.log_text()[-3000:]}")
        self.skipped: list[str] = hello.get("skipped", [])

    def log_text(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def _read(self, timeout: float) -> dict[str, Any] | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.replies], [], [], max(0.0, min(1.0, deadline - time.monotonic())))
            if ready:
                line = self.replies.readline()
                return json.loads(line) if line else None  # '' once the server is gone
            if self.process.poll() is not None:
                return None
        return None

    def alive(self) -> bool:
        return self.process.poll() is None

    def submit(self, job: dict[str, Any]) -> dict[str, Any] | None:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(job) + "\n")
            self.process.stdin.flush()
        except (BrokenPipeError, OSError):
            return None
        return self._read(float(job["timeout"]) + float(job["grace"]) + REPLY_MARGIN_SECONDS)

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        self.replies.close()
        self.log.close()
        if self.process.stdin is not None:
            self.process.stdin.close()


_server: _Server | None = None


def server() -> _Server:
    """The running fork server, started (or replaced) on demand."""
    global _server
    if _server is None or not _server.alive():
        if _server is not None:
            _server.stop()
        _server = _Server()
    return _server


@atexit.register
def _stop_server() -> None:
    if _server is not None:
        _server.stop()


def _decode(status: int) -> tuple[int | None, int | None]:
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.WEXITSTATUS(status), None


def _read_rank(folder: Path, rank: int) -> tuple[str, dict[str, Any] | None]:
    log = folder / f"rank{rank}.log"
    error = folder / f"rank{rank}.error.json"
    output = log.read_text(errors="replace") if log.exists() else ""
    return output, (json.loads(error.read_text()) if error.exists() else None)


def _status(exit_code: int | None, error: dict[str, Any] | None, killed: bool, any_failed: bool) -> str:
    if error is not None:
        return "raised"
    if killed:
        return "killed" if any_failed else "hung"
    return "trained" if exit_code == 0 else "died"


SIMULTANEOUS_SECONDS = 0.2
"""Ranks that ended this close together were reaped in the same few polls: their order is read otherwise."""


def _first_failure(ranks: list[Rank]) -> Rank | None:
    """The rank that failed first: of those that ended with the earliest, one that died (a signal does not come from
    a peer's exception), else the one whose exception was raised first."""
    failed = [rank for rank in ranks if rank.status in ("raised", "died")]
    if not failed:
        return None
    earliest = min(rank.ended_after or 0.0 for rank in failed)
    near = [rank for rank in failed if (rank.ended_after or 0.0) <= earliest + SIMULTANEOUS_SECONDS]
    died = [rank for rank in near if rank.status == "died"]
    if died:
        return died[0]
    return min(near, key=lambda rank: float((rank.error or {}).get("time", float("inf"))))


def _outcome(ranks: list[Rank]) -> str:
    first = _first_failure(ranks)
    if first is not None:
        return first.status
    for status in ("hung", "killed"):
        if any(rank.status == status for rank in ranks):
            return status
    return "trained"


def _environment(env: dict[str, str] | None, unset: tuple[str, ...]) -> dict[str, str]:
    merged = dict(SERVER_ENVIRONMENT)
    merged.update({key: value for key, value in os.environ.items() if key not in LAUNCH_VARIABLES})
    merged.update(env or {})
    for name in unset:
        merged.pop(name, None)
    return merged


def run_job(
    target: str | Path,
    *args: str,
    world_size: int = 2,
    env: dict[str, str] | None = None,
    unset: tuple[str, ...] = (),
    rank_env: dict[int, dict[str, str]] | None = None,
    cwd: str | Path | None = None,
    timeout: float = 120,
    grace: float = GRACE_SECONDS,
    path: tuple[str, ...] = (),
    launcher: str = "fork",
    kind: str | None = None,
    launch_env: bool = True,
    ranks: tuple[int, ...] | None = None,
) -> Job:
    """Run ``target`` (a script path, run as ``__main__`` with ``args``; or ``"module:function"``, called with
    ``args``) on ``world_size`` ranks; see the module's docstring.

    ``env`` is added to the test's environment and ``unset`` removed from it; ``rank_env`` adds variables to one
    rank only; ``path`` puts folders first on ``sys.path`` for a ``module:function`` target; ``ranks`` starts only
    those ranks of the ``world_size`` (a rank that never starts; the result lists the started ones).
    """
    folder = Path(tempfile.mkdtemp(prefix="job-"))
    working = Path(cwd) if cwd is not None else folder
    environment = _environment(env, unset)
    if launcher == "fresh":
        return _run_fresh(str(target), args, environment, working, folder, timeout)
    if launcher != "fork":
        raise ValueError(f"launcher must be 'fork' or 'fresh', got {launcher!r}")
    current = server()
    differing = [name for name in IMPORT_TIME_VARIABLES if environment.get(name) != current.environment.get(name)]
    if differing:
        raise ValueError(f"{differing} are read at import time and differ from the fork server's: use launcher='fresh'")
    if kind is None:
        kind = "script" if ":" not in str(target) or Path(str(target)).exists() else "call"
    job = {
        "kind": kind, "target": str(target), "args": list(args), "launch_env": launch_env,
        "world_size": world_size, "env": environment, "cwd": str(working), "folder": str(folder),
        "port": free_port(), "timeout": timeout, "grace": grace, "path": list(path),
        "rank_env": {str(rank): values for rank, values in (rank_env or {}).items()},
        "ranks": list(range(world_size) if ranks is None else ranks),
    }  # fmt: skip
    reply = current.submit(job)
    notes: list[str] = []
    if reply is None or "server_error" in reply:
        notes.append(f"the fork server failed during the job and was replaced: {reply or current.log_text()[-2000:]}")
        current.stop()
        for pid_file in folder.glob("rank*.pid"):  # the ranks' sessions outlive the server: end them too
            with contextlib.suppress(ValueError, OSError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        ranks = []
        for rank in job["ranks"]:
            output, error = _read_rank(folder, rank)
            ranks.append(Rank(rank, "raised" if error else "hung", None, None, output, error))
        return Job(_outcome(ranks), ranks, folder, timeout, "fork", notes)
    ranks = []
    records = reply["ranks"]
    errors = {record["rank"]: _read_rank(folder, record["rank"]) for record in records}
    any_failed = any(
        error is not None or _decode(record["status"]) != (0, None)
        for record, (_, error) in zip(records, errors.values(), strict=True)
        if not record["killed"]
    )
    for record in records:
        output, error = errors[record["rank"]]
        exit_code, signal_number = _decode(record["status"])
        status = _status(exit_code, error, record["killed"], any_failed)
        ranks.append(Rank(record["rank"], status, exit_code, signal_number, output, error, record["ended_after"]))
    return Job(_outcome(ranks), ranks, folder, reply["seconds"], "fork", notes)


def run_command(
    argv: list[str], *, cwd: str | Path | None = None, env: dict[str, str] | None = None, timeout: float = 120
) -> Job:
    """``[sys.executable, "-m" | "-c" | script, ...]`` as one process forked from the server (no launch variables):
    what a hint's command does, without an interpreter start. The command's arguments are kept as given."""
    if not argv or argv[0] != sys.executable:
        raise ValueError(f"not a command of this interpreter: {argv}")
    if argv[1] in ("-m", "-c"):
        kind = "module" if argv[1] == "-m" else "code"
        return run_job(argv[2], *argv[3:], world_size=1, env=env, cwd=cwd, timeout=timeout, kind=kind,
                       launch_env=False)  # fmt: skip
    return run_job(argv[1], *argv[2:], world_size=1, env=env, cwd=cwd, timeout=timeout, kind="script",
                   launch_env=False)  # fmt: skip


def _run_fresh(target: str, args: tuple[str, ...], env: dict[str, str], cwd: Path, folder: Path, timeout: float) -> Job:
    """``python target args`` in a fresh interpreter of its own session (killed whole at the timeout)."""
    env = {**env, "MASTER_PORT": env.get("MASTER_PORT") or str(free_port())}
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, target, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=timeout)
        killed = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        killed = True
    seconds = time.monotonic() - start
    code = process.returncode
    exit_code, signal_number = (code, None) if code >= 0 else (None, -code)
    raised = "Traceback (most recent call last)" in output
    status = "hung" if killed else "trained" if code == 0 else "raised" if raised else "died"
    rank = Rank(0, status, None if killed else exit_code, signal_number, output)
    return Job(status, [rank], folder, seconds, "fresh")
