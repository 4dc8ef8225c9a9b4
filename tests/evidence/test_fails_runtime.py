"""What the runtime guards' errors stop, observed with them switched off: real 2-process CPU runs (gloo) of a DDP
preset (``tests/scripts/runtime_jobs.py``). ``tests/test_runtime_guards.py`` shows each guard's own report."""

from __future__ import annotations

import re
import signal

import pytest
from proof import Proof

from harness import SCRIPTS_PATH, Job, run_job

JOBS = (SCRIPTS_PATH,)
_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_ABORT = re.compile(
    r"terminate called after throwing an instance of '([^']+)'\s+what\(\):\s+\[enforce fail at ([^\]]+)\] (.+)"
)
"""A C++ exception that ended the process (gloo's ``GLOO_ENFORCE``): its type, ``file:line`` and message."""


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
    """Rank 1 takes 64-true from its LOCAL_RANK: with the handshake off, the first gradient reduction sends rank 0
    (float32) more bytes than it expects, and gloo aborts rank 0 in C++ (``terminate called after throwing``). That is
    the failure, and it is rank 0's every time: the rank that receives the larger message is the one whose check
    fails, and rank 1 (float64) always receives the smaller one, which gloo accepts. What rank 1 does next is a
    consequence, not the proof: it raises once it sees the closed connection, or, on a busy machine, it may still be
    on its way when the harness ends it (the last two rounds' flake: the test required rank 1's exception within the
    grace). So the proof is rank 0's abort, read from its output; rank 1 must not have trained."""
    job = run_job("runtime_jobs:fit", "64-true", path=JOBS, timeout=120, env={"LIGHTNING_PRESETS_HANDSHAKE": "0"})
    first, second = job.ranks
    assert first.status == "died", job.describe()
    assert first.signal == signal.SIGABRT, job.describe()
    aborted = _ABORT.search(first.output)
    assert aborted is not None, job.describe()
    kind, where, message = aborted.groups()
    proof.record_raised(("LP030",), kind, message, where, r"Received data size doesn't match expected size",
                        guard_off=False)  # fmt: skip
    assert second.status in ("raised", "killed"), job.describe()  # never trained on with rank 0 gone
    assert "RESULT " not in job.stdout, job.describe()


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
