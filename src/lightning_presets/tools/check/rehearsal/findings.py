"""The rehearsal's codes, what a rehearsal reports (:class:`Rehearsal`) and the check's findings from it."""

from __future__ import annotations

import os
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import lightning_presets
from lightning_presets.core.codes import Code
from lightning_presets.tools.check.request import COMMAND as CHECK

_FIXED = f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:Classifier"

SETUP_FAILS = Code(
    code="LP740", severity="error", stage="check",
    title="the job's set-up raises on the user's model (optimizers, schedulers, fit-start validation)",
    evidence="runtime: Lightning's fit raises while it sets up the model's optimizers and schedulers, on every rank, "
    "before the first step",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:PlateauNoMonitor   "
    "# ReduceLROnPlateau without a monitor",
    fixed=_FIXED,
)  # fmt: skip
TRAINING_STEP_FAILS = Code(
    code="LP741", severity="error", stage="check",
    title="the first training step raises on the user's model (training_step, its output, self.log, backward, "
    "the optimizer or scheduler step)",
    evidence="runtime: Lightning's fit raises in the first training step, on every rank",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:UnpackThree   "
    "# x, y = batch on a batch of three",
    fixed=_FIXED,
)  # fmt: skip
VALIDATION_STEP_FAILS = Code(
    code="LP742", severity="error", stage="check",
    title="the first validation step (fit's sanity check) raises on the user's model",
    evidence="runtime: Lightning's fit raises in the sanity check's validation_step, on every rank, before training",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:ValidationUnpack",
    fixed=_FIXED,
)  # fmt: skip
NOT_REHEARSED = Code(
    code="LP743", severity="warning", stage="check",
    title="check --model could not rehearse (all of) the job's set-up and first step",
    fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:UsesCuda   "
    "# training_step calls .cuda()",
    fixed=_FIXED,
)  # fmt: skip
RANKS_DISAGREE = Code(
    code="LP744", severity="error", stage="check",
    title="the ranks enter different collectives: one some ranks enter and others do not, or with different shapes "
    "or dtypes (a rank-0-only self.log(..., sync_dist=True) or all_gather)",
    evidence="runtime: a 2-process gloo run of the same model waits in the collective rank 0 entered alone until the "
    "process group's timeout",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:RankZeroSyncLog   "
    "# if self.global_rank == 0: self.log('x', v, sync_dist=True)",
    fixed=_FIXED,
)  # fmt: skip
CODES: tuple[Code, ...] = (SETUP_FAILS, TRAINING_STEP_FAILS, VALIDATION_STEP_FAILS, NOT_REHEARSED, RANKS_DISAGREE)

STAGES = ("set-up", "first validation step", "first training step")
"""The stages a failure is blamed on (each has its code); :attr:`Rehearsal.steps` lists the finer ones completed."""
_BY_STAGE = dict(zip(STAGES, (SETUP_FAILS, VALIDATION_STEP_FAILS, TRAINING_STEP_FAILS), strict=True))

FORKED_CHILD = "LIGHTNING_PRESETS_REHEARSAL_FORKED"
"""Set in a forked rehearsal child: a process that ends with the rehearsal, so nothing of it needs putting back (and
torch's C++ caches may hold a lock another thread of the parent held at the fork)."""
FORKED_AUTOGRAD = "autograd's threads do not survive a fork"
"""The limitation a forked rehearsal reports when the checking process had run autograd before (torch refuses the
backward pass in such a child): the rehearsal is then run in a fresh interpreter instead."""


class RehearsalFailed(Exception):
    """The model could not be rehearsed at all: its factory or module failed, exited, aborted or never returned (the
    message says which; the check's usage error)."""


class RehearsalCrashed(RehearsalFailed):
    """The rehearsal's process ended by a signal nobody here sent: the model's code, or a fork of a process whose
    other threads held a lock (rare, and not the user's): the rehearsal is tried once more before this is said."""


@dataclass(frozen=True, slots=True)
class StageRecord:
    """One stage a plug-in module ran in the child (see :func:`.child.strategy_stages`): its name (``"fully_shard
    on the fake mesh"``), what came of it and, where it raised, the exception, the user's line and the code to
    report (a declared error code of the plug-in's own range; empty: the stage raised where the rehearsal itself
    is the limit, reported as LP743)."""

    name: str
    outcome: str = "completed"
    """``"completed"``, ``"raised"`` or ``"not rehearsed"`` (``detail`` says why and where it stopped)."""
    detail: str = ""
    exception: str = ""
    line: str = ""
    code: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "outcome": self.outcome, "detail": self.detail, "exception": self.exception,
                "line": self.line, "code": self.code}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Rehearsal:
    """What the child reported: the stages it completed, the exception that stopped it (if any) and what it could
    not rehearse."""

    completed: tuple[str, ...] = ()
    """The stages of :data:`STAGES` completed."""
    stage: str | None = None
    """The stage that raised, one of :data:`STAGES`."""
    exception: str = ""
    """``TypeName: first line``."""
    line: str = ""
    """Where in the user's code: ``file:line in function``, or empty when no frame of theirs raised."""
    limitation: str = ""
    """Why the rehearsal could not run or finish (not the user's error)."""
    notes: tuple[str, ...] = field(default=())
    seconds: float = 0.0
    steps: tuple[str, ...] = ()
    """The finer stages completed, in order (fit-start, configure_optimizers, ..., checkpoint save)."""
    not_rehearsed: tuple[str, ...] = ()
    """What this CPU rehearsal did not run (CUDA kernels, NCCL, the strategy's wrapping, ...)."""
    records: tuple[StageRecord, ...] = ()
    """The plug-in stages' records (the strategy's set-up), in order."""
    rank: int = 0
    """The rank rehearsed (of a merged rehearsal: the one whose result it is)."""
    collectives: tuple[dict[str, Any], ...] = ()
    """The collectives this rank entered, in order (:mod:`.collectives`)."""
    ranks: tuple[int, ...] = ()
    """The ranks rehearsed (a merged rehearsal)."""
    disagreements: tuple[str, ...] = ()
    """Where the ranks' collectives disagree, one sentence per rank (a merged rehearsal)."""

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rehearsal:
        return cls(completed=tuple(data.get("completed", ())), stage=data.get("stage"),
                   exception=str(data.get("exception", "")), line=str(data.get("line", "")),
                   limitation=str(data.get("limitation", "")), notes=tuple(data.get("notes", ())),
                   seconds=float(data.get("seconds", 0.0)), steps=tuple(data.get("steps", ())),
                   not_rehearsed=tuple(data.get("not_rehearsed", ())),
                   records=tuple(StageRecord(**each) for each in data.get("records", ())),
                   rank=int(data.get("rank", 0)), collectives=tuple(data.get("collectives", ())),
                   ranks=tuple(data.get("ranks", ())),
                   disagreements=tuple(data.get("disagreements", ())))  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {"completed": list(self.completed), "stage": self.stage, "exception": self.exception,
                "line": self.line, "limitation": self.limitation, "notes": list(self.notes),
                "seconds": self.seconds, "steps": list(self.steps), "not_rehearsed": list(self.not_rehearsed),
                "records": [each.as_dict() for each in self.records], "rank": self.rank,
                "collectives": list(self.collectives), "ranks": list(self.ranks),
                "disagreements": list(self.disagreements)}  # fmt: skip


_NOT_THEIRS = (os.sep + "site-packages" + os.sep, os.sep + "lib" + os.sep + "python", "<frozen ", "<string>")
"""Paths of code that is not the user's: installed packages, the standard library, frozen and generated code."""
_PACKAGE = str(Path(lightning_presets.__file__).resolve().parent)


def theirs(filename: str) -> bool:
    """Whether ``filename`` is the user's code (not torch's, Lightning's, the standard library's or this package's)."""
    return not (filename.startswith(_PACKAGE) or any(part in filename for part in _NOT_THEIRS))


def user_line(error: BaseException) -> str:
    """The innermost frame of ``error``'s traceback in the user's code: ``file:line in function``."""
    found = ""
    for frame in traceback.extract_tb(error.__traceback__):
        if theirs(frame.filename):
            found = f"{shown(frame.filename)}:{frame.lineno} in {frame.name}"
    return found


def shown(name: str) -> str:
    return os.path.relpath(name) if not name.startswith("<") else name


def findings(rehearsal: Rehearsal, spec: str, call: str) -> list[Any]:
    """The check's findings from a rehearsal: an error naming the stage, the exception and the user's line; or the
    warning that it could not (all) run."""
    from lightning_presets.failures import SIGNATURES, matches

    out = []
    where = f" at {rehearsal.line}" if rehearsal.line else ""
    for record in rehearsal.records:
        said = (rehearsal.stage is not None and _same(record.exception, rehearsal.exception)) or (
            bool(record.exception) and record.exception.strip()[:120] in rehearsal.limitation
        )
        if not said:  # the same failure, or the same limit, is said once: by the child's own stage
            out += _record_findings(record, spec, call)
    if rehearsal.stage is not None:
        code = _BY_STAGE[rehearsal.stage]
        known = matches(rehearsal.exception, SIGNATURES)
        hint = (f"{known[0].cause}; {known[0].signature.fix}" if known else
                "change what the exception names (a real run raises it on every rank), then check again")  # fmt: skip
        if rehearsal.rank:  # rank 0 passed: a rank-dependent failure, its peers wait for it in their next collective
            hint = (f"{hint}; only rank {rehearsal.rank} (and ranks whose code runs alike) raises it, rank 0 does not: "
                    "the others wait for it in their next collective")  # fmt: skip
        done = f" (completed: {', '.join(rehearsal.completed)})" if rehearsal.completed else ""
        fake = any(each.endswith("(under fake tensors)") for each in rehearsal.steps)
        how = "plan's training step under fake tensors" if fake else "Lightning's fit"
        rank = f" on rank {rehearsal.rank}" if rehearsal.rank else ""
        out.append(code.finding(
            f"{call} with --model {spec}: the {rehearsal.stage} raises {rehearsal.exception}{where}{rank}; rehearsed "
            f"with {how} in one CPU process per rank{done}", hint))  # fmt: skip
    for sentence in rehearsal.disagreements:
        out.append(RANKS_DISAGREE.finding(
            f"{call} with --model {spec}: {sentence}; rehearsed ranks {', '.join(map(str, rehearsal.ranks))} with "
            "Lightning's fit, each on torch's fake process group",
            "make every rank enter the same collectives with the same shapes: log with sync_dist=True on every rank "
            "(or without sync_dist on rank 0: self.log(..., rank_zero_only=True)), and call all_gather/all_reduce "
            "outside rank-dependent branches"))  # fmt: skip
    if rehearsal.limitation:
        out.append(NOT_REHEARSED.finding(
            f"--model {spec}: {rehearsal.limitation}; rehearsed: {', '.join(rehearsal.completed) or 'nothing'}",
            "the rehearsal's limit, not an error in the job: the rest is decided when the job runs"))  # fmt: skip
    return out


def _same(one: str, other: str) -> bool:
    """Whether two ``TypeName: first line`` texts name the same exception (the first 120 characters agree)."""
    return bool(one) and one.strip()[:120] == other.strip()[:120]


def _record_findings(record: StageRecord, spec: str, call: str) -> list[Any]:
    """A plug-in stage that raised: its own declared code (found among the package's codes), else LP743."""
    if record.outcome != "raised":
        return []
    where = f" at {record.line}" if record.line else ""
    code = _declared(record.code) if record.code else None
    if code is None:
        return [NOT_REHEARSED.finding(f"--model {spec}: {record.name} raised {record.exception}{where}"
                                      f"{'; ' + record.detail if record.detail else ''}",
                                      "the rehearsal's limit, not an error in the job: the rest is decided when "
                                      "the job runs")]  # fmt: skip
    return [code.finding(f"{call} with --model {spec}: {record.name} raises {record.exception}{where}",
                         record.detail or "change what the exception names, then check again")]  # fmt: skip


PLUGINS = ("setup", "fabric", "deepspeed", "resume")
"""The plug-in modules of this package that may declare the codes their stage records name."""


def _declared(code: str) -> Code | None:
    import importlib

    for name in PLUGINS:
        try:
            module = importlib.import_module(f"{__package__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__package__}.{name}":
                raise
            continue
        for value in vars(module).values():
            if isinstance(value, Code) and value.code == code:
                return value
    return None
