"""The harness for real distributed runs (``tests/harness.py``): each outcome it reports, on real 2-process jobs."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from harness import SCRIPTS_PATH, run_job, server

JOBS = (SCRIPTS_PATH,)


@pytest.mark.distributed
def test_a_job_that_trains() -> None:
    job = run_job("harness_jobs:all_reduce", path=JOBS, timeout=60)
    assert job.outcome == "trained", job.describe()
    assert job.returncode == 0
    assert [rank.status for rank in job.ranks] == ["trained", "trained"]
    assert "SUM 3 on rank 0 of 2" in job.ranks[0].output
    assert "SUM 3 on rank 1 of 2" in job.ranks[1].output
    assert job.stdout.index("on rank 0") < job.stdout.index("on rank 1")  # rank 0 first


@pytest.mark.distributed
def test_each_job_has_its_own_port() -> None:
    ports = {run_job("harness_jobs:all_reduce", path=JOBS, timeout=60).stdout.split("port ")[1].split()[0]
             for _ in range(2)}  # fmt: skip
    assert len(ports) == 2


@pytest.mark.distributed
def test_a_rank_that_raises_is_reported_with_its_exception_and_the_other_is_killed() -> None:
    job = run_job("harness_jobs:raise_on_rank1", path=JOBS, timeout=120, grace=3)
    assert job.ranks[0].status != "hung"
    assert job.seconds < 120  # ended by the grace period after rank 1's exception, not at the timeout
    assert job.outcome == "raised", job.describe()
    assert job.ranks[1].status == "raised"
    assert job.ranks[1].error is not None
    assert job.ranks[1].error["type"] == "ValueError"
    assert job.ranks[1].error["message"] == "rank 1 refuses to reduce"
    assert "rank 1 refuses to reduce" in job.ranks[1].output  # the traceback is in the rank's log too
    assert job.ranks[0].status in ("killed", "raised")  # gloo may notice its peer is gone, or wait until killed
    assert list(job.errors()) in ([1], [0, 1])
    assert job.first_failure is job.ranks[1]


@pytest.mark.distributed
def test_a_job_that_hangs_is_killed_at_its_timeout_and_the_next_job_runs() -> None:
    job = run_job("harness_jobs:hang_on_rank1", path=JOBS, timeout=5)
    assert job.seconds >= 5  # not before its timeout
    assert job.notes == []  # the server killed it and answered (the client did not have to replace it)
    assert job.outcome == "hung", job.describe()
    assert [rank.status for rank in job.ranks] == ["hung", "hung"]
    assert all(rank.signal == signal.SIGKILL for rank in job.ranks)
    # before the kill, each rank wrote where it hung: rank 1 in its sleep, rank 0 in the collective
    assert re.search(r'harness_jobs\.py", line \d+ in hang_on_rank1', job.ranks[1].output), job.describe()
    assert "time.sleep" not in job.ranks[0].output
    assert re.search(r"line \d+ in all_reduce", job.ranks[0].output), job.describe()
    assert run_job("harness_jobs:all_reduce", path=JOBS, timeout=60).outcome == "trained"


@pytest.mark.distributed
def test_a_rank_killed_by_a_signal_died() -> None:
    job = run_job("harness_jobs:kill_rank1", path=JOBS, timeout=120, grace=3)
    assert job.outcome == "died", job.describe()
    assert job.ranks[1].status == "died"
    assert job.ranks[1].signal == signal.SIGKILL
    assert job.ranks[1].error is None
    assert job.first_failure is job.ranks[1]
    assert job.ranks[0].status in ("killed", "raised")
    assert run_job("harness_jobs:all_reduce", path=JOBS, timeout=60).outcome == "trained"


@pytest.mark.distributed
def test_a_job_that_kills_the_server_costs_only_that_job() -> None:
    before = server().process.pid
    job = run_job("harness_jobs:kill_the_server", path=JOBS, timeout=10)
    assert job.outcome != "trained", job.describe()
    assert job.notes
    assert "replaced" in job.notes[0]
    after = run_job("harness_jobs:all_reduce", path=JOBS, timeout=60)
    assert after.outcome == "trained", after.describe()
    assert server().process.pid != before
    pids = [int(pid_file.read_text()) for pid_file in job.folder.glob("rank*.pid")]
    assert pids  # rank 0 at least (it may kill the server before rank 1 is forked)
    assert [pid for pid in pids if _alive(pid)] == []  # the orphaned ranks were ended with the job


def _alive(pid: int) -> bool:
    """Still a running rank after 5 s: a zombie waiting for its reaper is not, nor a process that reused the pid (a
    rank leads its own session; what reuses its pid almost never does). A SIGKILL takes effect when the process is
    next scheduled, hence the wait."""
    for _ in range(50):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            return False
        state, session = fields[0], int(fields[3])  # stat's fields 3 and 6
        if state in ("Z", "X") or session != pid:
            return False
        time.sleep(0.1)
    return True


@pytest.mark.distributed
def test_environment_folder_and_isolation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARNESS_CALLER", "from the test")
    job = run_job("harness_jobs:write_environment", "HARNESS_CALLER", path=JOBS, cwd=tmp_path, timeout=60)
    assert job.outcome == "trained", job.describe()
    for rank in (0, 1):
        assert (tmp_path / f"env{rank}.txt").read_text() == f"from the test|{tmp_path}"
    assert "HARNESS_LEAK" not in os.environ
    other = run_job("harness_jobs:write_environment", "HARNESS_CALLER", path=JOBS, env={"HARNESS_CALLER": "x"},
                    timeout=60)  # fmt: skip
    assert (other.folder / "env1.txt").read_text() == f"x|{other.folder}"  # its own scratch folder


def test_a_variable_read_at_import_time_needs_a_fresh_interpreter() -> None:
    with pytest.raises(ValueError, match="LIGHTNING_PRESETS_AUTOLOAD"):
        run_job("harness_jobs:all_reduce", path=JOBS, env={"LIGHTNING_PRESETS_AUTOLOAD": "0"})
