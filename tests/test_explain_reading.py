"""``explain`` on what real logs are: large (only the end read, line numbers still the file's own), repetitive (one
failure thousands of times), piped, FIFOs and devices, folders with broken links, terminal escape sequences."""

from __future__ import annotations

import gc
import io
import json
import os
import threading
import time
from pathlib import Path

import pytest

from helpers import run
from lightning_presets.core.findings import UsageError
from lightning_presets.tools.explain import explain, reading

OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 79 GiB"
PROGRESS = "Epoch 3:  41%|████      | 4100/10000 [12:01<17:18, 5.68it/s, train_loss=2.31]\n"


def _log(path: Path, before: int, after: int = 5) -> int:
    """``before`` progress lines, a traceback, ``after`` more; the exception line's number."""
    path.write_text(PROGRESS * before + 'Traceback (most recent call last):\n  File "t.py", line 1, in step\n'
                    + OOM + "\n" + PROGRESS * after, encoding="utf-8")  # fmt: skip
    return before + 3


def test_a_log_larger_than_the_window_reports_the_files_own_line_numbers_and_says_where_it_read_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(reading, "MAX_BYTES", 64 << 10)
    monkeypatch.setattr(reading, "CHUNK", 4 << 10)
    log = tmp_path / "big.log"
    expected = _log(log, 5000)
    report = explain([str(log)])
    assert [(f.code, f.events[0].line) for f in report.failures] == [("LP059", expected)]
    [(path, start)] = report.windows
    assert path == str(log)
    assert 4000 < start < expected
    assert report.places == ((str(log), expected + 5),)
    out = " ".join(run(capsys, "explain", str(log))[1].split())  # the report wraps at the terminal's width
    assert f"only its end was read, from line {start}" in out
    assert f"big.log:{expected}" in out
    # piped on standard input: read a chunk at a time, its tail kept, the same line number
    monkeypatch.setattr("sys.stdin", io.StringIO(log.read_text(encoding="utf-8")))
    data = json.loads(run(capsys, "explain", "--json", "-")[1])
    assert data["failures"][0]["evidence"][0].startswith(f"<stdin>:{expected}: ")
    [read] = data["read"]
    assert (read["path"], read["lines"]) == ("<stdin>", expected + 5)
    assert 4000 < read["read_from_line"] < expected


def test_a_failure_repeated_thousands_of_times_is_a_few_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "repeated.log"
    with open(log, "w", encoding="utf-8") as handle:
        for step in range(3000):
            handle.write(f'Traceback (most recent call last):\n  File "t.py", line 1\nValueError: bad batch {step}\n')
            handle.write(f"[rank{step % 8}]: {OOM}\n")
    code, out = run(capsys, "explain", str(log))
    assert code == 0
    assert len(out.splitlines()) < 40, out
    assert "seen 3000 times in all" in out
    data = json.loads(run(capsys, "explain", "--json", str(log))[1])
    assert [(f["code"], f["seen"]) for f in data["failures"]] == [("LP089", 3000), ("LP059", 3000)]
    assert data["failures"][1]["ranks"] == list(range(8))


def test_explain_time_grows_linearly_with_the_number_of_failing_lines(tmp_path: Path) -> None:
    """Issue 38: 10k/20k/40k out-of-memory lines took 5, 19, 61 s (each line's number counted from the start)."""

    def cost(count: int) -> float:
        log = tmp_path / f"oom{count}.log"
        log.write_text(f"{OOM}\nstep\n" * count, encoding="utf-8")
        gc.collect()
        best = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            explain([str(log)])
            best = min(best, time.perf_counter() - start)
        return best

    small, large = cost(1000), cost(4000)
    assert large < 9 * small, (small, large)  # linear: 4x; the former quadratic: 16x


def test_a_fifo_never_blocks_and_a_device_is_refused(tmp_path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    done: list[object] = []
    worker = threading.Thread(target=lambda: done.append(explain([str(fifo)])), daemon=True)
    worker.start()
    worker.join(timeout=20)
    assert done, "explain blocked on a FIFO that has no writer"
    (tmp_path / "rank0.log").write_text(OOM + "\n", encoding="utf-8")
    report = explain([str(tmp_path)])  # a FIFO in a folder is passed over, said
    assert [f.code for f in report.failures] == ["LP059"]
    assert report.skipped == ((str(fifo), "not a regular file (a FIFO, a device or a socket)"),)
    if os.path.exists("/dev/zero"):
        with pytest.raises(UsageError, match="character device"):
            explain(["/dev/zero"])
        with pytest.raises(UsageError, match="NUL"), open("/dev/zero", "rb") as zero:
            explain(["-"], io.TextIOWrapper(zero, encoding="utf-8"))


def test_broken_links_in_a_folder_are_passed_over_and_a_loop_named_directly_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir()
    (folder / "rank1.log").write_text(OOM + "\n", encoding="utf-8")
    (folder / "dangling.log").symlink_to(tmp_path / "gone.log")
    (folder / "loop.log").symlink_to(folder / "loop.log")
    report = explain([str(folder)])
    assert [(f.code, f.ranks) for f in report.failures] == [("LP059", [1])]
    assert dict(report.skipped) == {
        str(folder / "dangling.log"): "a dangling symbolic link", str(folder / "loop.log"): "a symbolic link that loops"
    }  # fmt: skip
    with pytest.raises(UsageError, match="loops"):
        explain([str(folder / "loop.log")])
    with pytest.raises(UsageError, match="dangling symbolic link"):
        explain([str(folder / "dangling.log")])


def test_terminal_escape_sequences_never_reach_the_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    text = (
        "\x1b]0;pwned title\x07\x1b]8;;https://example.com\x1b\\link\x1b]8;;\x1b\\ \x1bc\n\x1b[31mTraceback (most "
        'recent call last):\x1b[0m\n  File "t.py", line 1\n\x1b[1mValueError: bad\x07 batch\x1b[0m\n'
    )
    log = tmp_path / "colour.log"
    log.write_text(text, encoding="utf-8")
    for argv in (["explain", str(log)], ["explain", "--json", str(log)], ["explain", "-"]):
        monkeypatch.setattr("sys.stdin", io.StringIO(text))
        out = run(capsys, *argv)[1]
        assert "\x1b" not in out, out
        assert "\x07" not in out, out
        assert "ValueError: bad batch" in out
