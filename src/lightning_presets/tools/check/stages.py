"""The preset's stages after ``check`` has built the job: ``trainer`` (on the built Trainer), ``resume``
(``--resume-from``) and, for ``--model``, the model-, setup- and optimizer-stage rules decided on the user's model.

The model stages, before launch:

A real run decides these rules in the training processes (Trainer: when ``fit`` connects the model, when
``configure_model`` has run, when ``configure_optimizers`` has returned; Fabric: in ``setup``). FSDP and DeepSpeed
jobs never get there without GPUs, so ``check`` builds the model here, under fake tensors (shapes, no memory), and runs
the same rules on the same snapshot the construction took. What check cannot run it says: ``configure_model`` needs
the job's process group and device mesh, so the setup-stage rules of a model that defines it stay conditional.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from lightning_presets.core.findings import Finding, PresetConfigError, PresetWarning, UsageError
from lightning_presets.core.rules import Rule, run_rules
from lightning_presets.tools.check import construct as _construct
from lightning_presets.tools.check.request import CheckRequest


@dataclass(frozen=True, slots=True)
class Decided:
    """What the model stages gave: their findings, the codes they decided, and notes on what they could not run."""

    findings: list[Finding] = field(default_factory=list)
    decided: frozenset[str] = frozenset()
    """Codes of the conditional rules that have now been decided (their conditional warnings no longer apply)."""
    notes: list[str] = field(default_factory=list)


def _codes(rules: Sequence[Rule], stage: str) -> set[str]:
    return {each.code for each in rules if each.stage == stage}


@contextlib.contextmanager
def _importable_from_here() -> Iterator[None]:
    """Import ``--model`` from the current directory first, as ``python -m`` would (the console script puts its own
    folder on the path instead); the path is restored afterwards."""
    saved = list(sys.path)
    sys.path.insert(0, os.getcwd())
    try:
        yield
    finally:
        sys.path[:] = saved


def model_stage_findings(
    strategy: Any, spec: str, optimizer: str = "adamw", call: str = "", built: Any = None
) -> Decided:
    """Build ``spec`` (``MODULE:FACTORY``) under fake tensors and run the preset's model-stage rules on it, the setup
    rules when nothing is left for ``configure_model`` to build, and the optimizer rules on what
    ``configure_optimizers`` returns (``optimizer`` when the model has none). ``ModelError`` (from the plan's loader)
    when the model cannot be built."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from lightning_presets.inspection.hooks import overrides  # imports torch: only for --model
    from lightning_presets.tools.check.fit_start import fit_start_findings
    from lightning_presets.tools.check.unused import unused_parameter_findings
    from lightning_presets.tools.simulation import user_model

    preset = getattr(strategy, "_lp_preset", None)
    context = getattr(strategy, "_lp_context", None)
    if preset is None or context is None:
        return Decided()
    rules: tuple[Rule, ...] = preset.rules
    call = call or f"strategy={preset.name!r}"  # the user's call, as the check's findings repeat it
    with _importable_from_here():
        factory = user_model.load_factory(spec)
    notes: list[str] = []
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = user_model.build(factory, spec)
        findings = run_rules(rules, "model", context, model)
        decided = _codes(rules, "model")
        if overrides(model, "configure_model"):
            setup = sorted(_codes(rules, "setup"))
            if setup:
                notes.append(f"--model {spec}: {type(model).__name__} builds part of itself in configure_model, "
                             "which needs the job's process group: the setup rules "
                             f"({', '.join(setup)}) decide when fit runs it")  # fmt: skip
        else:
            findings += run_rules(rules, "setup", context, model)
            decided |= _codes(rules, "setup")
        if _codes(rules, "optimizers"):
            try:
                optimizers = user_model.optimizers(model, spec, optimizer)
            except user_model.ModelError as error:
                notes.append(f"{error}: the optimizer rules decide when fit runs configure_optimizers")
            else:
                findings += run_rules(rules, "optimizers", context, model, tuple(optimizers))
                decided |= _codes(rules, "optimizers")
        if not overrides(model, "configure_model"):  # the step needs the whole model
            found, more = unused_parameter_findings(context, model, spec, call)
            findings += found
            notes += more
        if not any(each.severity == "error" for each in findings):  # fit would not start with those
            findings += fit_start_findings(built, model, spec, call)
    return Decided(findings=findings, decided=frozenset(decided), notes=notes)


def trainer_findings(outcome: _construct.Outcome) -> list[Finding]:
    """The preset's ``trainer``-stage rules on the built Trainer (e.g. DeepSpeed's batch arithmetic)."""
    check = getattr(outcome.strategy, "_lp_check_trainer", None)
    if outcome.built is None or check is None:
        return []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check(outcome.built)
        except PresetConfigError as error:
            return list(error.findings)
    return [record.message.finding for record in caught if isinstance(record.message, PresetWarning)]


def resume_findings(request: CheckRequest, outcome: _construct.Outcome) -> list[Finding]:
    """``--resume-from``: the preset's resume rules on the constructed job, as its ``fit(ckpt_path=...)`` (Fabric:
    ``load``) runs them before loading; a strategy that is not a preset has none."""
    context = getattr(outcome.strategy, "_lp_context", None)
    preset = getattr(outcome.strategy, "_lp_preset", None)
    if request.resume_from is None or context is None or preset is None:
        return []
    from lightning_presets.guards.resume import resume_findings  # imports torch: only when asked

    how = "fit(ckpt_path=...)" if request.mode == "trainer" else "load(...)"
    return resume_findings(request.resume_from, context, strategy=outcome.strategy, how=how, own=preset.rules)


def model_conditions(request: CheckRequest, outcome: _construct.Outcome) -> list[Finding]:
    """Without ``--model``: the conditions every model of the job must meet that construction does not repeat (the
    preset's rules declared ``construction=False``, DDP's gradient for every parameter, what fit refuses under manual
    optimization), each a conditional warning; silence here would read as valid."""
    preset = getattr(outcome.strategy, "_lp_preset", None)
    context = getattr(outcome.strategy, "_lp_context", None)
    if request.model is not None or preset is None or context is None:
        return []
    from lightning_presets.core.rules import conditional_findings
    from lightning_presets.tools.check.fit_start import fit_start_condition
    from lightning_presets.tools.check.unused import unused_parameter_condition

    return [
        *conditional_findings(preset.rules, context, construction=False),
        *unused_parameter_condition(context),
        *(fit_start_condition(context) if outcome.built is not None else []),
    ]


def model_findings(request: CheckRequest, outcome: _construct.Outcome, timeout_s: float | None = None) -> Decided:
    """``--model``: the model rehearsed in a child process (:mod:`.rehearsal`: its factory, set-up and first steps;
    a factory that exits, aborts or never returns is a usage error, never the end of the check), then the preset's
    model-stage rules decided on it (the caller drops the conditional warnings of :attr:`Decided.decided`), then the
    rehearsal's findings where the rules found no error; ``UsageError`` when the model cannot be built."""
    if request.model is None or outcome.built is None:
        return Decided()
    from lightning_presets.tools.check import rehearsal as _rehearsal
    from lightning_presets.tools.simulation.user_model import ModelError

    rehearsed = None
    fabric_job = _fabric_job(request, outcome, timeout_s)  # a Fabric set-up function (rehearsal/fabric.py)
    if fabric_job is not None:
        return fabric_job
    if request.mode == "trainer":
        family = getattr(getattr(outcome.strategy, "_lp_preset", None), "family", None)
        if family is None and "DeepSpeed" in type(outcome.strategy).__name__:
            family = "deepspeed"
        from lightning_presets.tools.check.rehearsal import resume as _resume
        from lightning_presets.tools.check.rehearsal import setup as _setup  # the strategy's set-up stages

        try:
            world = getattr(outcome.strategy, "world_size", 1)
            nodes = getattr(outcome.strategy, "num_nodes", 1)
            with (
                _setup.announced(_setup.job_of(outcome.strategy, request.arguments, request.overrides)),
                _resume.announced(request.resume_from),  # the checkpoint's load, rehearsed (rehearsal/resume.py)
            ):
                rehearsed = _rehearsal.rehearse(request.model, _rehearsal.trainer_arguments(dict(request.arguments)),
                                                family, timeout_s or _rehearsal.DEFAULT_TIMEOUT_S,
                                                world if isinstance(world, int) else 1,
                                                nodes if isinstance(nodes, int) else 1,
                                                datamodule=request.datamodule)  # fmt: skip
        except _rehearsal.RehearsalFailed as error:
            raise UsageError(str(error)) from None
    try:
        decided = model_stage_findings(outcome.strategy, request.model, call=request.call(), built=outcome.built)
    except ModelError as error:
        text = str(error) if str(error).startswith("--model") else f"--model {request.model}: {error}"
        raise UsageError(text) from None
    if rehearsed is None:
        return decided
    notes = [*decided.notes, rehearsal_note(rehearsed, outcome)]
    findings = list(decided.findings)
    if not any(each.severity == "error" for each in findings):  # the same failure, said once
        findings += _rehearsal.findings(rehearsed, request.model, request.call())
    return Decided(findings=findings, decided=decided.decided, notes=notes)


def _fabric_job(request: CheckRequest, outcome: _construct.Outcome, timeout_s: float | None) -> Decided | None:
    """``--mode fabric --model MODULE:FUNCTION`` naming a function that takes the Fabric: the job rehearsed by
    :mod:`.rehearsal.fabric` (``None`` for a model factory, which the model-stage rules decide on)."""
    import os
    import sys

    from lightning_presets.tools.check.rehearsal import fabric, setup
    from lightning_presets.tools.check.rehearsal.findings import Rehearsal, findings
    from lightning_presets.tools.simulation.user_model import ModelError, load_factory

    if request.mode != "fabric" or request.model is None:
        return None
    if os.getcwd() not in sys.path:  # --model imports from the current directory first, as ``python -m`` would
        sys.path.insert(0, os.getcwd())
    try:
        if not fabric.takes_a_fabric(load_factory(request.model)):
            return None
    except ModelError as error:
        raise UsageError(str(error)) from None
    job = setup.job_of(outcome.strategy, request.arguments, request.overrides)
    records = fabric.job_records(request.model, job, request.arguments, timeout_s or fabric.DEFAULT_TIMEOUT_S)
    ran = ", ".join(each.name for each in records if each.outcome == "completed") or "nothing"
    stopped = "; ".join(f"{each.name} ({each.detail or each.exception})" for each in records
                        if each.outcome != "completed")  # fmt: skip
    note = f"Fabric job rehearsed (rank 0, CPU, the job's world size): completed {ran}" + (
        f"; stopped: {stopped}" if stopped else "")  # fmt: skip
    return Decided(findings=findings(Rehearsal(records=tuple(records)), request.model, request.call()), notes=[note])


def rehearsal_note(rehearsed: Any, outcome: _construct.Outcome) -> str:
    """What the rehearsal ran and what it could not: the stages completed, in the check's notes (text and JSON)."""
    done = ", ".join(rehearsed.completed) or "nothing"
    steps = f" (stages: {', '.join(rehearsed.steps)})" if rehearsed.steps else ""
    world = getattr(outcome.strategy, "world_size", None)
    ranks = f"ranks {', '.join(map(str, rehearsed.ranks))} of {world}" if rehearsed.ranks else f"{world or '?'} ranks"
    extra = "; ".join(rehearsed.notes)
    ran = [each.name for each in rehearsed.records if each.outcome == "completed"]  # the strategy's set-up (setup.py)
    extra = "; ".join((f"the strategy's set-up completed: {', '.join(ran)}",) * bool(ran) + ((extra,) if extra else ()))
    missing = "; ".join(rehearsed.not_rehearsed) or (f"{type(outcome.strategy).__name__}'s wrapping on the job's "
                                                     f"{world or '?'} ranks, NCCL itself, CUDA kernels")  # fmt: skip
    fake = any(each.endswith("(under fake tensors)") for each in rehearsed.steps)  # above the real-tensor limit
    how = "plan's training step in one CPU process per rank, fake tensors" if fake else (
        "Lightning's fit in one CPU process per rank, real tensors")  # fmt: skip
    return (f"rehearsal ({rehearsed.seconds:.1f} s, {how}, torch's "
            f"fake process group, {ranks}): completed {done}{steps}{'; ' + extra if extra else ''}; not rehearsed: "
            f"{missing}")  # fmt: skip
