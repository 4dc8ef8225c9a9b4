"""The strategy's set-up rehearsed on the job's real sizes (issue 35 item 1): the plug-in the rehearsal's child calls
(:func:`strategy_stages`, the contract in :mod:`.child`).

What runs, for rank ``r`` of the job's ``W`` ranks, in one CPU process: the job's preset strategy itself (built by
``lightning_presets.strategy(name, **overrides)``) in Lightning's own ``Trainer.fit``, on ``accelerator="cpu"``
with the job's ``devices`` and ``num_nodes``, so that Lightning's strategy runs its real set-up on a world of the
real size: its process group and device mesh (``ModelParallelStrategy`` builds a ``DeviceMesh`` of the preset's
sizes on ``"cpu"``), the model's own ``configure_model`` with that mesh, the wrapping (``DistributedDataParallel``
with the preset's options, ``fully_shard`` as the preset shards, ``parallelize_module`` through the user's
``configure_model``), the precision plugin's conversion, ``configure_optimizers`` over the parameters as the
strategy hands them over (DTensor shards under FSDP2 and tensor parallelism), then one training step through the
wrapped model: forward, backward through DDP's reducer or FSDP2's hooks, the optimizer step.

The world: a process group of the real size whose collectives complete at once (:class:`MirrorGroup`: every other
rank holds what this one holds; an all-gather returns this rank's shard repeated, a reduction leaves it unchanged)
and whose futures carry their tensors, which DDP's reducer and its communication hooks need (torch's ``fake``
process group completes them with no value, so DDP's backward fails on it). Values are therefore not the job's;
shapes, dtypes, the wrapping and every exception are. Object collectives (``broadcast_object_list``,
``all_gather_object``) keep this rank's own objects.

A run on a copy of the model (the child's own ``fit`` gets the model untouched). Every stage becomes a
:class:`~.findings.StageRecord`: ``completed``; ``raised`` with the exception, the user's line and :data:`SETUP_FAILS`
(LP750) or :data:`STEP_FAILS` (LP751) when torch, Lightning or the user's code raised; ``raised`` without a code
(reported as LP743, a warning) where the rehearsal itself is the limit (CUDA, an operator the fake world cannot run);
``not rehearsed`` with the reason where a CPU cannot run it (FSDP1's and DeepSpeed's Lightning strategies refuse the
CPU: FSDP1 is rehearsed with torch's own ``FullyShardedDataParallel`` on ``device_id='cpu'`` with the preset's
options, DeepSpeed by :mod:`.deepspeed`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from lightning_presets.tools.check.rehearsal.errors import CODES, SETUP_FAILS, STEP_FAILS, limitation
from lightning_presets.tools.check.rehearsal.errors import _raised as _raised  # the plug-ins' (fabric, deepspeed)
from lightning_presets.tools.check.rehearsal.findings import StageRecord
from lightning_presets.tools.check.rehearsal.fsdp1 import _fsdp1
from lightning_presets.tools.check.rehearsal.job import JOB_VARIABLE, SetupJob, _train_loader, announced, job_of
from lightning_presets.tools.check.rehearsal.job import _first as _first  # the plug-ins' (fabric, deepspeed)
from lightning_presets.tools.check.rehearsal.job import _first_batch as _first_batch  # the deepspeed plug-in's
from lightning_presets.tools.check.rehearsal.job import _strategy as _strategy  # the deepspeed plug-in's
from lightning_presets.tools.check.rehearsal.mirror import WorldUnavailable, mirror_world, unavailable, world_available

__all__ = [  # what check's stages, the plug-ins (fabric, deepspeed) and the tests import from here
    "CODES", "JOB_VARIABLE", "SETUP_FAILS", "STEP_FAILS", "SetupJob", "WorldUnavailable", "announced", "job_of",
    "limitation", "mesh_of", "mirror_world", "rehearse_setup", "strategy_stages", "timed", "unavailable",
    "world_available",
]  # fmt: skip


class _Tracker:
    """Which stage of the strategy's set-up is running: the strategy's own methods, wrapped on the instance."""

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = dict(names)
        self.current = "environment"
        self.done: list[str] = []
        self.wrapped: Any = None
        """The strategy's model as the optimizers see it (DDP's wrapper), and its mesh."""
        self.mesh: Any = None

    def enter(self, stage: str) -> None:
        if self.current not in self.done:
            self.done.append(self.current)
        self.current = stage

    def wrap(self, strategy: Any) -> None:
        setup_environment, setup, setup_optimizers = (strategy.setup_environment, strategy.setup,
                                                      strategy.setup_optimizers)  # fmt: skip

        def environment() -> None:
            setup_environment()
            self.enter("configure_model")

        def whole(trainer: Any) -> None:
            self.enter("wrap")
            setup(trainer)

        def optimizers(trainer: Any) -> None:
            self.enter("optimizers")
            self.wrapped, self.mesh = strategy.model, mesh_of(strategy)
            setup_optimizers(trainer)
            self.enter("after optimizers")

        strategy.setup_environment, strategy.setup, strategy.setup_optimizers = environment, whole, optimizers


def _stage_callback(tracker: _Tracker) -> Any:
    from lightning.pytorch import Callback

    class SetUpStages(Callback):  # type: ignore[misc]  # Lightning's class, untyped here
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            tracker.enter("step")

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            tracker.enter("end")

    return SetUpStages()


def strategy_stages(model: Any, trainer_kwargs: dict[str, Any], family: str | None, world_size: int,
                    rank: int, datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    """The child's plug-in (see :func:`.child.strategy_stages`): the job's strategy from :data:`JOB_VARIABLE`,
    rehearsed by :func:`rehearse_setup` on a copy of ``model`` (its batches from ``datamodule`` when given)."""
    text = os.environ.get(JOB_VARIABLE)
    if not text:
        return [
            StageRecord(
                name=f"the {family or 'strategy'}'s set-up on the job's {world_size} ranks",
                outcome="not rehearsed",
                detail="the job's strategy was not given to the rehearsal",
            )
        ]
    job = SetupJob.from_json(text)
    try:
        copied = copy.deepcopy(model)
    except Exception as error:  # a module holding what deepcopy cannot copy (a lock, a file)
        return [StageRecord(name=f"{job.strategy}'s set-up", outcome="not rehearsed",
                            detail=f"the model cannot be copied ({type(error).__name__}: {_first(error)}), and the "
                            "set-up changes the module it wraps")]  # fmt: skip
    return rehearse_setup(copied, job, trainer_kwargs, rank=rank, datamodule=datamodule)


def rehearse_setup(model: Any, job: SetupJob, trainer_kwargs: Mapping[str, Any] | None = None,
                   rank: int = 0, datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    """The strategy's set-up and one training step of ``model`` (changed in place: pass a copy) as rank ``rank`` of
    ``job``'s world, in a :func:`mirror_world` (any process group of this process is put back after)."""
    import warnings

    from lightning_presets.registry import catalog

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        preset = catalog.strategy_catalog().presets.get(job.strategy)
    how = preset.family.rehearsal if preset is not None else "lightning"  # the family's field, not its name
    if how == "fsdp1" and preset is not None:
        return _fsdp1(model, job, dict(preset.init_params), dict(trainer_kwargs or {}), rank, datamodule)
    if how == "deepspeed_engine":  # its module builds on this one's world: loaded by name, as the child loads plug-ins
        import importlib

        deepspeed = importlib.import_module(f"{__package__}.deepspeed")
        records: list[StageRecord] = deepspeed.rehearse_deepspeed(model, job, trainer_kwargs or {}, rank, datamodule)
        return records
    return _through_lightning(model, job, dict(trainer_kwargs or {}), rank, datamodule)


def _through_lightning(model: Any, job: SetupJob, trainer_kwargs: dict[str, Any], rank: int,
                       datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    import logging
    import warnings

    from lightning.pytorch import Trainer

    from lightning_presets.tools.simulation import step

    precision = str(trainer_kwargs.get("precision", ""))
    if precision.startswith("16"):
        trainer_kwargs["precision"] = "bf16" + precision[2:]
    records: list[StageRecord] = []
    compiled = step.compiled_modules(model)
    tracker = _Tracker({})
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    error: BaseException | None = None
    trainer: Any = None
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        try:
            stack.enter_context(mirror_world(job.world_size, rank, job.devices))
        except WorldUnavailable as unmade:
            return unavailable(job, unmade)
        stack.enter_context(step.eager())
        try:
            trainer = Trainer(strategy=_strategy(job), accelerator="cpu", devices=job.devices,
                              num_nodes=job.num_nodes, max_steps=1, limit_train_batches=1, limit_val_batches=0,
                              num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                              enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=True,
                              callbacks=[_stage_callback(tracker)], **trainer_kwargs)  # fmt: skip
        except Exception as raised:
            return [StageRecord(name=f"{job.strategy}'s Lightning strategy on CPU", outcome="not rehearsed",
                                detail=f"constructing it for accelerator='cpu' raises {type(raised).__name__}: "
                                f"{_first(raised)}")]  # fmt: skip
        tracker.wrap(trainer.strategy)
        train, source = (None, f"{type(datamodule).__name__}.train_dataloader()") if datamodule is not None else (
            _train_loader(model))  # fmt: skip
        try:
            trainer.fit(model, train_dataloaders=train, datamodule=datamodule)
        except BaseException as raised:  # the user's code may raise anything, SystemExit included
            error = raised
    names = _stage_names(trainer.strategy, tracker, job, rank, source)
    order = ["environment", "configure_model", "wrap", "optimizers", "step"]
    done = set(tracker.done) | ({"wrap"} if "after optimizers" in tracker.done else set())
    if tracker.current == "after optimizers":
        tracker.current = "wrap"
    for stage in order:
        if stage in done or (error is None and tracker.current == "end"):
            records.append(StageRecord(name=names[stage]))
        elif error is not None and stage == tracker.current:
            records.append(_raised(names[stage], stage, error))
            break
        elif error is None:
            records.append(StageRecord(name=names[stage], outcome="not rehearsed",
                                       detail="Lightning's fit did not reach it"))  # fmt: skip
            break
    if compiled:
        records.append(StageRecord(name="torch.compile", outcome="not rehearsed",
                                   detail=f"{compiled} compiled module(s) ran eagerly: compiling needs the job's "
                                   "device (Inductor's kernels for CUDA)"))  # fmt: skip
    return records


def mesh_of(strategy: Any) -> Any:
    """The strategy's device mesh (``ModelParallelStrategy``'s public property), or ``None``."""
    try:
        return strategy.device_mesh
    except Exception:  # no such property (DDP), or not set up yet
        return None


def _stage_names(strategy: Any, tracker: _Tracker, job: SetupJob, rank: int, source: str) -> dict[str, str]:
    from torch.nn.parallel import DistributedDataParallel

    kind = type(strategy).__name__
    mesh = tracker.mesh or mesh_of(strategy)
    if mesh is not None:
        shape = ", ".join(f"{name}={size}" for name, size in zip(mesh.mesh_dim_names or (), mesh.shape, strict=False))
        environment = f"process group and DeviceMesh('cpu', {shape}) as rank {rank} of {job.world_size}"
    else:
        environment = f"process group as rank {rank} of {job.world_size}"
    if isinstance(tracker.wrapped, DistributedDataParallel):  # the options as DDP holds them
        ddp = tracker.wrapped
        shown = ", ".join(f"{key}={getattr(ddp, key, '?')}" for key in (
            "static_graph", "find_unused_parameters", "gradient_as_bucket_view", "broadcast_buffers"))  # fmt: skip
        hook = _comm_hook(job)
        wrap = f"DistributedDataParallel({shown})" + (f" with comm hook {_short(hook)}" if hook else "")
    elif kind == "ModelParallelStrategy":
        wrap = "the preset's fully_shard / the model's parallelize plan on the mesh, precision conversion"
    else:
        wrap = f"{kind}'s wrapping"
    return {
        "environment": environment,
        "configure_model": "configure_model() with the strategy's device mesh",
        "wrap": wrap,
        "optimizers": "configure_optimizers() over the parameters as the strategy hands them over",
        "step": f"first training step through the wrapped model ({source}): forward, backward, optimizer step",
    }


def _comm_hook(job: SetupJob) -> Any:
    """The preset's DDP communication hook (its declaration, or ``--set ddp_comm_hook=``)."""
    from lightning_presets.registry import catalog

    preset = catalog.strategy_catalog().presets.get(job.strategy)
    values = {**(dict(preset.init_params) if preset is not None else {}), **dict(job.overrides)}
    return values.get("ddp_comm_hook")


def _short(value: Any) -> str:
    return getattr(value, "__name__", None) or repr(value)


def timed(function: Callable[[], list[StageRecord]]) -> tuple[list[StageRecord], float]:
    """``function``'s records and its wall time in seconds (the benchmark's and the notes')."""
    started = time.perf_counter()
    records = function()
    return records, time.perf_counter() - started
