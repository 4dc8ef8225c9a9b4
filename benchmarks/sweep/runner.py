"""One configuration from start to end: the guards' verdict, the unguarded run, its reference, the classification."""

from __future__ import annotations

import json
import shutil
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep import classify, launch, space, verdict

HARNESS_ERROR = "harness_error"
"""The outcome of a configuration the sweep itself failed on (a bug here, not a finding): counted and listed."""


@dataclass
class Options:
    timeout: float = 60.0
    """Seconds a run may take before it counts as a hang."""
    launch: str = "fork"
    """``fork`` (ranks forked from a fork server, started like torchrun) or ``lightning`` (Lightning's launcher)."""
    keep: Path | None = None
    """Keep every run's folder (logs, results) under this path."""


@dataclass
class References:
    """Single-process references by job, so configurations that differ only in distributed settings share one.

    Use it as a context manager: its folder (the references' tensors and logs) is removed at the end.
    """

    folder: Path = field(default_factory=launch.scratch)
    done: dict[str, tuple[dict[str, Any], Path]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __enter__(self) -> References:
        return self

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


_in_process = threading.Lock()
"""The verdicts and the unguarded construction run in this process and switch an environment variable: one at a
time, while the forked runs of several configurations may overlap (``--jobs``)."""


def reference_key(config: dict[str, Any], replicas: int, shuffled: bool) -> str:
    trainer = {k: v for k, v in config["trainer"].items() if k not in ("devices", "use_distributed_sampler")}
    job = {k: v for k, v in config.items() if k in ("architecture", "optimizer", "manual", "plugin")}
    return json.dumps([trainer, job, replicas, shuffled], sort_keys=True)


def reference(
    config: dict[str, Any], replicas: int, shuffled: bool, folder: Path, options: Options, cache: References
) -> dict[str, Any]:
    """The reference's result; its tensors are copied into ``folder`` (``reference.pt``)."""
    key = reference_key(config, replicas, shuffled)
    with cache.lock:
        known = cache.done.get(key)
    if known is None:
        with cache.lock:
            where = cache.folder / f"reference{len(cache.done)}-{threading.get_ident()}"
        where.mkdir()
        processes = launch.run_reference(config, replicas, shuffled, where, options.timeout)
        result = processes.results.get("reference") or {
            "status": "error", "last_line": classify.crash_line(processes) or "the reference did not finish"
        }  # fmt: skip
        known = (result, where)
        with cache.lock:
            cache.done[key] = known
    result, where = known
    if result.get("status") == "ok":
        shutil.copy(where / "reference.pt", folder / "reference.pt")
    for log in where.glob("*.log"):
        shutil.copy(log, folder / log.name)
    return result


def verdicts(config: dict[str, Any]) -> dict[str, Any]:
    """The guards' answers on one configuration, in this process: ``verdict`` (the user's script: construction and
    a dry ``fit``), ``check`` (``lightning-presets check``, no model) and ``check_model`` (``check --model`` on the
    job's own module). They never depend on the real run, which has every guard off."""
    with _in_process:
        return {
            "verdict": verdict.api_verdict(config).as_dict(),
            "check": verdict.check_verdict(config).as_dict(),
            "check_model": verdict.check_verdict(config, model=True).as_dict(),
        }


def run(config: dict[str, Any], options: Options, cache: References) -> dict[str, Any]:
    """Everything known about one configuration, as a JSON-able record."""
    start = time.monotonic()
    record: dict[str, Any] = {
        "id": config["id"],
        "call": space.describe(config),
        "config": {k: v for k, v in config.items() if k not in ("id", "deviations")},
        **verdicts(config),
    }
    with _in_process:
        built = verdict.construct_unguarded(config)
    if built.error is not None:
        outcome = classify.Outcome("crashes", built.error, stage="construction")
        record.update(outcome.as_dict(), seconds=round(time.monotonic() - start, 2))
        return record
    folder = launch.scratch()
    try:
        outcome = _outcome(config, built.world_size or 1, folder, options, cache, record)
    except Exception as error:  # one broken record must not end an hour-long sweep; it is reported instead
        outcome = classify.Outcome(HARNESS_ERROR, verdict.last_line(error))
    finally:
        if options.keep is not None:
            shutil.copytree(folder, options.keep / config["id"], dirs_exist_ok=True)
        shutil.rmtree(folder, ignore_errors=True)
    record.update(outcome.as_dict(), seconds=round(time.monotonic() - start, 2))
    return record


def _outcome(
    config: dict[str, Any], world_size: int, folder: Path, options: Options, cache: References, record: dict[str, Any]
) -> classify.Outcome:
    starter = launch.run_ranks if options.launch == "fork" else launch.run_script
    processes = starter(config, world_size, folder, options.timeout)
    record["world_size"] = world_size
    record["run_seconds"] = round(processes.seconds, 2)
    failed = classify.classify_processes(processes, world_size)
    ranks = [processes.results.get(f"rank{r}", {}) for r in range(world_size)]
    count, shuffled = classify.replicas(ranks[0]) if failed is None else (_expected_replicas(config, world_size), True)
    ref = reference(config, count, shuffled, folder, options, cache)
    record["reference"] = _summary(ref, count)
    passed = sorted({key for rank in ranks for key in rank.get("passed_through", [])})
    if passed:
        record["passed_through"] = passed
    if failed is not None:
        return failed
    if ref.get("status") != "ok":
        return classify.Outcome(
            "trains_wrong", f"plain Lightning refuses this job ({ref.get('last_line')}), the preset run trained"
        )
    expected, left_out = classify.requested(config, ranks), classify.left_out(config, ranks)
    return classify.compare(config, ranks, ref, folder, expected, left_out)


def _expected_replicas(config: dict[str, Any], world_size: int) -> int:
    """The data split a run that died before reporting it would have had (only whether the reference fails
    matters then)."""
    return world_size if config["trainer"].get("use_distributed_sampler", True) else 1


def _summary(result: dict[str, Any], replicas: int) -> dict[str, Any]:
    if result.get("status") != "ok":
        return {"status": "error", "last_line": result.get("last_line")}
    return {
        "status": "diverged" if classify.diverged(result) else "ok",
        "global_batch_ranks": replicas,
        "losses": [round(x, 6) for x in result["losses"]],
        "grad_norms": [round(x, 6) for x in result["grad_norms"]],
        "optimizer_steps": result["optimizer_steps"],
    }


def judge(record: dict[str, Any]) -> str | None:
    """``false_rejection``, ``missed_failure``, ``missed_warning``, ``plain_lightning_failure`` or ``None``.

    A false rejection: a guard error for a job that trains. A missed failure: no guard error and no construction
    error from Lightning, while the run crashes, hangs or trains wrong. Listed apart as a plain-Lightning failure: the
    same, when plain Lightning (the reference) crashes on the job too, or trains it wrong too (its loss goes
    non-finite) while the run trains wrong. A guard error is one the user's script meets (``verdict``) or one
    ``check --model`` reports on the job's own module (``check_model``): what only a training step reveals (a
    parameter DDP waits for, LP732) is decided there, never inside a run; either, on a job that trains, is a false
    rejection.
    """
    rejected = bool(record["verdict"]["errors"]) or bool(record.get("check_model", {}).get("errors"))
    outcome = record["outcome"]
    if outcome == HARNESS_ERROR:
        return None
    if rejected and outcome == "trains":
        return "false_rejection"
    if outcome == "trains" and record.get("left_out") and not record["verdict"].get("warnings"):
        return "missed_warning"  # legal, and a setting silently left out: a warning was owed
    if rejected or outcome == "trains" or record.get("stage") == "construction":
        return None
    reference = record.get("reference", {}).get("status", "ok")
    if reference == "error" or (reference == "diverged" and outcome == "trains_wrong"):
        return "plain_lightning_failure"
    return "missed_failure"
