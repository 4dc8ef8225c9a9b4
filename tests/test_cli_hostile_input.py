"""Hostile input to the command line: exit 2 with a message, never a traceback, a hang or unbounded memory.

A config file cannot run code (``class_path`` is limited to Lightning's classes and registered presets',
refused before anything is imported), sizes and reads are bounded, and unwritable output is a usage error.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import pytest

from _dists import Dist
from helpers import Fresh, Started, cheaper_than_a_check, cli_cpu_seconds, run_cli, run_forked
from lightning_presets.cli import _check as check_cli
from lightning_presets.tools import simulation as _simulation


def write(path: Path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


DDP = "lightning.pytorch.strategies.DDPStrategy"


# --- 6. a config file cannot run code -------------------------------------------------------------------------


def test_class_path_outside_lightning_is_refused_before_its_module_is_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "imported"
    (tmp_path / "evil_strategies.py").write_text(f"open({str(marker)!r}, 'w').close()\nclass Evil: pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for class_path in ("evil_strategies.Evil", "subprocess.call"):
        config = write(tmp_path / "c.yaml", f"trainer:\n  strategy:\n    class_path: {class_path}\n"
                       f"    init_args: {{args: [touch, {tmp_path / 'ran'}]}}\n")  # fmt: skip
        code, _, err = run_cli(capsys, "check", "--config", config)
        assert code == 2
        assert f"class_path {class_path!r} is refused" in err
        assert "nothing was imported" in err
    assert not marker.exists()
    assert not (tmp_path / "ran").exists()
    assert "evil_strategies" not in sys.modules


def test_a_lightning_class_that_is_not_a_strategy_is_not_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write(tmp_path / "c.yaml", "trainer:\n  strategy:\n    class_path: lightning.pytorch.cli.LightningCLI\n")
    code, _, err = run_cli(capsys, "check", "--config", config)
    assert code == 2
    assert "'lightning.pytorch.cli.LightningCLI' is refused: it is not a Lightning strategy" in err


def test_a_lightning_module_named_by_class_path_is_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 16, item 1: ``lightning.__setup__`` passed the old ``lightning.*`` filter, and importing it executes
    ``./.actions/assistant.py`` from the working directory."""
    marker = tmp_path / "assistant-ran"
    (tmp_path / ".actions").mkdir()
    (tmp_path / ".actions" / "assistant.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "lightning.__setup__", raising=False)
    config = write(tmp_path / "c.yaml", "trainer:\n  strategy:\n    class_path: lightning.__setup__.DDPStrategy\n")
    code, _, err = run_cli(capsys, "check", "--config", config)
    assert code == 2
    assert "class_path 'lightning.__setup__.DDPStrategy' is refused" in err
    assert "nothing was imported" in err
    assert not marker.exists()
    assert "lightning.__setup__" not in sys.modules


@pytest.mark.parametrize(
    "class_path",
    ["lightning.pytorch.strategies.DDPStrategy", "lightning.pytorch.strategies.ddp.DDPStrategy"],
    ids=["exported", "defining-module"],
)
def test_a_strategy_is_found_by_its_public_or_its_own_module_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], class_path: str
) -> None:
    text = f"trainer:\n  accelerator: cpu\n  devices: 2\n  strategy:\n    class_path: {class_path}\n"
    code, out, _ = run_cli(capsys, "check", "--config", write(tmp_path / "c.yaml", text), "--json")
    assert code == 0, out
    assert json.loads(out)["resolved"]["strategy_class"] == "lightning.pytorch.strategies.ddp.DDPStrategy"


def test_nested_class_path_may_be_a_cluster_environment_and_nothing_else(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nested = "lightning.fabric.plugins.environments.LightningEnvironment"
    text = (
        f"trainer:\n  accelerator: cpu\n  devices: 2\n  strategy:\n    class_path: {DDP}\n    init_args:\n"
        f"      cluster_environment:\n        class_path: {nested}\n"
    )
    config = write(tmp_path / "ok.yaml", text)
    code, out, _ = run_cli(capsys, "check", "--config", config, "--json")
    assert code == 0, out
    assert json.loads(out)["resolved"]["cluster_environment"] == "LightningEnvironment"
    config = write(tmp_path / "bad.yaml", f"trainer:\n  strategy:\n    class_path: {DDP}\n    init_args:\n"
                   "      cluster_environment:\n        class_path: os.system\n")  # fmt: skip
    code, _, err = run_cli(capsys, "check", "--config", config)
    assert code == 2
    assert "cluster_environment.class_path 'os.system' is refused" in err


ACME_CLASS = Dist(
    name="acme-class-presets",
    version="1.0.0",
    source="""\
        from lightning.pytorch.strategies import DDPStrategy
        from lightning_presets import Preset

        class AcmeDDP(DDPStrategy):
            pass

        PRESET = Preset(name="acme_class_ddp", description="d", family="ddp",
                        strategy={"trainer": "acme_class_presets:AcmeDDP"})
        """,
    strategies={"acme_class_ddp": "acme_class_presets:PRESET"},
)


@pytest.mark.usefixtures("fresh_catalog")
def test_a_class_a_registered_preset_declares_may_be_built(
    install: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    install(ACME_CLASS)
    config = write(tmp_path / "c.yaml", "trainer:\n  accelerator: cpu\n  strategy:\n"
                   "    class_path: acme_class_presets.AcmeDDP\n")  # fmt: skip
    code, out, _ = run_cli(capsys, "check", "--config", config, "--json")
    assert code == 0, out
    assert "strategy=AcmeDDP()" in json.loads(out)["call"]


# --- 7. bounded input ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--cluster", "lsf", "--devices", "1000000000"], "devices per node 1000000000 is more than"),
        (["--accelerator", "cpu", "--devices", "1000000000"], "devices per node 1000000000 is more than"),
        (["--gpus", "1000000000"], "GPUs per node (--gpus) 1000000000 is more than"),
        (["--num-nodes", "100000000", "--cluster", "lsf"], "num_nodes 100000000 is more than"),
        (["--devices", "4096", "--num-nodes", "4096"], "= 16777216 processes is more than"),
        (["--env", "PL_TRAINER_DEVICES=1000000000"], "devices per node 1000000000 is more than"),
    ],
)
def test_sizes_no_cluster_has_are_usage_errors(capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    code, _, err = run_cli(capsys, "check", *argv)
    assert code == 2
    assert words in err
    assert cheaper_than_a_check("check", *argv) == (True, ANY)  # refused before anything of that size is built


def test_a_large_lsf_job_is_still_simulated(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("--cluster", "lsf", "--accelerator", "cuda", "--gpus", "8", "--devices", "8", "--num-nodes", "512")
    code, out, _ = run_cli(capsys, "check", *argv, "--strategy", "ddp", "--json")
    assert code == 0, out


def fifo_unblocked_after(path: Path, seconds: float) -> tuple[threading.Event, list[bool]]:
    """A writer that opens the FIFO after ``seconds`` unless the returned event is set first, and closes it: a
    reader that blocked on it sees EOF then, and so does each one after it (the test fails instead of hanging). The
    list says whether it had to."""
    done = threading.Event()
    unblocked: list[bool] = []

    def unblock() -> None:
        wait = seconds
        while not done.wait(wait):  # each open of the FIFO that blocks (Lightning's own read too) sees EOF
            unblocked.append(True)
            with contextlib.suppress(OSError):
                fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            wait = 0.2

    threading.Thread(target=unblock, daemon=True).start()
    return done, unblocked


@pytest.mark.parametrize(
    ("make", "words"),
    [
        ("dev-zero", "LSB_DJOB_RANKFILE=/dev/zero: not a regular file"),
        ("fifo", "rankfile.fifo: not a regular file"),
        ("huge", "larger than 64 MiB"),
        ("latin-1", "not UTF-8 text (byte 8)"),
        ("missing", "No such file or directory"),
    ],
)
def test_a_rank_file_lightning_cannot_read_in_bounded_time_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: str, words: str
) -> None:
    """Issue 16, item 7: Lightning's LSFEnvironment read all of ``/dev/zero`` (GBs, then MemoryError as LP700) and
    blocked on a FIFO."""
    path = {"dev-zero": Path("/dev/zero"), "fifo": tmp_path / "rankfile.fifo", "huge": tmp_path / "rankfile",
            "latin-1": tmp_path / "rankfile", "missing": tmp_path / "nowhere"}[make]  # fmt: skip
    done, unblocked = threading.Event(), []
    if make == "fifo":
        os.mkfifo(path)
        done, unblocked = fifo_unblocked_after(path, 120)  # never reached unless the reader blocked
    elif make == "huge":
        with path.open("wb") as file:
            file.truncate(_simulation.MAX_RANKFILE_BYTES + 1)  # sparse: nothing is written
    elif make == "latin-1":
        path.write_bytes("launch\nn\xf6de1\n".encode("latin-1"))
    argv = ("check", "--cluster", "lsf", "--env", f"LSB_DJOB_RANKFILE={path}")
    code, _, err = run_cli(capsys, *argv)
    done.set()
    assert (code, unblocked[:1]) == (2, [])  # refused without waiting for a writer
    assert words in err

    def bounded_read() -> None:  # what a refusal may read: one byte past the limit
        with path.open("rb") as file:
            file.read(_simulation.MAX_RANKFILE_BYTES + 1)

    assert cheaper_than_a_check(*argv, plus=bounded_read if make == "huge" else None) == (True, ANY)


def test_a_readable_rank_file_is_given_to_lightning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rankfile = tmp_path / "rankfile"
    rankfile.write_text("launch\n" + f"{socket.gethostname()}\n" * 2 + "node1\n" * 2)
    argv = ("--cluster", "lsf", "--accelerator", "cpu", "--devices", "2", "--num-nodes", "2", "--strategy", "ddp")
    code, out, _ = run_cli(capsys, "check", *argv, "--env", f"LSB_DJOB_RANKFILE={rankfile}", "--json")
    assert code == 0, out
    assert json.loads(out)["resolved"]["cluster_environment"] == "LSFEnvironment"


def test_the_lsf_rank_file_is_bounded(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"at most 1048576 are simulated"):
        _simulation._lsf_rankfile(str(tmp_path), 2**11, 2**10)
    assert not (tmp_path / "rankfile").exists()


def alias_bomb(levels: int) -> str:
    lines = ['l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, levels)]
    return "\n".join(lines) + f"\ntrainer:\n  strategy: ddp\n  accelerator: *l{levels - 1}\n"


def test_a_yaml_alias_bomb_is_refused_quickly(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = write(tmp_path / "bomb.yaml", alias_bomb(9))  # 9**9 strings once expanded
    code, _, err = run_cli(capsys, "check", "--config", config)
    assert code == 2
    assert "'trainer:' expands to more than 10000 values" in err
    small = write(tmp_path / "small.yaml", alias_bomb(5))  # 9**5 strings: refused at the same 10,000 values
    assert run_cli(capsys, "check", "--config", small)[0] == 2

    def cost(path: str) -> float:
        return min(cli_cpu_seconds("check", "--config", path)[1] for _ in range(3))

    ratio = cost(config) / cost(small)
    assert ratio < 3, f"9**9 strings cost {ratio:.1f} times 9**5: expanded, not bounded"  # about 1; expanded: 6,561


def test_a_few_aliases_are_fine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    text = "defaults: &cpu {accelerator: cpu, devices: 2}\ntrainer:\n  <<: *cpu\n  strategy: ddp\n"
    code, out, _ = run_cli(capsys, "check", "--config", write(tmp_path / "c.yaml", text), "--json")
    assert code == 0, out
    assert json.loads(out)["resolved"]["world_size"] == 2


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (b"\0" * (2**20 + 1), "larger than 1 MiB"),
        ("trainer:\n  strategy: ddp\n".encode("utf-16"), "not UTF-8 text (byte 0: b'\\xff')"),
        ("trainer:\n  strategy: d\xe9p\n".encode("latin-1"), "not UTF-8 text (byte 22: b'\\xe9')"),
        (("trainer:\n  x: " + "[" * 70 + "]" * 70 + "\n").encode(), "nests deeper than 64 levels"),
        (("trainer:\n  x: " + "[" * 20000 + "]" * 20000 + "\n").encode(), "--config"),
    ],
    ids=["too-large", "utf-16", "latin-1", "deep", "very-deep"],
)
def test_config_files_that_are_not_a_small_utf8_yaml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, words: str
) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes(content)
    code, _, err = run_cli(capsys, "check", "--config", str(path))
    assert code == 2
    assert words in err


def test_config_from_dev_zero_is_read_no_further_than_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "check", "--config", "/dev/zero")
    assert code == 2
    assert "larger than 1 MiB" in err


def test_a_utf8_config_with_a_byte_order_mark_is_read(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "c.yaml"
    path.write_bytes("trainer:\n  strategy: ddp\n  accelerator: cpu\n".encode("utf-8-sig"))
    assert run_cli(capsys, "check", "--config", str(path))[0] == 0


# --- 8. exit 2 instead of tracebacks --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("80", "'80' has no unit: write 80GiB or 80GB (80B if you mean bytes)"),
        ("1" + "0" * 400 + "GiB", "must be at least 1 byte and at most 1 EiB"),
        ("0GiB", "must be at least 1 byte"),
        ("1e400", "is not a memory size"),
        ("eighty", "is not a memory size"),
    ],
)
def test_memory_sizes_refused(text: str, words: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        check_cli.memory(text)


@pytest.mark.parametrize(
    ("text", "size"),
    [("80GiB", 80 * 2**30), ("80GB", 80 * 10**9), ("0.5 GiB", 2**29), ("85899345920B", 85899345920), ("1EiB", None)],
)
def test_memory_sizes_accepted(text: str, size: int | None) -> None:
    if size is None:  # no such unit
        with pytest.raises(argparse.ArgumentTypeError):
            check_cli.memory(text)
        return
    assert check_cli.memory(text) == size


@pytest.mark.parametrize("flag", ["--gpu-memory", "--cpu-memory"])
def test_huge_memory_flags_are_usage_errors(capsys: pytest.CaptureFixture[str], flag: str) -> None:
    huge = "9" * 400 + "GiB"
    code, _, err = run_cli(capsys, "plan", "--params", "7B", "--gpus", "8", flag, huge)
    assert code == 2
    assert "at most 1 EiB" in err
    if flag == "--gpu-memory":
        assert run_cli(capsys, "check", flag, huge)[0] == 2


@pytest.mark.usefixtures("quick_matrix")
@pytest.mark.parametrize(
    ("flag", "path", "words"),
    [
        ("--output", "/nonexistent/dir/matrix.md", "the directory /nonexistent/dir does not exist"),
        ("--output", "{tmp}", "is a directory"),
        ("--output", "/dev/full", "cannot be written: No space left on device"),
        ("--output", "/proc/version", "cannot be written"),
        ("--check", "{tmp}", "is a directory"),
    ],
)
def test_matrix_paths_that_cannot_be_used_are_usage_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, path: str, words: str
) -> None:
    code, _, err = run_cli(capsys, "matrix", flag, path.format(tmp=tmp_path))
    assert code == 2
    assert words in err


@pytest.mark.usefixtures("quick_matrix")
def test_matrix_check_reads_no_further_than_what_it_compares(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "matrix", "--check", "/dev/zero")
    assert code == 1
    assert "/dev/zero is stale" in err
    assert cheaper_than_a_check("matrix", "--check", "/dev/zero") == (True, ANY)


@pytest.mark.usefixtures("quick_matrix")
def test_matrix_writes_and_checks_a_plain_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "matrix.md"
    assert run_cli(capsys, "matrix", "--output", str(target))[0] == 0
    assert target.read_text(encoding="utf-8").startswith("# Compatibility matrix")
    assert run_cli(capsys, "matrix", "--check", str(target))[0] == 0
    assert run_cli(capsys, "matrix", "--check", str(tmp_path / "missing.md"))[0] == 1  # stale, not a usage error


def start_into_full_device() -> Started:
    with open("/dev/full", "w") as full:
        return Started([sys.executable, "-m", "lightning_presets", "check", "--json"], stdout=full.fileno(),
                       env=dict(os.environ), timeout=180)  # fmt: skip


def test_check_json_to_a_full_device_is_exit_2_without_a_traceback(fresh: Fresh) -> None:
    result = fresh["full_device"].result()
    assert result.returncode == 2, result.stderr
    assert "No space left on device" in result.stderr
    assert "Traceback" not in result.stderr
    assert "Exception ignored" not in result.stderr


@pytest.mark.parametrize("value", ["bogus", "BOGUS", "DDP", "Tp2d_Hybrid"])
@pytest.mark.parametrize("extra", [[], ["--set", "find_unused_parameters=True"]])
def test_strategy_names_from_the_environment(capsys: pytest.CaptureFixture[str], value: str, extra: list[str]) -> None:
    code, out, _ = run_cli(capsys, "check", "--env", f"PL_TRAINER_STRATEGY={value}", *extra, "--json")
    assert code in (0, 1)
    json.loads(out)


def test_an_unexpected_exception_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(args: argparse.Namespace) -> int:
        raise KeyError("something internal")

    monkeypatch.setattr(check_cli, "run", broken)
    code, _, err = run_cli(capsys, "check")
    assert code == 2
    assert "lightning-presets check: error: internal error: KeyError: 'something internal' at " in err


def test_doctor_import_json_stays_json_when_a_dependency_prints(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """DeepSpeed's logger writes to stdout when it is first imported; ``doctor --import --json`` must stay JSON."""
    from lightning_presets.registry import requirements

    def printing(module: str) -> requirements.Probe:
        print(f"[WARNING] [real_accelerator.py:213:get_accelerator] {module} says hello on stdout")
        return requirements.Probe(module=module, status="ok")

    monkeypatch.setattr(requirements, "probe", printing)
    _, out, err = run_cli(capsys, "doctor", "--import", "--json")
    assert json.loads(out)["schema"] == "lightning-presets/doctor"
    assert "deepspeed says hello on stdout" in err


# --- issue 16, item 6: output is atomic ---------------------------------------------------------------------------

MATRIX_UNDER_A_FILE_SIZE_LIMIT = """
import resource, signal, sys
from lightning_presets.cli import _matrix, main

_matrix.compute = lambda modes, progress=None: ([], 0.01)
_matrix.to_markdown = lambda rows: "# Compatibility matrix\\n" + "| row |\\n" * 20000  # about 160 KB
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead of killing us
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
sys.exit(main(["matrix", "--output", sys.argv[1]]))
"""


def test_matrix_output_that_fails_mid_write_leaves_the_old_file(tmp_path: Path) -> None:
    """Before: the old file was truncated first, then the write failed at the file size limit."""
    target = tmp_path / "matrix.md"
    target.write_text("the committed matrix\n", encoding="utf-8")
    # Forked from the harness's server: the file size limit and the signal are this process's own, set at run time.
    result = run_forked(MATRIX_UNDER_A_FILE_SIZE_LIMIT.replace("sys.argv[1]", repr(str(target))), timeout=300)
    result.stderr = result.stdout  # stdout and stderr together
    assert result.returncode == 2, result.stderr[-2000:]
    assert f"--output {target}: cannot be written: File too large" in result.stderr
    assert target.read_text(encoding="utf-8") == "the committed matrix\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["matrix.md"]  # no temporary file left behind


@pytest.mark.usefixtures("quick_matrix")
def test_matrix_output_replaces_a_file_keeping_its_mode_and_follows_a_link(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "matrix.md"
    target.write_text("old\n", encoding="utf-8")
    target.chmod(0o640)
    link = tmp_path / "link.md"
    link.symlink_to(target)
    assert run_cli(capsys, "matrix", "--output", str(link))[0] == 0
    assert link.is_symlink()
    assert target.read_text(encoding="utf-8").startswith("# Compatibility matrix")
    assert stat.S_IMODE(target.stat().st_mode) == 0o640


# --- issue 16, item 10: exit codes that never lie -----------------------------------------------------------------


class _ClosedPipe(io.StringIO):
    """stdout whose reader has gone: every write raises ``BrokenPipeError``, as after ``| head -c1`` or ``| true``."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


@pytest.mark.parametrize("json_flag", [[], ["--json"]], ids=["text", "json"])
@pytest.mark.parametrize(
    ("argv", "expected"),
    [(["check", "--strategy", "ddpp"], 1), (["check", "--strategy", "ddp", "--accelerator", "cpu"], 0),
     (["show", "no_such_preset"], 1)],
    ids=["rejected", "valid", "unknown"],
)  # fmt: skip
def test_a_reader_that_closes_early_keeps_the_exit_code(
    monkeypatch: pytest.MonkeyPatch, argv: list[str], expected: int, json_flag: list[str]
) -> None:
    """Before: a broken pipe exited 0, so ``check ... | head -c1`` made a rejected configuration look valid."""
    from lightning_presets.cli import main

    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert main([*argv, *json_flag]) == expected


def start_into_a_closed_pipe() -> Started:
    read, write_end = os.pipe()
    os.close(read)
    try:
        return Started([sys.executable, "-m", "lightning_presets", "check", "--strategy", "ddpp", "--json"],
                       stdout=write_end, env=dict(os.environ), timeout=300)  # fmt: skip
    finally:
        os.close(write_end)


def test_a_rejected_check_into_a_closed_pipe_exits_1(fresh: Fresh) -> None:
    """The real pipe: its reader is closed before the command writes a byte."""
    result = fresh["closed_pipe"].result()
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("variable", ["COLUMNS", "LINES"])
@pytest.mark.parametrize("argv", [["list"], ["show", "fsdp2"], ["check", "--strategy", "ddpp"]], ids=str)
def test_a_terminal_size_that_is_not_a_number_is_ignored(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], variable: str, argv: list[str]
) -> None:
    """Before: ``COLUMNS=²`` (a digit to ``str.isdigit``, not to ``int``) made every non-JSON command an internal
    error, in our code and in rich's."""
    monkeypatch.setenv(variable, "²")
    code, out, err = run_cli(capsys, *argv)
    assert code in (0, 1)
    assert "internal error" not in err
    assert out


HUGE_HEX = "0x" + "f" * 5000


@pytest.mark.parametrize(
    "argv",
    [["--set", f"bucket_cap_mb={HUGE_HEX}"], ["--env", f"PL_TRAINER_DEVICES={HUGE_HEX}"], ["--config", "{config}"]],
    ids=["set", "env", "config"],
)
def test_a_5000_digit_integer_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """Before: an internal error (Python cannot print an integer of more than 4300 digits)."""
    config = write(tmp_path / "c.yaml", f"trainer:\n  strategy: ddp\n  accelerator: cpu\n  devices: {HUGE_HEX}\n")
    argv = [part.format(config=config) for part in argv]
    code, _, err = run_cli(capsys, "check", "--strategy", "ddp", "--accelerator", "cpu", *argv)
    assert code == 2
    assert "holds an integer of 20000 bits; no setting is larger than 1024 bits" in err


@pytest.mark.parametrize(
    ("trainer", "key"),
    [("  max_epochs: {digits}\n", "max_epochs"), ("  devices: [1, {digits}]\n", "devices[1]"),
     ("  strategy:\n    class_path: DDPStrategy\n    init_args: {{bucket_cap_mb: {digits}}}\n",
      "strategy.init_args.bucket_cap_mb")],
    ids=["key", "list", "nested"],
)  # fmt: skip
def test_a_5000_digit_decimal_integer_in_a_config_is_a_usage_error_naming_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], trainer: str, key: str
) -> None:
    """Issue 38, item 11: PyYAML raised Python's ValueError (more than 4300 digits to convert): an internal error."""
    config = write(tmp_path / "c.yaml", "trainer:\n" + trainer.format(digits="9" * 5000))
    code, _, err = run_cli(capsys, "check", "--config", config)
    assert code == 2, err
    assert f"--config {config}: 'trainer:' at {key}, holds an integer of 5000 digits;" in err
    assert "internal error" not in err
    assert len(err) < 400


WITHOUT_TORCH_AND_LIGHTNING = """
import importlib.abc, sys

class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in ("torch", "lightning", "pytorch_lightning", "lightning_fabric"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
from lightning_presets.cli import main
sys.exit(main(sys.argv[1:]))
"""


WITHOUT_CASES = [(["check"], {2}), (["matrix"], {2}), (["list"], {0}), (["show", "fsdp2"], {1}), (["doctor"], {1})]


def start_without_torch(argv: list[str]) -> Started:
    return Started([sys.executable, "-c", WITHOUT_TORCH_AND_LIGHTNING, *argv], timeout=300,
                   env={**os.environ, "LIGHTNING_PRESETS_AUTOLOAD": "0"})  # fmt: skip


@pytest.fixture(scope="module")
def fresh(request: pytest.FixtureRequest) -> Iterator[Fresh]:
    """The fresh interpreters of this module, started side by side when their tests are selected; each test reads
    its own. They stay fresh: what the interpreter does with stdout at exit (a full device, a closed pipe) and torch
    and Lightning missing before their first import are the claims."""
    without = "test_without_torch_or_lightning_every_command_says_so"
    runs = Fresh(request, {
        "full_device": (start_into_full_device, ("test_check_json_to_a_full_device_is_exit_2_without_a_traceback",)),
        "closed_pipe": (start_into_a_closed_pipe, ("test_a_rejected_check_into_a_closed_pipe_exits_1",)),
        **{" ".join(argv): ((lambda argv=argv: start_without_torch(argv)), (f"{without}[{' '.join(argv)}-codes{i}]",))
           for i, (argv, _) in enumerate(WITHOUT_CASES)},
    })  # fmt: skip
    yield runs
    runs.close()


@pytest.mark.parametrize(
    ("argv", "codes"), WITHOUT_CASES, ids=lambda value: " ".join(value) if isinstance(value, list) else None
)
def test_without_torch_or_lightning_every_command_says_so(fresh: Fresh, argv: list[str], codes: set[int]) -> None:
    """Before: ``check`` and ``matrix`` were internal errors (``doctor`` already said LP721)."""
    result = fresh[" ".join(argv)].result()
    assert result.returncode in codes, result.stderr[-2000:]
    assert "internal error" not in result.stderr
    assert "Traceback" not in result.stderr
    if argv[0] in ("check", "matrix"):  # both are missing here: either one named, with the line that installs it
        assert any(
            f"{argv[0]} needs {name}, which is not installed: pip install {name}" in result.stderr
            for name in ("torch", "lightning")
        ), result.stderr[-2000:]
