"""FSDP1's set-up rehearsed, for Trainer jobs (:mod:`.setup`) and Fabric jobs (:mod:`.fabric`): Lightning's
``FSDPStrategy`` (the Trainer's and Fabric's) refuses a CPU accelerator, so torch's own ``FullyShardedDataParallel``
wraps the model on ``device_id='cpu'`` with the preset's options (sharding strategy, the repeated blocks as the wrap
policy, ``use_orig_params=True``, CPU offload, bf16 mixed precision, activation checkpointing of the blocks after
wrapping, as Lightning applies it), then the optimizers and one step through the root. One wrapper for both:
:func:`fsdp1_wrap`."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

from lightning_presets.tools.check.rehearsal.errors import _raised
from lightning_presets.tools.check.rehearsal.findings import StageRecord
from lightning_presets.tools.check.rehearsal.job import SetupJob, _first, _first_batch
from lightning_presets.tools.check.rehearsal.mirror import WorldUnavailable, mirror_world, unavailable


def lightning_refusal(
    construct: Callable[[], Any],
    what: str,
    instead: str = "torch's FSDP wraps the model instead, with the preset's options",
) -> StageRecord:
    """``what`` (Lightning's strategy on CPU) said not rehearsed, with Lightning's own words when ``construct()``
    raises, and what runs ``instead``."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            construct()
            refused = ""
        except Exception as error:
            refused = f"{type(error).__name__}: {_first(error)}"
    return StageRecord(name=what, outcome="not rehearsed",
                       detail=f"Lightning refuses accelerator='cpu' ({refused}); {instead}" if refused else
                       f"not used: {instead}")  # fmt: skip


def fsdp1_options(job: SetupJob, options: Mapping[str, Any]) -> tuple[str, bool, bool]:
    """The preset's sharding strategy, CPU offload and activation checkpointing (the preset's ``init_params`` with
    the job's ``--set`` overrides)."""
    from lightning_presets.registry import catalog

    merged = {**dict(options), **dict(job.overrides)}
    sharding = merged.get("sharding_strategy", "FULL_SHARD")
    preset = catalog.strategy_catalog().presets.get(job.strategy)
    checkpointing = bool(getattr(preset, "activation_checkpointing", False))
    return str(getattr(sharding, "name", sharding)), bool(merged.get("cpu_offload")), checkpointing


def fsdp1_mesh(job: SetupJob, sharding: str, rank: int) -> tuple[Any, str]:
    """The ``(nodes, devices)`` mesh hybrid sharding shards over (``None`` otherwise), and its stage's name."""
    if not sharding.upper().startswith(("HYBRID", "_HYBRID")):
        return None, f"process group as rank {rank} of {job.world_size}"
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (job.num_nodes, job.devices), mesh_dim_names=("replicate", "shard"))
    return mesh, f"DeviceMesh('cpu', replicate={job.num_nodes}, shard={job.devices}) as rank {rank}"


def _half(precision: str) -> Any:
    import torch

    return {"bf16": torch.bfloat16, "16": torch.bfloat16}.get(precision.split("-")[0])


def autocast(precision: str) -> Any:
    """The CPU's bf16 autocast for a ``*-mixed`` job (``16-mixed`` as bf16: a CPU has no float16 autocast)."""
    import torch

    half = _half(precision)
    return torch.autocast("cpu", dtype=half) if half is not None else contextlib.nullcontext()


def fsdp1_wrap(model: Any, sharding: str, offload: bool, precision: str, mesh: Any,
               checkpointing: bool = False) -> tuple[Any, str]:  # fmt: skip
    """``model`` in torch's ``FullyShardedDataParallel`` as Lightning's FSDP strategy would wrap it (its device
    aside), then its repeated blocks checkpointed (``checkpointing``); the wrapped model and the stage's name."""
    import torch
    from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    from lightning_presets.inspection.blocks import find_repeated_blocks
    from lightning_presets.strategies.deepspeed.hooks import checkpoint_blocks

    blocks = find_repeated_blocks(model)
    half = _half(precision)
    mixed = MixedPrecision(param_dtype=half, reduce_dtype=half, buffer_dtype=half) if half is not None else None
    wrapped = FSDP(
        model,
        sharding_strategy=ShardingStrategy[sharding.upper()],
        auto_wrap_policy=ModuleWrapPolicy(blocks) if blocks else None,
        cpu_offload=CPUOffload(offload),
        mixed_precision=mixed,
        device_id=torch.device("cpu"),
        use_orig_params=True,
        device_mesh=mesh,
    )
    checkpointed = checkpoint_blocks(wrapped, blocks) if checkpointing and blocks else 0
    named = ", ".join(sorted(each.__name__ for each in blocks)) or "none found"
    name = (
        f"torch's FullyShardedDataParallel(sharding_strategy={sharding}, auto_wrap_policy=the repeated blocks "
        f"({named}), use_orig_params=True, cpu_offload={offload}, device_id=cpu, {precision})"
        + (f", activation checkpointing of {checkpointed} blocks" if checkpointing else "")
    )
    return wrapped, name


def _fsdp1(model: Any, job: SetupJob, options: dict[str, Any], trainer_kwargs: dict[str, Any],
           rank: int, datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    """FSDP1 presets in a Trainer job: Lightning's ``FSDPStrategy`` refuses a CPU accelerator (said, with Lightning's
    own words), so :func:`fsdp1_wrap` wraps the model as Lightning would, on ``device_id=cpu``; then the optimizers
    over the flat parameters' views and one step through the root, as Lightning redirects it."""
    import warnings

    from lightning.pytorch import Trainer
    from lightning.pytorch.strategies import FSDPStrategy

    records = [lightning_refusal(lambda: Trainer(strategy=FSDPStrategy(), accelerator="cpu", devices=job.devices,
                                                 logger=False), "Lightning's FSDPStrategy on CPU")]  # fmt: skip
    sharding, offload, checkpointing = fsdp1_options(job, options)
    precision = str(trainer_kwargs.get("precision", "32-true"))
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        try:
            stack.enter_context(mirror_world(job.world_size, rank, job.devices))
        except WorldUnavailable as unmade:
            return [*records, *unavailable(job, unmade)]
        stage = f"process group as rank {rank} of {job.world_size}"
        try:
            mesh, stage = fsdp1_mesh(job, sharding, rank)
            records.append(StageRecord(name=stage))
            stage = "configure_model()"
            if _overrides(model, "configure_model"):
                model.configure_model()
            records.append(StageRecord(name=stage))
            stage = f"torch's FullyShardedDataParallel(sharding_strategy={sharding}, device_id=cpu)"
            wrapped, stage = fsdp1_wrap(model, sharding, offload, precision, mesh, checkpointing)
            records.append(StageRecord(name=stage))
            stage = "optimizers"
            from lightning_presets.tools.simulation import user_model

            optimizers = user_model.optimizers(model, type(model).__name__, "adamw")
            records.append(StageRecord(name="configure_optimizers() over FSDP's flat parameters (their views)"))
            stage = "step"
            _one_step(model, wrapped, optimizers, precision, datamodule)
            records.append(StageRecord(name="first training step through the FSDP root: forward, backward, "
                                       "optimizer step"))  # fmt: skip
        except BaseException as error:
            name = (
                "first training step through the FSDP root"
                if stage == "step"
                else "configure_optimizers() over FSDP's flat parameters"
                if stage == "optimizers"
                else stage
            )
            records.append(_raised(name, "step" if stage == "step" else "set-up", error))
    return records


def _overrides(model: Any, name: str) -> bool:
    from lightning_presets.inspection.hooks import overrides

    return bool(overrides(model, name))


def _one_step(model: Any, wrapped: Any, optimizers: list[Any], precision: str, datamodule: Any = None) -> None:
    """``training_step`` through the FSDP root (Lightning's forward redirection), backward, the optimizer step."""
    from lightning.pytorch.loops.optimization.automatic import ClosureResult

    from lightning_presets.registry import private

    batch = _first_batch(model, datamodule)
    with autocast(precision):
        output = private.forward_redirection()(wrapped, model, "training_step", batch, 0)
    loss = ClosureResult.from_training_step_output(output).closure_loss
    if loss is None:
        return
    for optimizer in optimizers:
        optimizer.zero_grad()
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
