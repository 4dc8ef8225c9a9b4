"""FSDP1's set-up rehearsed (:mod:`.setup`): Lightning's ``FSDPStrategy`` refuses a CPU accelerator, so torch's own
``FullyShardedDataParallel`` wraps the model on ``device_id='cpu'`` with the preset's options, then the optimizers and
one step through the root, as Lightning would run them."""

from __future__ import annotations

import contextlib
from typing import Any

from lightning_presets.tools.check.rehearsal.errors import _raised
from lightning_presets.tools.check.rehearsal.findings import StageRecord
from lightning_presets.tools.check.rehearsal.job import SetupJob, _first, _first_batch
from lightning_presets.tools.check.rehearsal.mirror import WorldUnavailable, mirror_world, unavailable


def _fsdp1(model: Any, job: SetupJob, options: dict[str, Any], trainer_kwargs: dict[str, Any],
           rank: int, datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    """FSDP1 presets: Lightning's ``FSDPStrategy`` refuses a CPU accelerator (said, with Lightning's own words), so
    torch's ``FullyShardedDataParallel`` wraps the model as Lightning would (the preset's sharding strategy, its
    repeated blocks as the wrap policy, ``use_orig_params=True``, CPU offload), on ``device_id=cpu``; then the
    optimizers over the flat parameters' views and one step through the root, as Lightning redirects it."""
    import warnings

    import torch
    from lightning.pytorch import Trainer
    from lightning.pytorch.strategies import FSDPStrategy

    records = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            Trainer(strategy=FSDPStrategy(), accelerator="cpu", devices=job.devices, logger=False)
            refused = ""
        except Exception as error:
            refused = f"{type(error).__name__}: {_first(error)}"
    records.append(StageRecord(name="Lightning's FSDPStrategy on CPU", outcome="not rehearsed",
                               detail=f"Lightning refuses accelerator='cpu' ({refused}); torch's FSDP wraps the "
                               "model instead, with the preset's options" if refused else
                               "rehearsed with torch's FSDP instead"))  # fmt: skip
    sharding = str(getattr(options.get("sharding_strategy"), "name", options.get("sharding_strategy", "FULL_SHARD")))
    offload = bool(options.get("cpu_offload"))
    precision = str(trainer_kwargs.get("precision", "32-true"))
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        try:
            stack.enter_context(mirror_world(job.world_size, rank, job.devices))
        except WorldUnavailable as unmade:
            return [*records, *unavailable(job, unmade)]
        stage = f"process group as rank {rank} of {job.world_size}"
        try:
            mesh = None
            if sharding.upper().startswith(("HYBRID", "_HYBRID")):
                from torch.distributed.device_mesh import init_device_mesh

                mesh = init_device_mesh("cpu", (job.num_nodes, job.devices), mesh_dim_names=("replicate", "shard"))
                stage = f"DeviceMesh('cpu', replicate={job.num_nodes}, shard={job.devices}) as rank {rank}"
            records.append(StageRecord(name=stage))
            stage = "configure_model()"
            if _overrides(model, "configure_model"):
                model.configure_model()
            records.append(StageRecord(name=stage))
            stage = (
                f"torch's FullyShardedDataParallel(sharding_strategy={sharding}, auto_wrap_policy=the repeated "
                f"blocks, use_orig_params=True, cpu_offload={offload}, device_id=cpu, {precision})"
            )
            wrapped = _fsdp1_wrap(model, sharding, offload, precision, mesh)
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
    del torch
    return records


def _overrides(model: Any, name: str) -> bool:
    from lightning_presets.inspection.hooks import overrides

    return bool(overrides(model, name))


def _fsdp1_wrap(model: Any, sharding: str, offload: bool, precision: str, mesh: Any) -> Any:
    import torch
    from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    from lightning_presets.inspection.blocks import find_repeated_blocks

    blocks = find_repeated_blocks(model)
    half = {"bf16": torch.bfloat16, "16": torch.bfloat16}.get(precision.split("-")[0])
    mixed = MixedPrecision(param_dtype=half, reduce_dtype=half, buffer_dtype=half) if half is not None else None
    return FSDP(
        model,
        sharding_strategy=ShardingStrategy[sharding.upper()],
        auto_wrap_policy=ModuleWrapPolicy(blocks) if blocks else None,
        cpu_offload=CPUOffload(offload),
        mixed_precision=mixed,
        device_id=torch.device("cpu"),
        use_orig_params=True,
        device_mesh=mesh,
    )


def _one_step(model: Any, wrapped: Any, optimizers: list[Any], precision: str, datamodule: Any = None) -> None:
    """``training_step`` through the FSDP root (Lightning's forward redirection), backward, the optimizer step."""
    import torch
    from lightning.pytorch.loops.optimization.automatic import ClosureResult

    from lightning_presets.registry import private

    batch = _first_batch(model, datamodule)
    half = {"bf16": torch.bfloat16, "16": torch.bfloat16}.get(precision.split("-")[0])
    context = torch.autocast("cpu", dtype=half) if half is not None else contextlib.nullcontext()
    with context:
        output = private.forward_redirection()(wrapped, model, "training_step", batch, 0)
    loss = ClosureResult.from_training_step_output(output).closure_loss
    if loss is None:
        return
    for optimizer in optimizers:
        optimizer.zero_grad()
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()
