"""DeepSpeed presets rehearsed through DeepSpeed's own engine on its CPU accelerator (issue 35 item 8).

Lightning's ``DeepSpeedStrategy`` insists on CUDA (its accelerator connector refuses ``accelerator="cpu"``), but
DeepSpeed 0.19.8's engine runs on the CPU: ``deepspeed.initialize`` with the config the preset's strategy holds
(``lightning_presets.strategy(name).config``: the ZeRO stage, the offload devices, ``zero_force_ds_cpu_optimizer``)
over the optimizer the model's ``configure_optimizers`` returns, then one step: ``training_step`` through the
engine's forward, ``engine.backward``, ``engine.step``. It runs in the set-up's world
(:func:`~.setup.mirror_world`: a process group of the job's size whose collectives complete at once), as rank ``r``
of ``W``: the ZeRO partitions are those of the real world size.

What is set aside, and said: Lightning's own ``DeepSpeedStrategy`` set-up (its CUDA check; its reading of the
optimizers runs in the child's Trainer rehearsal), DeepSpeed's shared-memory all-reduce kernel (a compiled
optimisation of its CPU collectives, switched off as DeepSpeed's ``__compatible_ops__`` allows), ``fp16`` (rehearsed
as ``bf16``: a CPU has no float16 loss scaling) and ``self.log`` (a no-op: there is no Trainer to log into).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from lightning_presets.tools.check.rehearsal.findings import StageRecord
from lightning_presets.tools.check.rehearsal.setup import (
    SetupJob,
    WorldUnavailable,
    _first,
    _first_batch,
    _raised,
    mirror_world,
    unavailable,
)


def engine_config(job: SetupJob, trainer_kwargs: Mapping[str, Any], micro_batch: int,
                  target: str = "trainer") -> dict[str, Any]:  # fmt: skip
    """The config the preset's strategy (the Trainer's or Fabric's, ``target``) holds, with what Lightning's
    ``_format_config`` adds for the job: the micro-batch, gradient clipping and the precision section (``16-mixed``
    as ``bf16``)."""
    import copy

    import lightning_presets
    from lightning_presets.registry import catalog

    strategy: Any = job.strategy
    if job.strategy in catalog.strategy_catalog().presets:
        strategy = lightning_presets.strategy(job.strategy, target=target, **dict(job.overrides))
    config: dict[str, Any] = copy.deepcopy(dict(getattr(strategy, "config", None) or {}))
    config.setdefault("train_micro_batch_size_per_gpu", micro_batch)
    config.setdefault("zero_allow_untested_optimizer", True)
    clip = trainer_kwargs.get("gradient_clip_val")
    if clip is not None:
        config.setdefault("gradient_clipping", clip)
    precision = str(trainer_kwargs.get("precision", "32-true"))
    if precision.startswith(("bf16", "16")) and "fp16" not in config and "bf16" not in config:
        config["bf16"] = {"enabled": True}
    if isinstance(config.get("fp16"), dict) and config["fp16"].get("enabled"):
        config.pop("fp16")
        config["bf16"] = {"enabled": True}
    return config


def described(config: Mapping[str, Any]) -> str:
    """The ZeRO stage and offloading of ``config``, as the records name them."""
    zero = config.get("zero_optimization", {})
    return (f"ZeRO-{zero.get('stage', 0)}" + (", optimizer offloaded" if zero.get("offload_optimizer") else "")
            + (", parameters offloaded" if zero.get("offload_param") else ""))  # fmt: skip


class _TrainingStep:
    """An ``nn.Module`` whose forward is the LightningModule's ``training_step`` (what Lightning's wrapper hands the
    engine); built lazily so that torch is imported only here."""

    @staticmethod
    def wrap(model: Any) -> Any:
        from torch import nn

        class TrainingStep(nn.Module):
            def __init__(self, module: Any) -> None:
                super().__init__()
                self.module = module

            def forward(self, batch: Any) -> Any:
                return self.module.training_step(batch, 0)

        return TrainingStep(model)


def _silenced_logging(model: Any) -> None:
    def log(*args: Any, **kwargs: Any) -> None:
        return None

    model.log = log
    model.log_dict = log


class Stages:
    """The records of a rehearsal as its stages complete, and the stage now running (named in the record of what
    it raises)."""

    def __init__(self, records: list[StageRecord]) -> None:
        self.records = records
        self.name, self.kind = "", "set-up"

    def enter(self, name: str, kind: str = "set-up") -> None:
        self.name, self.kind = name, kind

    def done(self, name: str = "") -> None:
        self.records.append(StageRecord(name=name or self.name))


Prepared = tuple[Any, Any, Any, dict[str, Any], Callable[[Any, Any], Any]]
"""What a job's preparation hands DeepSpeed: the module, its optimizer, the first batch, the config, and the loss of
the engine on a batch."""


def engine_stages(job: SetupJob, rank: int, records: list[StageRecord], prepare: Callable[[Stages], Prepared],
                  step: str) -> list[StageRecord]:  # fmt: skip
    """In the job's world as rank ``rank``: ``prepare`` (the job's own stages, the config), then DeepSpeed's
    ``initialize`` over the module and optimizer it returns, and one step (``step`` names it): the loss through the
    engine, ``engine.backward``, ``engine.step``. Trainer and Fabric jobs both run here."""
    import warnings

    try:
        import deepspeed
        import deepspeed.comm
        import deepspeed.ops
    except Exception as error:  # not installed, or broken
        records.append(StageRecord(name="deepspeed.initialize", outcome="not rehearsed",
                                   detail=f"deepspeed cannot be imported here ({type(error).__name__}: "
                                   f"{_first(error)})"))  # fmt: skip
        return records
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False  # a compiled optimisation of CPU collectives
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        try:
            stack.enter_context(mirror_world(job.world_size, rank, job.devices))
        except WorldUnavailable as unmade:
            return [*records, *unavailable(job, unmade)]
        stages = Stages(records)
        try:
            module, optimizer, batch, config, loss_of = prepare(stages)
            stages.enter("deepspeed.initialize with the preset's config")
            engine, *_ = deepspeed.initialize(model=module, optimizer=optimizer, config=config,
                                              dist_init_required=False)  # fmt: skip
            stages.done(f"deepspeed.initialize ({described(config)}, rank {rank} of {job.world_size}, "
                        f"{type(engine.optimizer).__name__})")  # fmt: skip
            stages.enter(step.split(":")[0], "step")
            engine.backward(loss_of(engine, _as_engine_dtype(batch, config)))
            engine.step()
            stages.done(step)
        except BaseException as error:
            records.append(_raised(stages.name, stages.kind, error))
        finally:  # DeepSpeed's own teardown of the world, which releases the groups it cached
            with contextlib.suppress(Exception):
                deepspeed.comm.destroy_process_group()
    return records


def lightning_refusal() -> StageRecord:
    return StageRecord(name="Lightning's DeepSpeedStrategy on CPU", outcome="not rehearsed",
                       detail="Lightning's DeepSpeed strategy runs only on CUDA GPUs; DeepSpeed's own engine is "
                       "rehearsed instead on its CPU accelerator, with the preset's config")  # fmt: skip


def rehearse_deepspeed(
    model: Any, job: SetupJob, trainer_kwargs: Mapping[str, Any], rank: int = 0, datamodule: Any = None
) -> list[StageRecord]:
    """DeepSpeed's ``initialize`` and one step of ``model`` (changed in place: pass a copy) as rank ``rank`` of the
    job's world, with the preset's config."""

    def prepare(stages: Stages) -> Prepared:
        stages.enter(f"DeepSpeed config of {job.strategy}")
        batch = _first_batch(model, datamodule)
        config = engine_config(job, trainer_kwargs, _leading(batch))
        stages.done(f"DeepSpeed config of {job.strategy} ({described(config)})")
        stages.enter("configure_optimizers()")
        from lightning_presets.tools.simulation import user_model

        optimizers = user_model.optimizers(model, type(model).__name__, "adamw")
        stages.done()
        _silenced_logging(model)
        return _TrainingStep.wrap(model), optimizers[0], batch, config, lambda engine, batch: _loss(engine(batch))

    step = "first training step through DeepSpeed's engine: training_step, engine.backward, engine.step"
    return engine_stages(job, rank, [lightning_refusal()], prepare, step)


def _leaves(value: Any) -> list[Any]:
    """The tensors of a batch (tuples, lists and dicts of them)."""
    if isinstance(value, dict):
        return [leaf for each in value.values() for leaf in _leaves(each)]
    if isinstance(value, (tuple, list)):
        return [leaf for each in value for leaf in _leaves(each)]
    return [value]


def _leading(batch: Any) -> int:
    import torch

    sizes = [leaf.shape[0] for leaf in _leaves(batch) if isinstance(leaf, torch.Tensor) and leaf.dim()]
    return int(sizes[0]) if sizes else 1


def _as_engine_dtype(batch: Any, config: Mapping[str, Any]) -> Any:
    """The batch's floating tensors in the engine's dtype, as Lightning's DeepSpeed precision plugin converts them."""
    import torch

    if not (config.get("bf16") or {}).get("enabled"):
        return batch

    def convert(value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            return value.to(torch.bfloat16) if value.is_floating_point() else value
        if isinstance(value, dict):
            return {key: convert(each) for key, each in value.items()}
        if isinstance(value, (tuple, list)):
            return type(value)(convert(each) for each in value)
        return value

    return convert(batch)


def _loss(output: Any) -> Any:
    from lightning.pytorch.loops.optimization.automatic import ClosureResult

    return ClosureResult.from_training_step_output(output).closure_loss
