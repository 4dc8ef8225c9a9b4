"""The CLI on a terminal and in a pipe: colour and progress on a (pseudo-)terminal, plain text otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness import run_command

ANSI = "\x1b["
COMMAND = [sys.executable, "-m", "lightning_presets"]
DRIVER = Path(__file__).resolve().parent / "scripts" / "cli_on_terminal.py"


def _environment(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS")}
    return {**env, "TERM": "xterm-256color", **extra}


def _cli(*runs: tuple[tuple[str, ...], dict[str, str], bool, float]) -> list[dict[str, Any]]:
    """For each ``(argv, env, terminal, timeout)``: ``python -m lightning_presets *argv`` with stdout and stderr on
    two pseudo-terminals of 40 × 120 (or two pipes) and exactly ``env``. Forked from the harness's server
    (tests/scripts/cli_on_terminal.py), side by side, instead of a fresh interpreter each: the CLI reads the terminal
    and the environment when it runs, not at import."""
    specs = [{"argv": list(argv), "env": env, "terminal": terminal, "timeout": timeout}
             for argv, env, terminal, timeout in runs]  # fmt: skip
    longest = max(timeout for *_, timeout in runs)
    job = run_command([sys.executable, str(DRIVER), json.dumps(specs)], timeout=longest + 60)
    assert job.outcome == "trained", job.describe()
    (results,) = job.reports()
    for result in results:
        assert not result["timed_out"], result
    return list(results)


def terminal(*argv: str, timeout: float = 120, **env: str) -> tuple[tuple[str, ...], dict[str, str], bool, float]:
    return argv, _environment(**env), True, timeout


def pipe(*argv: str, timeout: float = 120, **env: str) -> tuple[tuple[str, ...], dict[str, str], bool, float]:
    return argv, _environment(**env), False, timeout


def as_terminal(result: dict[str, Any]) -> tuple[int, str, str]:
    """What ``on_terminal`` returns: the exit code and the text of the two terminals."""
    return result["code"], result["out"], result["err"]


def as_pipe(result: dict[str, Any], argv: tuple[str, ...]) -> subprocess.CompletedProcess[str]:
    """What ``subprocess.run(..., capture_output=True, text=True)`` returns."""
    return subprocess.CompletedProcess([*COMMAND, *argv], result["code"], result["out"], result["err"])


@pytest.mark.parametrize("argv", [("list",), ("check", "--accelerator", "cpu", "--devices", "2", "--strategy",
                                              "fsdp_offload_ckpt")])  # fmt: skip
def test_colour_on_a_terminal_none_when_piped(argv: tuple[str, ...]) -> None:
    on_a_terminal, in_a_pipe = _cli(terminal(*argv), pipe(*argv))
    code, out, _ = as_terminal(on_a_terminal)
    assert ANSI in out, out[:500]
    result = as_pipe(in_a_pipe, argv)
    assert result.returncode == code
    assert ANSI not in result.stdout
    assert result.stdout.strip()
    assert all(line == line.rstrip() for line in result.stdout.splitlines())  # no padding in plain text


def test_no_color_dumb_terminals_and_json_are_plain_on_a_terminal() -> None:
    *plain, as_json = _cli(terminal("list", NO_COLOR="1"), terminal("list", TERM="dumb"), terminal("list", "--json"))
    for result in plain:
        _, out, _ = as_terminal(result)
        assert ANSI not in out
        assert "fsdp_offload_ckpt" in out
    _, out, _ = as_terminal(as_json)
    assert ANSI not in out
    assert out.lstrip().startswith("{")


def test_severities_are_coloured_differently_on_a_terminal() -> None:
    warned, rejected = _cli(
        terminal("check", "--accelerator", "cpu", "--devices", "1", "--strategy", "fsdp2"),
        terminal("check", "--accelerator", "cpu", "--devices", "2", "--strategy", "fsdp_offload_ckpt"),
    )
    code, out, _ = as_terminal(warned)
    assert code == 0  # LP212: a warning only
    assert "\x1b[33m" in out  # yellow: the warning
    code, out, _ = as_terminal(rejected)
    assert code == 1
    assert "\x1b[1;31m" in out  # bold red: the error


def test_matrix_shows_progress_on_a_terminal_only(tmp_path: os.PathLike[str]) -> None:
    # each writes its own file (both at once); what is compared is their exit codes and stderr
    target, piped_target = os.path.join(tmp_path, "matrix.md"), os.path.join(tmp_path, "piped.md")
    argv = ("matrix", "--mode", "fabric", "--output")
    on_a_terminal, in_a_pipe = _cli(terminal(*argv, target, timeout=240), pipe(*argv, piped_target))
    code, _, err = as_terminal(on_a_terminal)
    assert code == 0
    assert "checking fabric configurations" in err  # the live bar, on stderr
    result = as_pipe(in_a_pipe, (*argv, piped_target))
    assert result.returncode == 0
    assert "checking fabric configurations" not in result.stderr
    assert ANSI not in result.stderr
