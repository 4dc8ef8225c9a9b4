"""The runtime guards (``lightning_presets.guards.runtime``) on real 2-process CPU runs (gloo) of a DDP preset: the
start-up handshake, the join watchdog and diagnose mode's hang report; and their parts on their own."""

from __future__ import annotations

import functools
import json
import os
import pickle
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from torch.distributed.fsdp.wrap import ModuleWrapPolicy

from harness import SCRIPTS_PATH, run_job
from lightning_presets import PresetWarning
from lightning_presets.core.ranks import on_nodes, spans
from lightning_presets.diagnose.hangs import describe
from lightning_presets.guards.runtime import distributed, handshake_supported
from lightning_presets.guards.runtime.handshake import (
    Fingerprint,
    _digest,
    canonical,
    compare,
    decode,
    encode,
    handshake,
)
from lightning_presets.guards.runtime.join import Schedule, Watchdog, schedule
from lightning_presets.registry import variables

JOBS = (SCRIPTS_PATH,)


# --- real runs ---------------------------------------------------------------------------------------------------


@pytest.mark.distributed
def test_an_agreeing_job_trains_as_before_without_an_alarm() -> None:
    job = run_job("runtime_jobs:fit", path=JOBS, timeout=120)
    assert job.outcome == "trained", job.describe()
    results = job.reports()
    assert [result["rank"] for result in results] == [0, 1]
    assert results[0]["checksum"] == pytest.approx(results[1]["checksum"])  # the gradients were synchronised
    assert len(results[0]["losses"]) == 4
    assert "LP03" not in job.stdout, job.describe()


@pytest.mark.distributed
def test_an_agreeing_fabric_job_trains_without_an_alarm() -> None:
    job = run_job("runtime_jobs:fit_fabric", path=JOBS, timeout=120)
    assert job.outcome == "trained", job.describe()
    first, second = job.reports()
    assert first["checksum"] == pytest.approx(second["checksum"])
    assert "LP03" not in job.stdout, job.describe()


NEEDS_HANDSHAKE = pytest.mark.skipif(
    not handshake_supported(), reason=f"the handshake is skipped below torch 2.7 (this is {torch.__version__})"
)


def test_the_handshake_runs_from_torch_2_7_on(monkeypatch: pytest.MonkeyPatch) -> None:
    for version, supported in (("2.6.0+cu124", False), ("2.7.0+cu126", True), ("2.13.0+cpu", True), ("2.15.0", True)):
        monkeypatch.setattr(torch, "__version__", version)
        assert handshake_supported() is supported, version


@NEEDS_HANDSHAKE
@pytest.mark.distributed
def test_ranks_that_pick_their_precision_from_local_rank_are_refused_on_every_rank() -> None:
    job = run_job("runtime_jobs:fit", "bf16-mixed", path=JOBS, timeout=120)
    errors = job.errors()
    assert sorted(errors) == [0, 1], job.describe()
    for error in errors.values():
        assert error["type"] == "PresetConfigError"
        message = error["message"]
        assert message.startswith("[LP030]"), message
        assert "precision: '32-true' on rank 0 on node " in message
        assert "but 'bf16-mixed' on rank 1 on node " in message
        assert "LIGHTNING_PRESETS_HANDSHAKE=0" in message
    assert "losses" not in job.stdout  # refused before the first step


@pytest.mark.distributed
def test_the_handshake_switched_off_lets_the_same_job_run() -> None:
    job = run_job("runtime_jobs:fit", "bf16-mixed", path=JOBS, timeout=120, env={variables.HANDSHAKE_VARIABLE: "0"})
    assert "LP030" not in job.stdout
    assert job.outcome == "trained", job.describe()


@pytest.mark.distributed
@pytest.mark.parametrize("started", [0, 1])
def test_a_rank_that_never_starts_ends_the_waiting_rank_with_a_report(started: int) -> None:
    env = {variables.JOIN_TIMEOUT_VARIABLE: "1"}
    start = time.monotonic()
    job = run_job("runtime_jobs:join", path=JOBS, timeout=60, ranks=(started,), env=env)
    assert time.monotonic() - start < 45  # the watchdog's 1 s and the job's start, not the harness's timeout
    [rank] = job.ranks
    assert rank.status == "died", job.describe()
    assert rank.exit_code == 1
    output = rank.output
    assert f"LP033 error: rank {started} of 2 (node " in output
    assert "waited 1 s for the process group to form (LIGHTNING_PRESETS_JOIN_TIMEOUT)" in output
    assert "expected: 2 ranks = devices 2 x num_nodes 1" in output
    assert "the launcher (torchrun) says: WORLD_SIZE=2, LOCAL_WORLD_SIZE=2" in output
    assert "MASTER_ADDR=127.0.0.1: resolves to 127.0.0.1" in output
    if started == 0:  # rank 0 serves the store: it knows who joined
        assert "joined: 1 of 2 ranks (rank 0 on node " in output
        assert "missing: rank 1, expected on node rank(s) 0 (2 per node)" in output
        assert ": answers" in output
    else:  # nobody serves the store: rank 1 says so
        assert "rank 0 (which serves it) has not started" in output
        assert ": does not answer" in output


@pytest.mark.distributed
def test_a_rank_that_joins_late_within_the_timeout_trains_after_a_warning() -> None:
    """Issue 37: a rank that reaches the process group after the watchdog's interval, but within the process
    group's timeout, is legal (torch waits for it): the waiting rank says who is missing and goes on; the job trains.
    Here the strategy's timeout is 12 s, so the report comes every 2 s, and rank 1 comes after 3 s."""
    job = run_job("runtime_jobs:join_late", "3", "12", path=JOBS, timeout=120, unset=(variables.JOIN_TIMEOUT_VARIABLE,))
    assert job.outcome == "trained", job.describe()
    output = job.ranks[0].output
    assert "LP033 warning: rank 0 of 2 (node " in output, job.describe()
    assert "it goes on waiting, as torch does, up to the process group's timeout of 12 s" in output
    assert "LP033 error" not in job.stdout


def _plan(pg_timeout: float, environ: dict[str, str]) -> Schedule:
    plan = schedule(pg_timeout, environ)
    assert plan is not None
    return plan


def test_by_default_the_join_watchdog_warns_every_300_s_and_never_ends_a_rank_before_torch() -> None:
    """Torch and Lightning wait 30 minutes for a rank to join: the watchdog's default must not end a legal job."""
    default = _plan(1800.0, {})
    assert (default.every, default.asked) == (300.0, False)
    assert default.end >= 1800.0  # torch's own timeout, never the report's interval
    short = _plan(12.0, {})
    assert (short.every, short.asked) == (2.0, False)
    assert short.end >= 12.0
    asked = _plan(1800.0, {variables.JOIN_TIMEOUT_VARIABLE: "60"})  # the user's explicit, shorter limit
    assert (asked.end, asked.asked) == (60.0, True)
    longer = _plan(30.0, {variables.JOIN_TIMEOUT_VARIABLE: "60"})  # longer than torch waits: torch's
    assert not longer.asked
    assert longer.end >= 30.0
    assert _plan(1800.0, {variables.JOIN_TIMEOUT_VARIABLE: "soon"}) == default  # LP017 says so; the default applies
    assert schedule(1800.0, {variables.JOIN_TIMEOUT_VARIABLE: "0"}) is None


def test_the_join_report_says_whether_the_rank_goes_on_waiting_or_ends_and_why() -> None:
    strategy = _Strategy(None, 2)
    environ = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "WORLD_SIZE": "2"}
    waiting = Watchdog(strategy, _plan(1800.0, {}), environ)
    assert waiting.report("warning", 300.4).startswith("LP033 warning: rank 0 of 2 (node ")
    assert "has waited 300 s for the process group to form; it goes on waiting, as torch does, up to the process " in (
        waiting.report("warning", 300.4)
    )
    assert "waited the process group's whole timeout of 1800 s for it to form: torch ends the rank now" in (
        waiting.report("error", 1800.0)
    )
    asked = Watchdog(strategy, _plan(1800.0, {variables.JOIN_TIMEOUT_VARIABLE: "60"}), environ)
    assert "LP033 error: rank 0 of 2" in asked.report()
    assert "waited 60 s for the process group to form (LIGHTNING_PRESETS_JOIN_TIMEOUT) and ends now" in asked.report()


@pytest.mark.distributed
def test_a_collective_entered_by_one_rank_is_reported_with_its_line_and_hook() -> None:
    env = {variables.DIAGNOSE_VARIABLE: "1", variables.COLLECTIVE_TIMEOUT_VARIABLE: "2"}
    start = time.monotonic()
    job = run_job("runtime_jobs:log_on_rank0", path=JOBS, timeout=60, env=env)
    assert time.monotonic() - start < 45
    assert [rank.status for rank in job.ranks] == ["died", "died"], job.describe()
    report = job.ranks[0].output
    assert "LP034 error: barrier #" in report
    assert "waited more than 2 s (LIGHTNING_PRESETS_COLLECTIVE_TIMEOUT, after the first step)" in report
    assert "entered by rank 0 on node " in report
    assert (
        '`self.log("epoch_loss", torch.tensor(self.losses[-1]), sync_dist=True)` in on_train_epoch_end at '
        "runtime_jobs.py:" in report
    ), report
    assert "never entered by rank 1 on node " in report
    assert "its code is now at `time.sleep(3600)" in report
    assert "LP034 error: rank 1 ends: rank 0 reported a collective" in job.ranks[1].output


@pytest.mark.distributed
def test_a_rank_stuck_in_its_step_while_the_others_wait_in_ddps_reduction_is_reported() -> None:
    """Issue 36: DDP issues its gradient all-reduce from C++, where no wrapper sees it. Rank 1 stays in its third
    training_step (a data source that never returns) while rank 0 waits in that reduction: rank 0, idle in its
    backward pass past the limit, asks the others where they are and reports rank 1's line; both ranks end. Run as a
    script: Lightning's own launcher starts rank 1."""
    env = {variables.DIAGNOSE_VARIABLE: "1", variables.COLLECTIVE_TIMEOUT_VARIABLE: "3"}
    start = time.monotonic()
    job = run_job(str(Path(SCRIPTS_PATH) / "hang_in_step.py"), launcher="fresh", timeout=150, env=env)
    assert time.monotonic() - start < 140, job.describe()  # the report ended it, not the harness
    assert job.outcome == "died", job.describe()
    output = job.stdout
    assert "LP034 error: the backward pass, whose gradient reductions DDP and FSDP issue from C++, in step 3" in output
    assert "waited in by rank 0 on node " in output, output
    assert "never entered by rank 1 on node " in output
    assert "it has done 2 optimizer step(s); its code is now at `inputs = SOURCE.get()" in output
    assert "in training_step at hang_in_step.py:" in output
    assert "LP034 error: rank 1 ends: rank 0 reported" in output
    assert "RESULT" not in output


@pytest.mark.distributed
def test_a_fabric_rank_stuck_before_its_step_is_reported_from_the_others_cxx_collective() -> None:
    """The same through Fabric: rank 0 goes on into the third step's collectives, issued from C++ by DDP (the bucket
    rebuild of its forward pass, then the gradient reduction), while rank 1 waits for a batch that never comes."""
    env = {variables.DIAGNOSE_VARIABLE: "1", variables.COLLECTIVE_TIMEOUT_VARIABLE: "2"}
    job = run_job("runtime_jobs:fabric_stuck", path=JOBS, timeout=60, env=env)
    assert [rank.status for rank in job.ranks] == ["died", "died"], job.describe()
    report = job.ranks[0].output
    assert "issued from C++), in step 3 (the job's default group, 2 ranks): ranks waited in it more than 2 s" in report
    assert "waited in by rank 0 on node " in report
    assert "never entered by rank 1 on node " in report
    assert "it has done 2 optimizer step(s); its code is now at `inputs = source.get()" in report
    assert "LP034 error: rank 1 ends: rank 0 reported" in job.ranks[1].output


@pytest.mark.distributed
def test_a_rank_that_computes_slowly_while_the_others_wait_in_ddps_reduction_trains() -> None:
    """The accepted neighbour of the report above: rank 1 computes for 5 s in its third step while rank 0 waits past
    the 2 s limit in the gradient reduction. Rank 1 is slow, not hung (its process uses the CPU): no report."""
    env = {variables.DIAGNOSE_VARIABLE: "1", variables.COLLECTIVE_TIMEOUT_VARIABLE: "2"}
    job = run_job("runtime_jobs:slow_step", "5", path=JOBS, timeout=120, env=env)
    assert job.outcome == "trained", job.describe()
    assert "LP034" not in job.stdout, job.describe()
    first, second = job.reports()
    assert first["checksum"] == pytest.approx(second["checksum"])


@pytest.mark.distributed
def test_diagnose_mode_never_ends_a_rank_that_writes_a_checkpoint() -> None:
    """Issue 38: rank 0 writes last.ckpt for 5 s (a slow disk: no CPU, the same line) while rank 1 waits in
    Lightning's checkpoint barrier past the 2 s limit. Rank 0 is slow, not hung: no report, the fit completes and
    every rank loads the whole checkpoint."""
    env = {variables.DIAGNOSE_VARIABLE: "1", variables.COLLECTIVE_TIMEOUT_VARIABLE: "2"}
    job = run_job("runtime_jobs:save_slowly", "5", path=JOBS, timeout=120, env=env)
    assert job.outcome == "trained", job.describe()
    assert "LP034" not in job.stdout, job.describe()
    first, second = job.reports()
    assert first["global_step"] == second["global_step"] == 8  # 2 epochs of 4 steps (16 samples per rank)
    assert first["checksum"] == pytest.approx(second["checksum"])


@pytest.mark.distributed
def test_diagnose_mode_leaves_an_agreeing_job_alone() -> None:
    env = {variables.DIAGNOSE_VARIABLE: "1", variables.COLLECTIVE_TIMEOUT_VARIABLE: "30"}
    job = run_job("runtime_jobs:fit", path=JOBS, timeout=120, env=env)
    assert job.outcome == "trained", job.describe()
    assert "LP03" not in job.stdout


# --- the parts ---------------------------------------------------------------------------------------------------


def _print(rank: int, host: str, **fields: tuple[str, str]) -> dict[str, Any]:
    return {"protocol": 1, "rank": rank, "host": host, "fields": fields}


def test_ranks_are_named_in_spans_by_node() -> None:
    assert spans([0, 2, 3, 4, 5, 9]) == "0, 2-5, 9"
    hosts = {rank: ("gpu-a" if rank < 8 else "gpu-b") for rank in range(16)}
    assert on_nodes(range(8, 16), hosts) == "ranks 8-15 on node gpu-b"
    assert on_nodes([0, 9, 10], hosts) == "rank 0 on node gpu-a; ranks 9-10 on node gpu-b"


def test_a_node_of_another_torch_is_named_by_its_ranks_and_values() -> None:
    gathered = [
        _print(rank, "gpu-a" if rank < 8 else "gpu-b", torch=("error", "2.13.0" if rank < 8 else "2.12.1"),
               **{"/dev/shm": ("warning", "64 MiB" if rank == 3 else "32768 MiB")})
        for rank in range(16)
    ]  # fmt: skip
    error, warning = compare(gathered)
    assert (error.code, error.severity) == ("LP030", "error")
    assert "torch: '2.13.0' on ranks 0-7 on node gpu-a but '2.12.1' on ranks 8-15 on node gpu-b" in error.message
    assert (warning.code, warning.severity) == ("LP031", "warning")
    assert "'32768 MiB' on ranks 0-2, 4-7 on node gpu-a; ranks 8-15 on node gpu-b but '64 MiB' on rank 3" in (
        warning.message
    )


def test_agreeing_fingerprints_and_a_variable_set_on_one_rank_only() -> None:
    same = [_print(rank, "a", precision=("error", "32-true")) for rank in range(2)]
    assert compare(same) == []
    one = [same[0], _print(1, "a", precision=("error", "32-true"), **{"$NCCL_PROTO": ("error", "LL")})]
    [finding] = compare(one)
    assert "$NCCL_PROTO: '(not set)' on rank 0 on node a but 'LL' on rank 1 on node a" in finding.message


def test_a_function_argument_is_compared_by_its_name_not_its_address() -> None:
    """``parallelize_fn=`` in a job that Lightning's launcher started: each process holds the function at its own
    address, and a legal job must not be refused for that."""

    def make() -> Any:
        def parallelize(model: Any, mesh: Any) -> Any:
            return model

        return parallelize

    here, there = make(), make()
    assert repr(here) != repr(there)  # two objects, at two addresses, as in two processes
    assert _digest({"parallelize_fn": here}) == _digest({"parallelize_fn": there})

    def other(model: Any, mesh: Any) -> Any:
        return model

    assert _digest({"parallelize_fn": other}) != _digest({"parallelize_fn": here})  # another function still differs


_SETS_JOB = """
import functools, json
from lightning_presets.guards.runtime.handshake import _digest

class EncoderLayer: pass
class DecoderLayer: pass
class WrapPolicy:  # an object whose own repr prints a set, as torch's ModuleWrapPolicy's does
    def __init__(self, classes): self.classes = set(classes)
    def __repr__(self): return f"WrapPolicy({self.classes})"
def parallelize(model, mesh, blocks=()): return model

blocks = set(BLOCKS.split(","))
options = {
    "parallelize_fn": functools.partial(parallelize, blocks=blocks),  # tp2d_hybrid, target="fabric"
    "activation_checkpointing_policy": {EncoderLayer, DecoderLayer},  # FSDP1
    "auto_wrap_policy": WrapPolicy(blocks),
    "checkpoint_blocks": frozenset(blocks),  # DeepSpeed
    "resolved config": {"zero_optimization": {"stage": 3}, "names": [blocks, (1, None)]},
}
DIGEST = json.dumps({"digest": _digest(options), "repr": repr(blocks)})
"""


def _digest_in_a_fresh_interpreter(seed: str) -> dict[str, str]:
    code = f"BLOCKS = 'Stem,Block,Head'\n{_SETS_JOB}\nprint(DIGEST)"
    result = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": seed},
                            capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def _digest_here(blocks: str) -> str:
    namespace: dict[str, Any] = {"__name__": "__main__", "BLOCKS": blocks}  # the classes' module, as in `python -c`
    exec(compile(_SETS_JOB, "<sets>", "exec"), namespace)
    return str(json.loads(namespace["DIGEST"])["digest"])


def test_set_valued_arguments_digest_the_same_in_processes_of_other_string_hashes() -> None:
    """Issue 37: ``parallelize_fn=functools.partial(parallelize, blocks={"Stem", "Block", "Head"})`` made LP030
    refuse about every other launch, because a set's repr follows its members' hashes, which differ between the
    interpreters a launcher starts (``PYTHONHASHSEED``, addresses). Two fresh interpreters whose sets print in
    another order (the seeds are chosen so) digest the same arguments to the same value, as this one does; other
    blocks still differ."""
    first, second = _digest_in_a_fresh_interpreter("0"), _digest_in_a_fresh_interpreter("2")
    assert first["repr"] != second["repr"]  # the two processes order the set differently, as two launched ranks may
    assert first["digest"] == second["digest"] == _digest_here("Stem,Block,Head")
    assert _digest_here("Stem,Block") != first["digest"]  # another setting differs


def test_the_canonical_form_sorts_sets_and_names_code_by_module_and_qualified_name() -> None:
    assert canonical({"b": frozenset({3, 1, 2}), "a": [{"y", "x"}, (None, 1.5)]}) == (
        "{'a': [set({'x', 'y'}), (None, 1.5)], 'b': frozenset({1, 2, 3})}"
    )
    assert canonical(functools.partial(spans, [1], key={2})) == (
        "functools.partial(lightning_presets.core.ranks.spans, [1], key=set({2}))"
    )
    assert canonical(torch.nn.Linear) == "torch.nn.modules.linear.Linear"
    assert canonical(PresetWarning("x").with_traceback) == "PresetWarning('x').with_traceback"
    assert canonical(_Strategy(None, 2).__init__) == "<test_runtime_guards._Strategy>.__init__"  # no address
    assert canonical(len) == "builtins.len"
    policy = ModuleWrapPolicy({torch.nn.Linear, torch.nn.Conv2d, torch.nn.ReLU})  # its repr: the set in hash order
    assert canonical(policy) == (
        "<torch.distributed.fsdp.wrap.ModuleWrapPolicy>(set({torch.nn.modules.activation.ReLU, "
        "torch.nn.modules.conv.Conv2d, torch.nn.modules.linear.Linear}))"
    )


class _Executes:
    """A pickle that runs code when it is loaded."""

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (_execute, ("executed",))


_EXECUTED: list[str] = []


def _execute(word: str) -> None:
    _EXECUTED.append(word)


def test_the_handshake_reads_json_only_and_never_executes_what_a_peer_sends() -> None:
    """Issue 38: the handshake ran ``pickle.loads`` on its peers' bytes. The payload is JSON now: a pickle (of an old
    version, or one built to run code) is refused unread, and nothing in it runs."""
    mine = Fingerprint(rank=1, host="a", fields={"precision": ("error", "32-true")})
    assert decode(encode(mine)) == {
        "protocol": 2,
        "rank": 1,
        "host": "a",
        "fields": {"precision": ["error", "32-true"]},
    }
    payload = {"protocol": 2, "rank": 1, "host": "a", "fields": {"x": ("error", _Executes())}}
    for data in (pickle.dumps(_Executes()), pickle.dumps(payload), b"\x80\x04not json", b'{"protocol": 1}',
                 b'{"protocol": 2, "rank": 0, "host": "a", "fields": {"x": {"y": 1}}}'):  # fmt: skip
        assert decode(data) is None, data
    assert _EXECUTED == []
    pickle.loads(pickle.dumps(_Executes()))
    assert _EXECUTED == ["executed"]  # what `pickle.loads` would have done with the first payload
    gathered = [decode(encode(mine)), decode(encode(Fingerprint(0, "a", {"precision": ("error", "bf16-mixed")})))]
    [finding] = compare([each for each in gathered if each is not None])
    assert "precision: 'bf16-mixed' on rank 0 on node a but '32-true' on rank 1 on node a" in finding.message


def test_our_own_failure_in_the_handshake_is_a_warning_never_an_error() -> None:
    """No process group here: the handshake's own call fails, and the run would go on."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        handshake(object())
    [warning] = [each.message for each in caught if isinstance(each.message, PresetWarning)]
    assert warning.finding.code == "LP032"
    assert "the run goes on" in warning.finding.message


class _Strategy:
    def __init__(self, accelerator: Any, processes: int, nodes: int = 1) -> None:
        self.accelerator, self.num_processes, self.num_nodes = accelerator, processes, nodes


def test_single_device_and_xla_strategies_are_skipped() -> None:
    CPUAccelerator = type("CPUAccelerator", (), {})  # read by its class name, as Lightning's are

    assert distributed(_Strategy(CPUAccelerator(), 2))
    assert not distributed(_Strategy(CPUAccelerator(), 1))
    assert distributed(_Strategy(CPUAccelerator(), 1, nodes=2))
    assert not distributed(_Strategy(type("XLAAccelerator", (), {})(), 8))
    assert not distributed(object())


def test_the_variables_and_their_unknown_values() -> None:
    assert variables.handshake_enabled({})
    assert not variables.handshake_enabled({variables.HANDSHAKE_VARIABLE: "0"})
    assert variables.join_timeout({}) == variables.JOIN_TIMEOUT_DEFAULT
    assert variables.join_timeout({variables.JOIN_TIMEOUT_VARIABLE: "2.5"}) == 2.5
    assert not variables.diagnose_enabled({})
    env = {variables.DIAGNOSE_VARIABLE: "maybe", variables.COLLECTIVE_TIMEOUT_VARIABLE: "-1"}
    assert variables.collective_timeout(env) == variables.COLLECTIVE_TIMEOUT_DEFAULT
    findings = variables.variable_findings(env)
    assert [finding.code for finding in findings] == ["LP017", "LP017"]
    assert "LIGHTNING_PRESETS_DIAGNOSE='maybe'" in findings[0].message
    assert "0, false, no, off" in findings[0].hint
    assert "a number of seconds" in findings[1].hint


def test_the_report_names_a_rank_in_another_collective_and_one_that_never_answered() -> None:
    site = {"where": "train.py:87", "code": "self.log('x', v, sync_dist=True)", "hook": "on_train_epoch_end"}
    other = {"where": "train.py:40", "code": "loss.backward()", "hook": "training_step"}
    hung = {"op": "all_reduce", "group": [0, 1, 2], "seq": 7, "site": site}
    answers = {
        0: {"host": "a", "current": hung, "last": None},
        1: {"host": "a", "current": {**hung, "op": "barrier", "site": other}, "last": None},
    }
    text = describe(hung, answers, {}, 5, True)
    assert text.startswith("LP034 error: all_reduce #7 of the job's default group (3 ranks) waited more than 5 s")
    assert (
        "entered by rank 0 on node a: `self.log('x', v, sync_dist=True)` in on_train_epoch_end at train.py:87" in text
    )
    assert "never entered by rank 1 on node a: no collective yet; it waits in barrier #7 instead" in text
    assert "rank 2 on node ?: never entered it, and never answered" in text


@NEEDS_HANDSHAKE
@pytest.mark.distributed
def test_a_checkpoint_on_one_node_only_is_refused_before_it_is_read() -> None:
    job = run_job("runtime_jobs:resume_node_local", path=JOBS, timeout=120)
    errors = job.errors()
    assert sorted(errors) == [0, 1], job.describe()
    message = errors[1]["message"]
    assert message.startswith("[LP030]"), message
    assert "checkpoint: 'present' on rank 0 on node " in message
    assert "but 'absent' on rank 1 on node " in message


@NEEDS_HANDSHAKE
@pytest.mark.distributed
def test_ranks_that_resume_from_copies_at_paths_of_their_own_train() -> None:
    """LP030's accepted neighbour: the checkpoint path may differ per rank (each node's local copy, at a path of its
    own); what must agree is that every rank sees a checkpoint. The job resumes and trains its second epoch."""
    job = run_job("runtime_jobs:resume_rank_paths", path=JOBS, timeout=180)
    assert job.outcome == "trained", job.describe()
    assert "LP030" not in job.stdout, job.describe()
    first, second = job.reports()
    assert first["path"] != second["path"]
    assert len(first["losses"]) == len(second["losses"]) == 4  # the second epoch only: it resumed
    assert first["checksum"] == pytest.approx(second["checksum"])


def test_the_collective_limit_is_long_until_the_first_step_then_the_variable() -> None:
    from lightning_presets.diagnose.hangs import Monitor, Recorder

    recorder = Recorder()
    monitor = Monitor(recorder, rank=0, world=2, setup_limit=1620.0, step_limit=5.0)
    assert monitor.limit() == 1620.0
    recorder.first_step_done = True
    assert monitor.limit() == 5.0
    assert Monitor(recorder, rank=0, world=2, setup_limit=1620.0, step_limit=0.0).limit() == 1620.0  # 0: off
