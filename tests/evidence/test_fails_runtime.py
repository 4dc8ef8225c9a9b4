"""What the runtime guards' errors stop, observed with them switched off: real 2-process CPU runs (gloo) of a DDP
preset (``tests/scripts/runtime_jobs.py``). ``tests/test_runtime_guards.py`` shows each guard's own report."""

from __future__ import annotations

import re

import pytest
from proof import Proof

from harness import SCRIPTS_PATH, Job, run_job

JOBS = (SCRIPTS_PATH,)
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def _record(proof: Proof, code: str, job: Job, rank: int, kind: str, match: str) -> None:
    """Rank ``rank`` raised ``kind`` matching ``match``, from where its traceback's innermost frame is."""
    error = job.errors().get(rank)
    assert error is not None, job.describe()
    assert error["type"] == kind, job.describe()
    frames = _FRAME.findall(error["traceback"])
    where = f"{frames[-1][0]}:{frames[-1][1]}" if frames else "<no traceback>"
    proof.record_raised((code,), kind, error["message"], where, match, guard_off=False)


@pytest.mark.distributed
@pytest.mark.proves("LP030")
def test_lp030_ranks_with_different_settings_train_apart(proof: Proof) -> None:
    """Rank 1 takes 64-true from its LOCAL_RANK: with the handshake off, gloo finds sizes that do not match in the
    first gradient reduction (rank 0 aborts in C++, rank 1 raises once it sees the connection close: on a busy
    machine that took more than 2 s once, so it gets the harness's default grace)."""
    job = run_job("runtime_jobs:fit", "64-true", path=JOBS, timeout=120, env={"LIGHTNING_PRESETS_HANDSHAKE": "0"})
    assert job.ranks[0].status == "died" or job.ranks[0].error is not None, job.describe()
    assert "doesn't match expected size" in job.ranks[0].output or job.ranks[0].error is not None, job.describe()
    _record(proof, "LP030", job, 1, "RuntimeError", r"Connection reset by peer|Connection closed by peer|size")


@pytest.mark.distributed
@pytest.mark.proves("LP033")
def test_lp033_a_rank_that_never_starts_stalls_the_others(proof: Proof) -> None:
    """Only rank 0 of 2 starts: with the watchdog off, it waits in the rendezvous for the strategy's whole timeout
    (3 s here, 30 minutes by default), then torch's store raises."""
    job = run_job("runtime_jobs:join", "3", path=JOBS, timeout=60, ranks=(0,),
                  env={"LIGHTNING_PRESETS_JOIN_TIMEOUT": "0"})  # fmt: skip
    _record(proof, "LP033", job, 0, "DistStoreError", r"waiting for clients\. 1/2 clients joined")


@pytest.mark.distributed
@pytest.mark.proves("LP034")
def test_lp034_a_collective_on_one_rank_hangs(proof: Proof) -> None:
    """Rank 0 alone logs with sync_dist=True in on_train_epoch_end: without diagnose mode it waits for the process
    group's whole timeout (3 s here, 30 minutes by default), then gloo raises with no word of the line or the hook."""
    job = run_job("runtime_jobs:log_on_rank0", "3", path=JOBS, timeout=60, grace=2)
    _record(proof, "LP034", job, 0, "RuntimeError", r"Timed out waiting 3000ms for recv operation")
    assert "on_train_epoch_end" not in job.errors()[0]["message"]
