"""The fork server behind ``harness.py``: one interpreter that imports torch, Lightning and the presets once, then
forks the ranks of each job it is sent.

Protocol: one JSON object per line on standard input (a job), one JSON object per line on the file descriptor named
by ``--reply-fd`` (its result). Standard output and error are the server's own log; each rank writes its output to
``<folder>/rank<N>.log`` and, when it raises, ``<folder>/rank<N>.error.json``.

A rank is forked into a session of its own, so that killing it kills whatever it started (Lightning's launcher, a
DataLoader worker). The server waits for the ranks with the job's timeout; once one rank has raised, the others get
``grace`` seconds to finish (they usually wait in a collective that will never complete) and are then killed.
A rank still running at the timeout (with no failed peer) first writes every thread's Python stack to its log
(``faulthandler`` on ``SIGUSR1``), so that a hang says where it hung.

The server never runs a job itself and starts no thread, so that every fork starts from the same clean state.
"""

from __future__ import annotations

import contextlib
import faulthandler
import importlib
import json
import os
import signal
import sys
import time
from typing import Any

PRELOAD = (
    "torch",
    "torch.distributed",
    "torch.distributed.fsdp",
    "torch.distributed.tensor",
    "torch.distributed.tensor.parallel",
    "torch.distributed.checkpoint",
    "lightning",
    "lightning.pytorch",
    "lightning.fabric",
    "pytorch_lightning",
    "lightning_fabric",
    "lightning_presets",
    "lightning_presets.strategies.ddp",
    "lightning_presets.strategies.model_parallel.fsdp2",
    "lightning_presets.strategies.model_parallel",
    "lightning_presets.plugins.presets",
    "models",
)
"""Imported once, before the first fork (a module that fails to import is skipped: the job imports it itself)."""

PR_SET_PDEATHSIG = 1
"""``prctl``'s option (linux/prctl.h): the signal a process gets when its parent dies."""
POLL_SECONDS = 0.02
STACKS_SECONDS = 0.5
"""How long a hung rank is given to write its stacks before it is killed."""


def preload() -> list[str]:
    skipped = []
    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # an optional package missing here is the job's to import
            skipped.append(f"{name}: {type(exc).__name__}: {exc}")
    return skipped


def _rank_environment(job: dict[str, Any], rank: int) -> dict[str, str]:
    """The job's environment, plus what torchrun gives each of its processes on one node."""
    world = int(job["world_size"])
    env = dict(job["env"])
    if not job.get("launch_env", True):
        return env
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
        "NODE_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(job["port"]),
    })  # fmt: skip
    env.update({key: str(value) for key, value in job.get("rank_env", {}).get(str(rank), {}).items()})
    return env


def _error_record(exc: BaseException) -> dict[str, Any]:
    import traceback

    return {"type": type(exc).__name__, "module": type(exc).__module__, "message": str(exc),
            "traceback": "".join(traceback.format_exception(exc)), "time": time.time()}  # fmt: skip


def _die_with(server_pid: int) -> None:
    """Have the kernel kill this rank when the server dies (``PR_SET_PDEATHSIG``).

    A job that kills the server orphans its ranks; the client ends those whose ``rank<N>.pid`` it finds, but a rank
    forked just before the server died may write that file only after the client looked (on a busy machine, long
    after). The kernel's signal has no such window: it is set before anything else, and a rank whose server died
    before it was set sees a new parent and ends itself."""
    import ctypes

    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None)
    if prctl is None or prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:  # Linux only: else the pid files
        return
    if os.getppid() != server_pid:
        os._exit(1)


def _child(job: dict[str, Any], rank: int, reply_fd: int, server_pid: int) -> None:
    """One rank: never returns."""
    code = 1
    try:
        _die_with(server_pid)
        os.setsid()
        os.close(reply_fd)
        with open(os.path.join(job["folder"], f"rank{rank}.pid"), "w") as out:  # the client's, if the server dies
            out.write(str(os.getpid()))
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        folder = job["folder"]
        log = os.open(os.path.join(folder, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        faulthandler.register(signal.SIGUSR1, file=sys.stderr, all_threads=True)  # a hang's stacks (run_job)
        os.environ.clear()
        os.environ.update(_rank_environment(job, rank))
        os.chdir(job["cwd"])
        # what Lightning computes from the environment when it is imported (the server imported it as rank 0)
        from lightning_utilities.core.rank_zero import rank_zero_only

        rank_zero_only.rank = rank  # type: ignore[attr-defined]
        if os.environ.get("PYTHONWARNINGS"):  # read at interpreter start: the job's filters go first
            import warnings

            warnings._processoptions(os.environ["PYTHONWARNINGS"].split(","))  # type: ignore[attr-defined]
        code = _run_target(job, rank)
    except BaseException as exc:  # the server must never see a rank's exception
        try:
            with open(os.path.join(job["folder"], f"rank{rank}.error.json"), "w") as out:
                json.dump(_error_record(exc), out)
            import traceback

            traceback.print_exc()
        except BaseException:
            pass
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _run_target(job: dict[str, Any], rank: int) -> int:
    """Run the job's script as ``__main__`` (with its arguments) or call ``module:function(*args)``."""
    import runpy

    target = job["target"]
    for folder in reversed(job.get("path", [])):
        sys.path.insert(0, folder)
    if job["kind"] in ("script", "module", "code"):
        try:
            if job["kind"] == "script":
                sys.argv = [target, *job["args"]]
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))  # what `python script.py` puts first
                runpy.run_path(target, run_name="__main__")
            elif job["kind"] == "module":  # python -m target args
                sys.argv = [target, *job["args"]]
                sys.path.insert(0, os.getcwd())
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:  # python -c target args
                sys.argv = ["-c", *job["args"]]
                sys.path.insert(0, "")
                exec(compile(target, "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
        except SystemExit as exit_:
            if exit_.code in (None, 0):
                return 0
            if isinstance(exit_.code, int):
                return exit_.code
            print(exit_.code, file=sys.stderr)
            return 1
        return 0
    module_name, _, function = target.partition(":")
    getattr(importlib.import_module(module_name), function)(*job["args"])
    return 0


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)


def run_job(job: dict[str, Any], reply_fd: int) -> dict[str, Any]:
    started = [int(rank) for rank in job.get("ranks", range(int(job["world_size"])))]
    world = len(started)  # the ranks this server waits for (a job may leave some of its world unstarted)
    sys.stdout.flush()
    sys.stderr.flush()
    pids: dict[int, int] = {}
    server_pid = os.getpid()
    for rank in started:
        pid = os.fork()
        if pid == 0:
            _child(job, rank, reply_fd, server_pid)
        pids[pid] = rank
    start = time.monotonic()
    deadline = start + float(job["timeout"])
    statuses: dict[int, int] = {}
    ended: dict[int, float] = {}
    killed: set[int] = set()
    raised_at: float | None = None
    while len(statuses) < world:
        for pid, rank in pids.items():
            if rank in statuses:
                continue
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                statuses[rank] = status
                ended[rank] = time.monotonic() - start
        if len(statuses) == world:
            break
        now = time.monotonic()
        if raised_at is None and any(
            os.path.exists(os.path.join(job["folder"], f"rank{rank}.error.json")) or _failed(statuses.get(rank))
            for rank in started
        ):
            raised_at = now
            deadline = min(deadline, now + float(job["grace"]))
        if now >= deadline:
            running = {pid: rank for pid, rank in pids.items() if rank not in statuses}
            if raised_at is None:  # hung, not waiting for a failed peer: where each rank is goes to its log
                for pid in running:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGUSR1)
                time.sleep(STACKS_SECONDS)
            for pid, rank in running.items():
                if rank not in statuses:
                    _kill(pid)
                    killed.add(rank)
                    statuses[rank] = os.waitpid(pid, 0)[1]
                    ended[rank] = time.monotonic() - start
            break
        time.sleep(POLL_SECONDS)
    for pid in pids:  # whatever a rank left running in its session
        _kill(pid)
    return {
        "seconds": time.monotonic() - start,
        "ranks": [
            {"rank": rank, "status": statuses[rank], "killed": rank in killed, "ended_after": ended[rank]}
            for rank in started
        ],
    }  # fmt: skip


def _failed(status: int | None) -> bool:
    """A rank that already ended badly (its peers will wait for it in vain)."""
    if status is None:
        return False
    return not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0)


def main() -> int:
    reply_fd = int(sys.argv[sys.argv.index("--reply-fd") + 1])
    skipped = preload()
    reply = os.fdopen(reply_fd, "w", buffering=1)
    reply.write(json.dumps({"ready": True, "pid": os.getpid(), "skipped": skipped}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        job = json.loads(line)
        try:
            result = run_job(job, reply_fd)
        except Exception as exc:  # report the server's own failure to the client, and carry on
            result = {"server_error": f"{type(exc).__name__}: {exc}"}
        reply.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
