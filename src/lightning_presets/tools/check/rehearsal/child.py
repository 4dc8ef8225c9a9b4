"""The rehearsal in the child process (:func:`rehearse_in_process`): the user's model built by their factory, then
Lightning's own ``Trainer.fit`` on one CPU device, real tensors, inside torch's fake process group of the job's world
size, to the end of the first epoch (one validation batch, one training batch, the epoch-end hooks), then a checkpoint
save to a scratch folder.

Plug-in stages: where this package holds a module ``setup`` (:data:`SETUP_MODULE`) defining :func:`strategy_stages`'s
signature, the child calls it with the built model before ``fit`` and reports its :class:`~.findings.StageRecord`
list; a record that ``raised`` stops the rehearsal there. Without that module the strategy's wrapping is listed as
not rehearsed.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import os
import time
from types import ModuleType
from typing import Any, cast

from lightning_presets.tools.check.rehearsal.common import _datamodule, _first, _limitation, _rank_zero
from lightning_presets.tools.check.rehearsal.findings import (
    STAGES,
    Rehearsal,
    StageRecord,
)
from lightning_presets.tools.check.rehearsal.findings import user_line as user_line  # the plug-ins read it here

MAX_PARAMETERS = 100_000_000
"""The largest model rehearsed with real tensors (fp32 on the CPU: about 1.6 GiB with gradients and Adam's state); a
larger one is rehearsed under fake tensors (:mod:`.fake`)."""
MAX_PARAMETERS_VARIABLE = "LIGHTNING_PRESETS_REHEARSAL_MAX_PARAMETERS"
"""An environment variable that sets another limit (tests lower it; a fresh interpreter's rehearsal reads it too)."""
SETUP_MODULE = f"{__package__}.setup"
"""The plug-in module the child asks for the strategy's set-up stages (absent: said as not rehearsed)."""


def strategy_stages(model: Any, trainer_kwargs: dict[str, Any], family: str | None, world_size: int,
                    rank: int) -> list[StageRecord]:  # fmt: skip
    """The contract of the plug-in's function of this name (``tools.check.rehearsal.setup.strategy_stages``), called
    in the child with the built ``model`` (a LightningModule, on the CPU, not yet fitted), the Trainer arguments the
    rehearsal uses, the preset's ``family`` (``"ddp"``, ``"fsdp2"``, ``"deepspeed"``, ... or ``None``), the job's
    ``world_size`` and this child's ``rank`` (torch's fake process group of that size and rank exists during the call).

    It runs the strategy's set-up as far as a CPU allows and returns one record per stage, in order: ``completed``;
    ``raised`` (with ``exception``, the user's ``line`` and the ``code`` of a declared error of its range, or no code
    where the rehearsal itself is the limit: reported as LP743); ``not rehearsed`` (``detail``: where and why it
    stopped). The child's own ``fit`` runs after it either way: where that raises the same exception (``TypeName:
    first line``), the failure is not the strategy's, and only the child's stage code (LP740-LP742) is reported for
    it. It must leave ``model`` usable by ``fit`` (set-up on a copy, or undone). With ``check --datamodule``, the
    child passes the built ``LightningDataModule`` as the keyword ``datamodule=`` to a plug-in whose function takes
    it (its batches are the job's); a plug-in that does not take it is not called then (said as not rehearsed).

    This function is the default: nothing rehearsed, said so.
    """
    return [StageRecord(name=f"the {family or 'strategy'}'s wrapping on the job's {world_size} ranks",
                        outcome="not rehearsed", detail="no strategy set-up module in this rehearsal")]  # fmt: skip


def _plugged(stages: Any, model: Any, trainer_kwargs: dict[str, Any], family: str | None, world_size: int, rank: int,
             data: Any) -> list[StageRecord]:  # fmt: skip
    """The plug-in's stages; with a ``--datamodule``, only from a plug-in that takes it (``datamodule=``): one that
    does not would run the model without its batches (said as not rehearsed)."""
    if data is None:
        return list(stages(model, trainer_kwargs, family, world_size, rank))
    if "datamodule" in inspect.signature(stages).parameters:
        return list(stages(model, trainer_kwargs, family, world_size, rank, datamodule=data))
    return [StageRecord(name=f"the {family or 'strategy'}'s set-up on the job's {world_size} ranks",
                        outcome="not rehearsed", detail="its rehearsal takes no --datamodule yet")]  # fmt: skip


def plugin() -> ModuleType | None:
    """The plug-in module :data:`SETUP_MODULE`, or ``None`` where this package has none."""
    try:
        return importlib.import_module(SETUP_MODULE)
    except ModuleNotFoundError as error:
        if error.name != SETUP_MODULE:
            raise
        return None


def rehearse_in_process(
    spec: str, arguments: dict[str, Any], family: str | None = None, world_size: int = 1, rank: int = 0,
    num_nodes: int = 1, datamodule: str | None = None, family_rehearsal: str | None = None,
) -> Rehearsal:  # fmt: skip
    """The rehearsal itself (the child calls it; tests may, in a process that holds no process group), as ``rank``
    of ``world_size`` ranks on ``num_nodes`` nodes; the first batches from the ``datamodule`` built by
    ``MODULE:FACTORY`` when given. ``family_rehearsal`` is the family's ``rehearsal`` field as the parent read it
    (``deepspeed_engine`` adds DeepSpeed's reading of the optimizers; default: read from ``family`` here)."""
    import logging
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    from lightning_presets.tools.simulation import user_model

    started = time.perf_counter()
    notes: list[str] = []
    factory = user_model.load_factory(spec)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:  # count first: no real memory for a model too large
        counted = user_model.build(factory, spec)
        numel = sum(p.numel() for p in counted.parameters())
    limit = int(os.environ.get(MAX_PARAMETERS_VARIABLE) or MAX_PARAMETERS)
    if numel > limit:  # the same step plan traces, on the model just built under fake tensors
        from lightning_presets.tools.check.rehearsal.fake import rehearse_fake

        return rehearse_fake(spec, counted, mode, arguments, _world(world_size, rank), rank, numel, limit, started,
                             datamodule)  # fmt: skip
    del counted
    model = user_model.build(factory, spec)
    from lightning.pytorch import LightningModule

    if not isinstance(model, LightningModule):
        note = f"not rehearsed: {type(model).__name__} is not a LightningModule, so fit has no step of it to run"
        return Rehearsal(notes=(note,), seconds=time.perf_counter() - started, rank=rank)
    trainer_args = dict(arguments)
    precision = str(trainer_args.get("precision", ""))
    if precision.startswith("16"):
        trainer_args["precision"] = "bf16" + precision[2:]
        notes.append(f"precision {precision} rehearsed as {trainer_args['precision']} (a CPU has no float16 autocast)")
    data = _datamodule(datamodule) if datamodule else None
    train, validation, source = _loaders(model, spec, data)
    if not validation:
        notes.append("no first validation step: the model defines no val_dataloader and validation_step")
    recorder = _stages_callback()
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    from lightning.pytorch import Trainer

    from lightning_presets.tools.check.rehearsal import resume
    from lightning_presets.tools.check.rehearsal.collectives import recording

    error: BaseException | None = None
    records: list[StageRecord] = []
    with warnings.catch_warnings(), _rank_zero(rank), recording() as recorded, _scratch() as scratch:
        warnings.simplefilter("ignore")
        try:
            with _world(world_size, rank):  # torch.distributed calls of the user's step see the job's world size
                module = plugin()
                records = _plugged(getattr(module, "strategy_stages", strategy_stages), model, trainer_args, family,
                                   world_size, rank, data)  # fmt: skip
                trainer = Trainer(accelerator="cpu", devices=1, max_epochs=1, max_steps=1, limit_train_batches=1,
                                  limit_val_batches=1, num_sanity_val_steps=1 if validation else 0, logger=False,
                                  enable_checkpointing=False, enable_progress_bar=False, default_root_dir=scratch,
                                  enable_model_summary=False, callbacks=[recorder],
                                  **_ranked(world_size, rank, num_nodes), **trainer_args)  # fmt: skip
                trainer.fit(model, train_dataloaders=train, datamodule=data)
                recorder.steps.append("epoch-end hooks")
                _save(trainer, scratch, recorder, notes)
                if resume.requested():  # --resume-from: the checkpoint's load into a fresh model (rehearsal/resume.py)
                    ranked = _ranked(world_size, rank, num_nodes)
                    build = lambda: user_model.build(factory, spec)  # noqa: E731  (a fresh model to load into)
                    records.append(resume.rehearse_load(build, trainer_args, ranked, scratch, train, data))
        except BaseException as raised:  # the user's code may raise anything, SystemExit included
            error = raised
        calls = list(recorded.calls)
    if error is None and (family_rehearsal or rehearsal_kind(family)) == "deepspeed_engine":
        error = _deepspeed_optimizers(model)
        if error is not None:
            recorder.completed = [each for each in recorder.completed if each != "set-up"]
    completed = tuple(each for each in STAGES if each in recorder.completed)
    seconds = time.perf_counter() - started
    notes.append(f"first batch from {source}")
    missing = [f"{record.name} ({record.detail})" if record.detail else record.name for record in records
               if record.outcome == "not rehearsed"]  # fmt: skip
    done = {"completed": completed, "notes": tuple(notes), "seconds": seconds, "records": tuple(records), "rank": rank,
            "steps": tuple(recorder.steps), "collectives": tuple(calls),
            "not_rehearsed": (*missing, *NOT_ON_CPU)}  # fmt: skip
    if error is None:
        return Rehearsal(**done)  # type: ignore[arg-type]
    limitation = _limitation(error)
    if limitation:
        return Rehearsal(limitation=limitation, **done)  # type: ignore[arg-type]
    if "set-up" in completed and source == "example_input_array":  # forward's input, maybe not the loader's batch
        why = (f"the first training step raised {type(error).__name__}: {_first(error)} on example_input_array, "
               "which Lightning's convention makes the forward's input, not necessarily a batch as the dataloader "
               "yields it; give the model a train_dataloader() to rehearse the step")  # fmt: skip
        return Rehearsal(limitation=why, **done)  # type: ignore[arg-type]
    if "set-up" not in completed:
        stage = "set-up"
    elif validation and "first validation step" not in completed:
        stage = "first validation step"
    else:
        stage = "first training step"
    return Rehearsal(stage=stage, exception=f"{type(error).__name__}: {_first(error)}", line=user_line(error),
                     **done)  # type: ignore[arg-type]  # fmt: skip


NOT_ON_CPU = ("CUDA kernels (the step ran on the CPU, real tensors)",
              "NCCL itself (each rank's collectives ran alone on torch's fake process group)")  # fmt: skip
"""What a CPU rehearsal never runs, said in its output."""


def _save(trainer: Any, scratch: str, recorder: Any, notes: list[str]) -> None:
    """Lightning's checkpoint save of the fitted model into the scratch folder (what the job's first save runs); a
    failure is said, not blamed: the job may never save."""
    try:
        trainer.save_checkpoint(os.path.join(scratch, "rehearsal.ckpt"))
    except Exception as error:  # the hooks' or the state's, said as a note
        where = user_line(error)
        notes.append(f"the checkpoint save raised {type(error).__name__}: {_first(error)}"
                     f"{' at ' + where if where else ''}; a job that saves checkpoints raises it too")  # fmt: skip
        return
    recorder.steps.append("checkpoint save")


@contextlib.contextmanager
def _scratch() -> Any:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="lp-rehearsal-") as folder:
        yield folder


def _ranked(world_size: int, rank: int, num_nodes: int) -> dict[str, Any]:
    """The Trainer's strategy for one rank of a job of ``world_size`` ranks: Lightning's ``DDPStrategy`` whose cluster
    environment names the rank (so ``global_rank``, ``local_rank``, ``node_rank``, ``self.log(sync_dist=True)`` and
    ``self.all_gather`` run as on that rank), its model left unwrapped (DDP's wrapper is the strategy's set-up stage,
    not this one's); one device and no strategy for a job of one rank."""
    if world_size <= 1:
        return {}
    import torch
    from lightning.fabric.plugins.environments import ClusterEnvironment
    from lightning.pytorch.strategies import DDPStrategy

    per_node = max(1, world_size // max(1, num_nodes))

    class Rank(ClusterEnvironment):  # type: ignore[misc]  # Lightning's class, untyped here
        creates_processes_externally = True
        main_address = "127.0.0.1"
        main_port = 0

        @staticmethod
        def detect() -> bool:
            return True

        def world_size(self) -> int:
            return world_size

        def set_world_size(self, size: int) -> None:
            pass

        def global_rank(self) -> int:
            return rank

        def set_global_rank(self, rank: int) -> None:
            pass

        def local_rank(self) -> int:
            return rank % per_node

        def node_rank(self) -> int:
            return rank // per_node

    class Unwrapped(DDPStrategy):  # type: ignore[misc]
        def configure_ddp(self) -> None:
            pass

    devices = [torch.device("cpu")] * per_node
    return {"strategy": Unwrapped(cluster_environment=Rank(), parallel_devices=devices), "num_nodes": num_nodes}


def _world(world_size: int, rank: int = 0) -> contextlib.AbstractContextManager[None]:
    """torch's fake process group of the job's world size, this process ``rank`` (collectives return at once, with
    the right shapes), unless a process group exists already."""
    import torch.distributed as dist

    if world_size <= 1 or not dist.is_available() or dist.is_initialized():
        return contextlib.nullcontext()
    return _fake_world(world_size, rank)


@contextlib.contextmanager
def _fake_world(world_size: int, rank: int) -> Any:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()


def rehearsal_kind(family: str | None) -> str:
    """How the rehearsal sets ``family`` up: its declared :attr:`~lightning_presets.core.family.Family.rehearsal`."""
    from lightning_presets.core.family import Family

    found = Family.of(family)
    if isinstance(found, Family) and found.stand_in:  # a name whose declaration is not imported yet: the catalog's
        from lightning_presets.registry import catalog

        catalog.strategy_catalog()
        found = Family.of(family)
    return str(getattr(found, "rehearsal", "lightning"))


def _deepspeed_optimizers(model: Any) -> BaseException | None:
    """Lightning's ``DeepSpeedStrategy`` reading of the model's optimizers and schedulers (what its set-up runs)."""
    from lightning_presets.registry import private

    try:
        private.deepspeed_init_optimizers(model)
    except Exception as error:
        return error
    return None


def _loaders(model: Any, spec: str, data: Any = None) -> tuple[Any, bool, str]:
    """What fit gets to train on: the ``data`` module's loaders when given, else the model's own dataloader hooks
    (Lightning calls them after ``prepare_data`` and ``setup``, as in the job; one batch of each is used), else a
    loader of its ``example_input_array``; whether it has a validation step to run; where the first batch comes
    from."""
    from lightning.pytorch import LightningDataModule, LightningModule
    from torch.utils.data import DataLoader

    from lightning_presets.tools.simulation.user_model import ModelError

    def overridden(name: str, owner: Any = model, base: type = LightningModule) -> bool:
        return getattr(type(owner), name, None) is not getattr(base, name)

    if data is not None:
        validation = overridden("val_dataloader", data, LightningDataModule) and overridden("validation_step")
        return None, validation, f"{type(data).__name__}.train_dataloader()"
    validation = overridden("val_dataloader") and overridden("validation_step")
    if overridden("train_dataloader"):
        return None, validation, f"{type(model).__name__}.train_dataloader()"
    if getattr(model, "example_input_array", None) is not None:
        return DataLoader(cast(Any, [model.example_input_array]), batch_size=None), validation, "example_input_array"
    raise ModelError(f"--model {spec}: {type(model).__name__} has neither a train_dataloader() nor an "
                     "example_input_array, and no --datamodule was given, so there is no batch to rehearse the first "
                     "step with; give --datamodule MODULE:FACTORY, or define one of them (a batch as the dataloader "
                     "yields it, e.g. self.example_input_array = (torch.zeros(8, 32), torch.zeros(8, "
                     "dtype=torch.long)))")  # fmt: skip


STEPS = (
    "fit-start",
    "configure_optimizers",
    "sanity validation step",
    "training step",
    "backward",
    "optimizer step",
    "epoch-end hooks",
    "checkpoint save",
)
"""The finer stages a rehearsal lists as completed, in order."""


def _stages_callback() -> Any:
    from lightning.pytorch import Callback

    class Stages(Callback):  # type: ignore[misc]  # Lightning's class, untyped here
        def __init__(self) -> None:
            self.completed: list[str] = []
            self.steps: list[str] = []

        def mark(self, name: str) -> None:
            if name not in self.steps:
                self.steps.append(name)

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.completed.append("set-up")
            self.mark("fit-start")
            self.mark("configure_optimizers")

        def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
            self.completed.append("first validation step")
            self.mark("sanity validation step")

        def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
            self.mark("training step")

        def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
            self.mark("backward")

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            self.mark("training step")
            if trainer.global_step >= 1:  # an optimizer stepped (not with gradient accumulation's first batch)
                self.mark("optimizer step")

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.completed.append("first training step")

    return Stages()
