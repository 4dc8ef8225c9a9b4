"""``lightning-presets explain`` on the log fixtures (tests/explain_logs/): reading, ranks, the first failure and its
consequences, the JSON shape, the terminal paragraphs and the exit codes."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from helpers import run
from lightning_presets.core.findings import UsageError
from lightning_presets.tools.explain import explain, read

LOGS = Path(__file__).resolve().parent / "explain_logs"
KEYS = {"code", "category", "cause", "fix", "ranks", "first", "evidence"}


def failures(*paths: str | Path) -> list[dict[str, Any]]:
    return [failure.as_dict() for failure in explain([str(path) for path in paths]).failures]


def summary(*paths: str | Path) -> list[tuple[str, list[int], bool]]:
    return [(each["code"], each["ranks"], each["first"]) for each in failures(*paths)]


def test_the_torchrun_folder_of_the_readme_names_rank_1_first_and_rank_0_as_its_consequence() -> None:
    found = failures(LOGS / "rank1_raises")
    assert [(f["category"], f["ranks"], f["first"], f["role"]) for f in found] == [
        ("unknown", [1], True, "cause"),
        ("collective_desync", [0], False, "consequence"),
    ]
    assert "ValueError: the batch of rank 1 has 0 samples" in found[0]["cause"]
    assert any("attempt_0/1/error.json" in line for line in found[0]["evidence"])


def test_rank_1_first_by_the_error_files_times_although_rank_0_is_read_first(tmp_path: Path) -> None:
    """The folder reads rank 0's files first; the error files' timestamps and the roles put rank 1's error first."""
    shutil.copytree(LOGS / "torchrun_oom", tmp_path / "run")
    assert summary(tmp_path / "run") == [("LP059", [1], True), ("LP044", [0], False)]
    # Without the error files (no times), the cause still comes before the timeout that follows from it
    for error_file in (tmp_path / "run").rglob("error.json"):
        error_file.unlink()
    assert summary(tmp_path / "run") == [("LP059", [1], True), ("LP044", [0], False)]


def test_a_slurm_file_with_rank_prefixes_attributes_each_error_to_its_rank() -> None:
    assert summary(LOGS / "slurm_nccl_shm.out") == [("LP041", [1], True), ("LP043", [0], False)]
    # rank 1's "unhandled system error" is its shm failure, not a second NCCL failure
    assert "LP040" not in [code for code, _, _ in summary(LOGS / "slurm_nccl_shm.out")]


def test_sigkill_without_a_traceback_is_the_host_oom_killer() -> None:
    found = failures(LOGS / "torchrun_summary_oom_killed.txt")
    assert [(f["category"], f["ranks"], f["first"]) for f in found] == [("host_oom", [0], True)]
    assert "OOM killer" in found[0]["cause"]


def test_sigkill_of_a_rank_whose_traceback_is_known_is_not_blamed_on_the_host(tmp_path: Path) -> None:
    log = tmp_path / "run.log"
    log.write_text(
        "[rank0]: Traceback (most recent call last):\n"
        '[rank0]:   File "train.py", line 3, in <module>\n'
        "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity\n"
        + (LOGS / "torchrun_summary_oom_killed.txt").read_text(encoding="utf-8")
    )
    assert [code for code, _, _ in summary(log)] == ["LP059"]


def test_a_pasted_traceback_on_standard_input(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO((LOGS / "pasted_deepspeed.txt").read_text(encoding="utf-8")))
    code, out = run(capsys, "explain", "--json", "-")
    data = json.loads(out)
    assert code == 0
    assert [f["category"] for f in data["failures"]] == ["deepspeed_first_step"]
    assert "train_batch_size=8" in data["failures"][0]["cause"]
    assert data["read"] == [{"path": "<stdin>", "lines": 8}]


def test_the_json_shape_and_the_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "explain", "--json", str(LOGS / "gloo_peer_closed.txt"), str(LOGS / "healthy.log"))
    data = json.loads(out)
    assert code == 0
    assert set(data) == {"level", "failures", "read"}
    assert data["level"] == "first"  # the first failure is an unrecognised exception: only it can be told
    for failure in data["failures"]:
        assert set(failure) >= KEYS
        assert isinstance(failure["ranks"], list)
        assert isinstance(failure["first"], bool)
        assert all(isinstance(line, str) for line in failure["evidence"])
    assert [f["first"] for f in data["failures"]] == [True, False]
    assert [f["code"] for f in data["failures"]] == ["LP089", "LP047"]


def test_nothing_recognised_exits_1_and_says_what_was_read(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "explain", str(LOGS / "healthy.log"))
    assert code == 1
    assert "NOTHING RECOGNISED" in out
    assert "healthy.log (4 lines)" in out
    code, out = run(capsys, "explain", "--json", str(LOGS / "healthy.log"))
    assert code == 1
    assert json.loads(out) == {
        "level": "nothing", "failures": [], "read": [{"path": str(LOGS / "healthy.log"), "lines": 4}]
    }  # fmt: skip


def test_an_unrecognised_traceback_alone_is_shown_but_not_explained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "run.log"
    log.write_text("Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\nKeyError: 'labels'\n")
    code, out = run(capsys, "explain", str(log))
    assert code == 1
    assert "KeyError: 'labels'" in out
    assert "FIRST FAILURE ONLY (first): KeyError: 'labels' on rank unknown" in out
    assert "NOTHING RECOGNISED" not in out  # a log with a failure in it is never "nothing"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["explain", "/no/such/log"], "no such file or folder"),
        (["explain", "-", "-"], "can be given once"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(capsys, *argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_no_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        run(capsys, "explain")
    assert exit_.value.code == 2
    with pytest.raises(UsageError, match="at least one"):
        read([])


def test_an_empty_folder_and_a_binary_file_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="has no files"):
        read([str(tmp_path / "empty")])
    (tmp_path / "core").write_bytes(b"\x7fELF\0\0\0binary")
    with pytest.raises(UsageError, match="not a text file"):
        read([str(tmp_path / "core")])


def test_the_paragraphs_name_the_code_cause_fix_ranks_files_and_order(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "explain", str(LOGS / "slurm_nccl_shm.out"))
    assert code == 0
    assert "1. [LP041] rank 1 (first failure; nccl_shm)" in out
    assert "2. [LP043] rank 0 (after LP041 on rank 1: a consequence of it; nccl_network)" in out
    assert "--shm-size" in out  # the fix
    assert "slurm_nccl_shm.out:" in out  # the places
    assert "EXPLAINED (cause): the first failure is LP041 (nccl_shm) on rank 1, its cause is known" in out


def test_the_help_lists_every_category(capsys: pytest.CaptureFixture[str]) -> None:
    from lightning_presets.failures import CATEGORIES

    with pytest.raises(SystemExit):
        run(capsys, "explain", "--help")
    text = " ".join(capsys.readouterr().out.split())
    assert all(category in text for category in CATEGORIES)


def test_rank_prefixes_of_torchrun_and_mpirun(tmp_path: Path) -> None:
    log = tmp_path / "mixed.log"
    log.write_text(
        "[default3]:[rank11]: RuntimeError: CUDA error: invalid device ordinal\n"
        "[1,5]<stderr>: RuntimeError: CUDA error: invalid device ordinal\n"
        "[default2]: RuntimeError: CUDA error: invalid device ordinal\n"
        "7: RuntimeError: CUDA error: invalid device ordinal\n"  # srun --label
    )
    assert {stream.rank for stream in read([str(log)]).streams} == {11, 5, 2, 7}
    assert summary(log) == [("LP052", [2, 5, 7, 11], True)]


def test_probe_describes_this_machine_only_when_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = LOGS / "slurm_nccl_shm.out"
    assert "probe" not in failures(log)[0]
    probed = explain([str(log)], probe=True).failures[0].as_dict()
    assert "/dev/shm" in probed["probe"]


def test_a_folder_of_too_many_files_is_a_usage_error_found_without_walking_it_all(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning_presets.tools.explain import reading

    monkeypatch.setattr(reading, "MAX_FILES", 3)
    for index in range(5):
        (tmp_path / f"rank{index}.log").write_text("ok\n")
    with pytest.raises(UsageError, match="more than 3 files"):
        read([str(tmp_path)])


@pytest.mark.parametrize(
    ("text", "level"),
    [
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity", "cause"),
        ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, "
         "NumelOut=1, Timeout(ms)=600000) ran for 600013 milliseconds before timing out.", "category"),
        ("  exitcode  : -9 (pid: 14750)\n  traceback : Signal 9 (SIGKILL) received by PID 14750", "category"),
        ('Traceback (most recent call last):\n  File "t.py", line 1\nKeyError: 1', "first"),
        ("RuntimeError: the batch of rank 1 is empty", "first"),  # a failure without its traceback is still one
        ("Epoch 1: 100%|##########| 250/250 [00:41<00:00, loss=0.412]", "nothing"),
    ],
)  # fmt: skip
def test_every_report_says_its_level(text: str, level: str, tmp_path: Path) -> None:
    """Three honest levels and 'nothing' for a log without a failure: a cause only where the log tells it; a watchdog
    timeout or a SIGKILL is a category (the failing rank or the killer is elsewhere)."""
    log = tmp_path / "run.log"
    log.write_text(text + "\n", encoding="utf-8")
    report = explain([str(log)])
    assert report.level == level
    assert report.as_dict()["level"] == level


def test_a_traceback_pasted_lower_cased_is_read(tmp_path: Path) -> None:
    log = tmp_path / "lower.log"
    log.write_text(
        'traceback (most recent call last):\n  file "train.py", line 3, in <module>\n'
        "torch.outofmemoryerror: cuda out of memory. tried to allocate 2.00 gib. gpu 0 has a total capacity\n"
    )
    assert summary(log) == [("LP059", [], True)]
    assert "allocating 2.00 gib" in failures(log)[0]["cause"]
    log.write_text("traceback (most recent call last):\n  file \"t.py\", line 1\nkeyerror: 'labels'\n")
    [found] = failures(log)
    assert found["code"] == "LP089"
    assert "keyerror: 'labels'" in found["cause"]


def test_the_verdict_says_the_level_in_words(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "explain", str(LOGS / "rank1_raises"))
    text = " ".join(out.split())
    assert code == 0
    assert "EXPLAINED (first): the first failure is LP089 (unknown) on rank 1, no signature knows it" in text
    code, out = run(capsys, "explain", str(LOGS / "gloo_peer_closed.txt"))
    assert "its cause is known" not in out  # the first failure there is unknown too: never a claimed cause


def test_a_summary_without_tracebacks_names_the_rank_that_exited_not_those_the_launcher_stopped(
    tmp_path: Path,
) -> None:
    """A failure in the log, even with no traceback: torchrun's summary says rank 2 exited with code 1; rank 1's
    SIGTERM is the launcher stopping it, not a failure of its own."""
    entry = (
        "[{n}]:\n  time      : 2025-08-01_11:36:44\n  host      : node\n  rank      : {n} (local_rank: {n})\n"
        "  exitcode  : {code} (pid: 1{n})\n  error_file: <N/A>\n"
        "  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n"
    )
    log = tmp_path / "summary.log"
    log.write_text("Failures:\n" + entry.format(n=1, code=-15) + "----------\nRoot Cause (first observed failure):\n"
                   + entry.format(n=2, code=1) + "==========\n")  # fmt: skip
    report = explain([str(log)])
    assert report.level == "first"
    assert [(f.code, f.ranks) for f in report.failures] == [("LP089", [2])]
    assert "rank 2 exited with exit code 1; its own error is not in what was read" in report.failures[0].cause
