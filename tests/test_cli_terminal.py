"""The CLI on a terminal and in a pipe: colour and progress on a (pseudo-)terminal, plain text otherwise."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

ANSI = "\x1b["
COMMAND = [sys.executable, "-m", "lightning_presets"]


def _environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    return {**env, "TERM": "xterm-256color", **extra}


def on_terminal(*argv: str, timeout: float = 120, **env: str) -> tuple[int, str, str]:
    """Run the CLI with stdout and stderr on two pseudo-terminals; their text and the exit code."""
    out_primary, out_secondary = pty.openpty()
    err_primary, err_secondary = pty.openpty()
    for fd in (out_secondary, err_secondary):  # a terminal of 120 columns, as a developer's would be
        fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        [*COMMAND, *argv], stdout=out_secondary, stderr=err_secondary, stdin=subprocess.DEVNULL, env=_environment(**env)
    )
    os.close(out_secondary)
    os.close(err_secondary)
    chunks: dict[int, list[bytes]] = {out_primary: [], err_primary: []}
    deadline = time.monotonic() + timeout
    open_fds = set(chunks)
    while open_fds and time.monotonic() < deadline:
        ready, _, _ = select.select(list(open_fds), [], [], 0.2)
        for fd in ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # the other side closed (EIO on Linux)
                data = b""
            if data:
                chunks[fd].append(data)
            else:
                open_fds.discard(fd)
    code = process.wait(timeout=max(deadline - time.monotonic(), 1))
    for fd in chunks:
        os.close(fd)
    return code, b"".join(chunks[out_primary]).decode(), b"".join(chunks[err_primary]).decode()


def piped(*argv: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*COMMAND, *argv], capture_output=True, text=True, env=_environment(**env), timeout=120, check=False
    )


@pytest.mark.parametrize("argv", [("list",), ("check", "--accelerator", "cpu", "--devices", "2", "--strategy",
                                              "fsdp_offload_ckpt")])  # fmt: skip
def test_colour_on_a_terminal_none_when_piped(argv: tuple[str, ...]) -> None:
    code, out, _ = on_terminal(*argv)
    assert ANSI in out, out[:500]
    result = piped(*argv)
    assert result.returncode == code
    assert ANSI not in result.stdout
    assert result.stdout.strip()
    assert all(line == line.rstrip() for line in result.stdout.splitlines())  # no padding in plain text


def test_no_color_dumb_terminals_and_json_are_plain_on_a_terminal() -> None:
    for env in ({"NO_COLOR": "1"}, {"TERM": "dumb"}):
        _, out, _ = on_terminal("list", **env)
        assert ANSI not in out
        assert "fsdp_offload_ckpt" in out
    _, out, _ = on_terminal("list", "--json")
    assert ANSI not in out
    assert out.lstrip().startswith("{")


def test_severities_are_coloured_differently_on_a_terminal() -> None:
    code, out, _ = on_terminal("check", "--accelerator", "cpu", "--devices", "1", "--strategy", "fsdp2")
    assert code == 0  # LP212: a warning only
    assert "\x1b[33m" in out  # yellow: the warning
    code, out, _ = on_terminal("check", "--accelerator", "cpu", "--devices", "2", "--strategy", "fsdp_offload_ckpt")
    assert code == 1
    assert "\x1b[1;31m" in out  # bold red: the error


def test_matrix_shows_progress_on_a_terminal_only(tmp_path: os.PathLike[str]) -> None:
    target = os.path.join(tmp_path, "matrix.md")
    code, _, err = on_terminal("matrix", "--mode", "fabric", "--output", target, timeout=240)
    assert code == 0
    assert "checking fabric configurations" in err  # the live bar, on stderr
    result = piped("matrix", "--mode", "fabric", "--output", target)
    assert result.returncode == 0
    assert "checking fabric configurations" not in result.stderr
    assert ANSI not in result.stderr
