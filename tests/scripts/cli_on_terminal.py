"""``python -m lightning_presets ARGV`` with stdout and stderr on two pseudo-terminals (or two pipes), for
tests/test_cli_terminal.py; prints ``RESULT [{"code": ..., "out": ..., "err": ...}]``.

Run through ``harness.run_command``: this process is forked from the harness's server (torch, Lightning and the
presets already imported), and the command itself runs in a child forked from it whose file descriptors 0, 1 and 2
are what a shell would give ``python -m lightning_presets`` (``/dev/null``, then a terminal of 40 × 120 or a pipe
each), with its own ``sys.stdout``/``sys.stderr`` made over them as the interpreter makes them at start-up, and its
environment exactly the one asked for (nothing of this process's added). What the CLI decides from the terminal
(``isatty``, its size, ``TERM``, ``NO_COLOR``) it reads from these when it runs, as in a fresh interpreter.

    python tests/scripts/cli_on_terminal.py '{"argv": [...], "env": {...}, "terminal": true, "timeout": 120}'
    python tests/scripts/cli_on_terminal.py '[{...}, {...}]'    # several commands side by side

``RESULT`` is then a list, one result per command, in the order given.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import signal
import struct
import sys
import termios
import time
from typing import Any


def _streams(encoding: str) -> None:
    """``sys.stdin``/``stdout``/``stderr`` over descriptors 0-2, as ``python`` makes them at start-up: stdout line
    buffered on a terminal only, stderr always line buffered and ``backslashreplace``."""
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding)
    sys.stdout = io.TextIOWrapper(
        io.FileIO(1, "w", closefd=False), encoding=encoding, errors="strict", line_buffering=os.isatty(1)
    )
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False), encoding=encoding, errors="backslashreplace", line_buffering=True
    )


def _command(argv: list[str], env: dict[str, str], out: int, err: int, encoding: str) -> None:
    """The forked child: ``python -m lightning_presets *argv``; never returns."""
    code: Any = 1
    try:
        os.setsid()
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        for fd in (null, out, err):
            os.close(fd)
        os.environ.clear()
        os.environ.update(env)
        _streams(encoding)
        import runpy

        here = os.path.dirname(os.path.abspath(__file__))
        sys.path[:] = [os.getcwd(), *(path for path in sys.path if path != here)]  # what `python -m` puts first
        sys.argv = ["lightning_presets", *argv]
        code = 0
        try:
            runpy.run_module("lightning_presets", run_name="__main__", alter_sys=True)
        except SystemExit as exit_:
            code = exit_.code
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
                code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
        code = 1
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code or 0)


class _Command:
    """One command forked with its two terminals (or pipes); ``finish()`` reads them until it closes them."""

    def __init__(self, argv: list[str], env: dict[str, str], terminal: bool, timeout: float) -> None:
        if terminal:
            self.out, out_secondary = pty.openpty()
            self.err, err_secondary = pty.openpty()
            for fd in (out_secondary, err_secondary):  # a terminal of 120 columns, as a developer's would be
                fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
        else:
            self.out, out_secondary = os.pipe()
            self.err, err_secondary = os.pipe()
        encoding = sys.stdout.encoding or "utf-8"
        self.deadline = time.monotonic() + timeout
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.out)
            os.close(self.err)
            _command(argv, env, out_secondary, err_secondary, encoding)
        os.close(out_secondary)
        os.close(err_secondary)
        self.chunks: dict[int, list[bytes]] = {self.out: [], self.err: []}
        self.open = set(self.chunks)

    def read(self, fd: int) -> None:
        try:
            data = os.read(fd, 65536)
        except OSError:  # the other side closed (EIO on Linux)
            data = b""
        if data:
            self.chunks[fd].append(data)
        else:
            self.open.discard(fd)

    def finish(self) -> dict[str, Any]:
        timed_out = bool(self.open)
        if timed_out:
            os.killpg(self.pid, signal.SIGKILL)
        _, status = os.waitpid(self.pid, 0)
        for fd in self.chunks:
            os.close(fd)
        return {
            "code": os.waitstatus_to_exitcode(status),
            "timed_out": timed_out,
            "out": b"".join(self.chunks[self.out]).decode(),
            "err": b"".join(self.chunks[self.err]).decode(),
        }


def run(specs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each spec's command, all started at once (each in a process, terminals and environment of its own)."""
    commands = [
        _Command(spec["argv"], spec["env"], bool(spec["terminal"]), float(spec.get("timeout", 120))) for spec in specs
    ]
    while True:
        waiting = {fd: command for command in commands if time.monotonic() < command.deadline for fd in command.open}
        if not waiting:
            break
        ready, _, _ = select.select(list(waiting), [], [], 0.2)
        for fd in ready:
            waiting[fd].read(fd)
    return [command.finish() for command in commands]


if __name__ == "__main__":
    spec = json.loads(sys.argv[1])
    print("RESULT " + json.dumps(run(spec if isinstance(spec, list) else [spec])), flush=True)
