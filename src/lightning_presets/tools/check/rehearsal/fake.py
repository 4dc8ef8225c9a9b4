"""The rehearsal of a model too large for real tensors on a CPU (over :data:`.child.MAX_PARAMETERS` parameters):
the same first training step ``plan`` traces, through the same simulation layer (:mod:`lightning_presets.tools.
simulation`: the user-model loader, :mod:`~lightning_presets.tools.simulation.step`'s loss as Lightning's automatic
optimization reads it and its precision contexts, the tracing patches, the untraceable-operation explanations), under
fake tensors (shapes and dtypes, no data: a 70B model costs no memory) inside torch's fake process group of the job's
world size, as one of its ranks.

What runs: the model the user's factory builds (under the fake mode); ``configure_model`` where the module defines it
(as a strategy without a device mesh calls it); ``configure_optimizers`` with the real optimizer classes over the
fake parameters; the first batch of the model's own ``train_dataloader()`` (made fake), else its
``example_input_array``; ``training_step`` under the precision plugin's forward context, the loss Lightning reads
from its output, ``zero_grad``, backward and the optimizer step. Not run here (said in the output): Lightning's
``Trainer`` (its fit-start validation, its reading of the schedulers, ``self.log``'s result collection), the first
validation step and the checkpoint save.

An exception of torch, Lightning or the user's code is blamed on its stage as on the real-tensor path (LP740 at
set-up, LP741 in the training step); an operation fake tensors cannot run (one whose result depends on values, an
operator with no fake kernel) is the rehearsal's own limit (LP743), never blamed on the user.
"""

from __future__ import annotations

import contextlib
import resource
import time
import warnings
from types import SimpleNamespace
from typing import Any, cast

from lightning_presets.tools.check.rehearsal.findings import STAGES, Rehearsal, user_line

UNDER_FAKE = "under fake tensors"
"""How the stages of this path are named in the notes (the stages completed ``under fake tensors``)."""
NOT_UNDER_FAKE = (
    "the strategy's wrapping on the job's ranks (DDP, FSDP2, DeepSpeed: plan --model traces it under fake tensors)",
    "Lightning's Trainer under fake tensors (fit-start validation, its reading of the schedulers, self.log's results)",
    "the first validation step and the checkpoint save (not run under fake tensors)",
)  # fmt: skip
NOT_ON_CPU = ("CUDA kernels (the step ran on fake tensors: shapes and dtypes, no values)",
              "NCCL itself (each rank's collectives ran alone on torch's fake process group)")  # fmt: skip


def _precision(arguments: dict[str, Any], notes: list[str]) -> str:
    from lightning_presets.tools.simulation import step

    precision = str(arguments.get("precision") or "32-true")
    try:
        step.precision_dtypes(precision.replace("16-", "bf16-") if precision.startswith("16") else precision, "true")
    except KeyError:  # a plugin's precision (transformer-engine, ...): the step in fp32
        notes.append(f"precision {precision} rehearsed as 32-true (fake tensors run torch's own dtypes only)")
        return "32-true"
    if precision.isdigit() or precision in ("bf16", "16"):
        precision = f"{precision}-true" if precision in ("32", "64") else f"{precision}-mixed"
    if precision.startswith("16"):
        notes.append(f"precision {precision} rehearsed as bf16{precision[2:]} (a CPU has no float16 autocast)")
        precision = "bf16" + precision[2:]
    return precision


def _fake_limit(error: BaseException) -> str:
    """Why ``error`` is fake tensors' limit (a value that does not exist, an operator without a fake kernel), or
    empty."""
    from torch._subclasses.fake_tensor import UnsupportedOperatorException

    from lightning_presets.tools.simulation.untraceable import untraceable_reason

    reason = untraceable_reason(error)
    if reason:
        return f"under fake tensors (shapes, no values) the step stopped because {reason}"
    if isinstance(error, UnsupportedOperatorException) or "fake" in type(error).__name__.lower():
        where = user_line(error)
        return (f"fake tensors cannot run {getattr(error, 'func', '') or type(error).__name__} "
                f"({type(error).__name__}: {_first(error)}){' at ' + where if where else ''}")  # fmt: skip
    return ""


def _first(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else ""


def _first_batch(model: Any, spec: str, mode: Any, datamodule: str | None) -> tuple[Any, str]:
    """The first batch of the ``--datamodule``'s or the model's own ``train_dataloader()`` (loaded with real tensors,
    as the job loads it, then made fake), else the model's ``example_input_array``."""
    import torch
    from lightning.pytorch import LightningModule
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.utils._pytree import tree_map_only

    from lightning_presets.tools.simulation import user_model

    owner: Any = None
    with unset_fake_temporarily():
        if datamodule:
            from lightning_presets.tools.check.rehearsal.common import _datamodule

            owner = _datamodule(datamodule)
        elif type(model).train_dataloader is not LightningModule.train_dataloader:
            owner = model
        if owner is not None:
            owner.prepare_data()
            owner.setup("fit")
            batch = next(iter(owner.train_dataloader()))
    if owner is not None:
        return tree_map_only(torch.Tensor, mode.from_tensor, batch), f"{type(owner).__name__}.train_dataloader()"
    found = user_model.batch(model, spec)
    return found.value, found.source


def rehearse_fake(
    spec: str, model: Any, mode: Any, arguments: dict[str, Any], world: contextlib.AbstractContextManager[Any],
    rank: int, numel: int, limit: int, started: float, datamodule: str | None = None,
) -> Rehearsal:  # fmt: skip
    """Rehearse ``model`` (built by the user's factory under the fake mode ``mode``, ``numel`` parameters, above the
    real-tensor ``limit``) as ``rank`` inside ``world`` (the job's fake process group, entered here)."""
    import torch
    from lightning.pytorch import LightningModule

    from lightning_presets.tools.check.rehearsal.collectives import recording
    from lightning_presets.tools.simulation import step, user_model
    from lightning_presets.tools.simulation.tracing import as_on_a_real_run
    from lightning_presets.tools.simulation.untraceable import answering_scalars

    notes = [f"rehearsed {UNDER_FAKE}: the model has {numel:,} parameters, above the {limit:,} a CPU rehearsal runs "
             "with real tensors; the same step plan traces (shapes and dtypes, no values)"]  # fmt: skip
    model, _ = step.uncompiled(model)
    if not isinstance(model, LightningModule):
        note = f"not rehearsed: {type(model).__name__} is not a LightningModule, so fit has no step of it to run"
        return Rehearsal(notes=(note,), seconds=time.perf_counter() - started, rank=rank)
    precision = _precision(arguments, notes)
    compute = "autocast" if precision.endswith("-mixed") else "true"
    convert, _ = step.precision_dtypes(precision, compute)
    completed: list[str] = []
    steps: list[str] = []
    stage = "set-up"
    error: BaseException | None = None
    source = ""
    with contextlib.ExitStack() as stack:
        stack.enter_context(warnings.catch_warnings())
        warnings.simplefilter("ignore")
        stack.enter_context(_rank_zero(rank))
        recorded = stack.enter_context(recording())
        try:
            stack.enter_context(world)
            stack.enter_context(as_on_a_real_run())
            stack.enter_context(mode)
            stack.enter_context(step.eager())
            if type(model).configure_model is not LightningModule.configure_model:
                with answering_scalars():
                    model.configure_model()
                steps.append("configure_model")
            if convert is not None:  # the precision plugin's conversion of the module (HalfPrecision)
                model.to(convert)
            model.train()
            config = model.configure_optimizers()  # the user's own call: its exception keeps their line
            reading = cast(Any, SimpleNamespace(configure_optimizers=lambda: config))
            optimizers = user_model.optimizers(reading, spec, "adamw")
            steps.append("configure_optimizers")
            completed.append("set-up")
            stage = "first training step"
            batch, source = _first_batch(model, spec, mode, datamodule)
            context, _ = step.forward_context(precision, compute)
            with context:
                loss = step.loss(model, user_model.Batch(batch, source), through_root=False, spec=spec)
            steps.append("training step")
            for optimizer in optimizers:  # Lightning's zero_grad: after the step function, before backward
                optimizer.zero_grad()
            torch.autograd.backward(loss)
            steps.append("backward")
            for optimizer in optimizers:
                optimizer.step()
            steps.append("optimizer step")
            completed.append("first training step")
        except BaseException as raised:  # the user's code may raise anything, SystemExit included
            error = raised
        calls = list(recorded.calls)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    notes.append(f"the rehearsal's process peaked at {peak:.2f} GiB resident")
    if source:
        notes.append(f"first batch from {source}")
    done = {"completed": tuple(each for each in STAGES if each in completed), "notes": tuple(notes), "rank": rank,
            "seconds": time.perf_counter() - started, "steps": tuple(f"{each} ({UNDER_FAKE})" for each in steps),
            "collectives": tuple(calls), "not_rehearsed": (*NOT_UNDER_FAKE, *NOT_ON_CPU)}  # fmt: skip
    if error is None:
        return Rehearsal(**done)  # type: ignore[arg-type]
    from lightning_presets.tools.check.rehearsal.common import _limitation

    limitation = _fake_limit(error) or _limitation(error)
    if limitation:
        return Rehearsal(limitation=limitation, **done)  # type: ignore[arg-type]
    if isinstance(error, user_model.ModelError):  # Lightning's reading of the step's output, said by plan's step
        return Rehearsal(stage=stage, exception=f"MisconfigurationException: {_first(error)}", line="",
                         **done)  # type: ignore[arg-type]  # fmt: skip
    return Rehearsal(stage=stage, exception=f"{type(error).__name__}: {_first(error)}", line=user_line(error),
                     **done)  # type: ignore[arg-type]  # fmt: skip


@contextlib.contextmanager
def _rank_zero(rank: int) -> Any:
    from lightning_presets.tools.check.rehearsal.common import _rank_zero as ranked

    with ranked(rank):
        yield
