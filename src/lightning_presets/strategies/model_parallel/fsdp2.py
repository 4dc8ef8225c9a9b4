"""The FSDP2 (``fully_shard``) presets' own rules and their sharding, through ``ModelParallelStrategy``: ``fsdp2``
and ``fsdp2_offload_ckpt`` (their hooks are in :mod:`.hooks`, the presets in :mod:`.presets`).

No change to the user's model: when the LightningModule does not shard itself in ``configure_model``
(Trainer) and no ``parallelize_fn`` is given (Fabric), the strategy applies ``fully_shard`` to the
repeated blocks it finds and to the root, over a 1-D data-parallel mesh of the whole world.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from lightning_presets.core.context import Context
from lightning_presets.core.mesh import DATA_PARALLEL_WORLD
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.guards.builders import one_device, repeated_block
from lightning_presets.guards.precision_rules import STRATEGY_HARDWARE_RULES, half_weights_have_a_scaler
from lightning_presets.inspection.blocks import find_repeated_blocks
from lightning_presets.inspection.hooks import overrides
from lightning_presets.strategies.model_parallel import rules as family_rules  # the module: their codes are its

# The modules this preset sharded itself (their root needs the steps routed through it); never kept alive.
_SHARDED_BY_PRESET: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_STEPS = {
    "training_step": "train_step_context",
    "validation_step": "val_step_context",
    "test_step": "test_step_context",
    "predict_step": "predict_step_context",
}


@rule(
    "LP210", "warning", "model", "a tensor-parallel dimension the model does not use",
    fails="from lightning.pytorch import LightningModule\n\nclass Model(LightningModule):   # no configure_model()\n"
    "    pass\n\n"
    'Trainer(strategy=lightning_presets.strategy("fsdp2", data_parallel_size=4, tensor_parallel_size=2), '
    'accelerator="cuda", devices=8).fit(Model())',
    fixed="from lightning.pytorch import LightningModule\n\nclass Model(LightningModule):   # no configure_model()\n"
    "    pass\n\n"
    'Trainer(strategy="fsdp2", accelerator="cuda", devices=8).fit(Model())',
)  # fmt: skip
def tensor_dimension_used(ctx: Context, model: nn.Module) -> Problem | None:
    _, tensor = family_rules.resolved_sizes(ctx, DATA_PARALLEL_WORLD)
    if not isinstance(tensor, int) or tensor < 2 or overrides(model, "configure_model"):
        return None
    return Problem(
        f"{ctx.call()} with tensor_parallel_size={tensor}: {type(model).__name__} does not apply tensor parallelism "
        f"(no configure_model), and {ctx.preset!r} shards only over the data-parallel dimension, so the {tensor} "
        "ranks of each tensor-parallel group compute the same batch: it trains, on a fraction of the devices",
        "drop tensor_parallel_size (every device data-parallel), or use strategy='tp2d_hybrid' and apply tensor "
        "parallelism in configure_model",
    )


data_parallel_is_world = family_rules.sizes_cover_world(
    "LP211", DATA_PARALLEL_WORLD,
    fails='Trainer(strategy=lightning_presets.strategy("fsdp2", data_parallel_size=4), accelerator="cpu", devices=2)',
    fixed='Trainer(strategy=lightning_presets.strategy("fsdp2", data_parallel_size=1, tensor_parallel_size=2), '
    'accelerator="cpu", devices=2)',
    evidence="runtime: fit: Lightning raises RuntimeError 'multiplied should equal the world size'",
)  # fmt: skip


fsdp2_has_peers = one_device(
    "LP212", "one device in total: sharding buys nothing",
    why="one device in total, so FSDP2 has nothing to shard across and only its all-gather bookkeeping remains",
    hint="use devices>1 (or more nodes); for one device, train without a strategy",
    fails='Trainer(strategy="fsdp2", accelerator="cpu", devices=1)',
    fixed='Trainer(strategy="fsdp2", accelerator="cpu", devices=2)',
)  # fmt: skip

fsdp2_found_blocks = repeated_block(
    "LP213", "no repeated block found: the whole model is one FSDP2 unit",
    consequence="only the root is sharded, so every forward gathers the whole model at once{checkpointing}",
    hint="hold the repeated layers in an nn.ModuleList, or shard the model yourself in configure_model() "
    "(Trainer) / a parallelize_fn (Fabric)",
    unless_model=lambda model: is_parallelized(model),
    setup='Trainer(strategy="fsdp2", accelerator="cuda", devices=8).fit(model)',
)  # fmt: skip


@rule(
    "LP214", "warning", "construction", "CPU offload on CPU devices changes nothing",
    fails='Trainer(strategy="fsdp2_offload_ckpt", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="fsdp2_offload_ckpt", accelerator="cuda", devices=8)',
)  # fmt: skip
def offload_needs_cuda(ctx: Context) -> Problem | None:
    if ctx.accelerator != "cpu":
        return None
    return Problem(
        f"{ctx.call('accelerator')}: the parameters already live in CPU memory, so the CPU offload policy "
        "saves nothing (this still exercises the wiring, with unpinned memory)",
        "run it with accelerator='cuda' to save GPU memory, or use strategy='fsdp2' on CPU",
    )


SHARDS_ITSELF = """from lightning.pytorch import LightningModule
from torch.distributed.fsdp import fully_shard

class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Linear(8, 8) for _ in range(2))

    def configure_model(self):
        for block in self.blocks:
            fully_shard(block, mesh=self.device_mesh["data_parallel"])
        fully_shard(self, mesh=self.device_mesh["data_parallel"])

"""
"""A model whose configure_model applies fully_shard itself."""


@rule(
    "LP218", "warning", "setup", "a model that shards itself: the preset's offload and checkpointing are not applied",
    fails=SHARDS_ITSELF + 'Trainer(strategy="fsdp2_offload_ckpt", accelerator="cuda", devices=8).fit(Model())',
    fixed=SHARDS_ITSELF + 'Trainer(strategy="fsdp2", accelerator="cuda", devices=8).fit(Model())',

)  # fmt: skip
def preset_applies_its_layout(ctx: Context, model: nn.Module) -> Problem | None:
    if not ctx.activation_checkpointing or not is_parallelized(model):
        return None
    return Problem(
        f"{ctx.call()}: {type(model).__name__} applies fully_shard or tensor parallelism itself in configure_model, so "
        f"{ctx.preset!r} leaves it as it is: no CPU offload and no activation checkpointing are applied",
        "pass offload_policy=CPUOffloadPolicy() to your fully_shard calls and checkpoint the blocks yourself, or drop "
        "fully_shard from configure_model and let the preset shard, offload and checkpoint",
    )


RULES: tuple[Rule, ...] = (
    family_rules.sizes_are_positive,
    tensor_dimension_used,
    family_rules.anomaly_detection_without_tensor_parallel,
    family_rules.batch_norm_synchronised,
    family_rules.sync_batch_norm_on_gpus,
    family_rules.clipping_by_norm_on_one_mesh,
    data_parallel_is_world,
    family_rules.model_parallel_precision,
    family_rules.model_parallel_accelerator,
    fsdp2_has_peers,
    fsdp2_found_blocks,
    half_weights_have_a_scaler,
    *STRATEGY_HARDWARE_RULES,
)
OFFLOAD_RULES: tuple[Rule, ...] = (*RULES, offload_needs_cuda, preset_applies_its_layout)


def is_parallelized(model: nn.Module) -> bool:
    """Whether ``fully_shard`` or tensor parallelism was applied anywhere in ``model`` already."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    if any(isinstance(module, FSDPModule) for module in model.modules()):
        return True
    return any(isinstance(parameter, DTensor) for parameter in model.parameters())


def block_units(model: nn.Module) -> list[tuple[nn.Module, bool]]:
    """The modules of the repeated block type the preset shards, innermost first, each with whether it is also
    checkpointed (the outermost ones only: a block inside another is recomputed with it).

    ``fully_shard`` takes a module only before its parent (torch's "Cannot concatenate overlapping meshes" when the
    parent was sharded first). The root is sharded last by the caller; a container of the block type that holds only
    blocks (an ``nn.Sequential`` stack of ``nn.Sequential`` blocks) is the stack, not a block: left to the root."""
    blocks = tuple(find_repeated_blocks(model))
    found = [each for each in model.modules() if each is not model and isinstance(each, blocks)]  # parents first
    matched = {id(each) for each in found}
    units = [
        each
        for each in found
        if not (len(children := list(each.children())) > 1 and all(id(child) in matched for child in children))
    ]
    inner = {id(sub) for each in units for sub in each.modules() if sub is not each}
    return [(each, id(each) not in inner) for each in reversed(units)]


def shard_blocks_and_root(model: nn.Module, mesh: Any, *, offload: bool, checkpoint: bool) -> nn.Module:
    """``fully_shard`` each repeated block (checkpointed first if asked) and then the root, in place."""
    from torch.distributed.fsdp import CPUOffloadPolicy, fully_shard

    kwargs: dict[str, Any] = {"mesh": mesh}
    if offload:
        # Pinned memory needs an accelerator; on CPU (gloo) the policy runs unpinned.
        kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=mesh.device_type == "cuda")
    for module, outermost in block_units(model):
        if checkpoint and outermost:
            from torch.distributed._composable.checkpoint_activation import checkpoint as checkpoint_module

            checkpoint_module(module)
        fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    _SHARDED_BY_PRESET.add(model)
    return model


def parallelize(model: nn.Module, device_mesh: Any, *, offload: bool, checkpoint: bool) -> nn.Module:
    """The preset's ``parallelize_fn`` for Fabric: shard over the data-parallel dimension of the mesh."""
    if is_parallelized(model):
        return model
    return shard_blocks_and_root(model, device_mesh["data_parallel"], offload=offload, checkpoint=checkpoint)


def shard_by_preset(model: nn.Module, device_mesh: Any) -> nn.Module:
    """Stands in for Fabric's ``parallelize_fn`` until the strategy binds its preset's (``FSDP2FabricHooks``)."""
    raise RuntimeError("fsdp2: the preset's parallelize_fn was not bound to its preset")


@contextmanager
def _configure_model_defined(module: nn.Module) -> Iterator[None]:
    """Lightning refuses a LightningModule without ``configure_model`` because nothing would shard it.

    The preset has sharded it, so for the duration of that check the instance carries a no-op
    ``configure_model``; the user's class is never touched and the attribute is removed afterwards.
    """
    had_own = "configure_model" in vars(module)
    if not had_own:
        object.__setattr__(module, "configure_model", _sharded_by_preset)
    try:
        yield
    finally:
        if not had_own:
            object.__delattr__(module, "configure_model")


def _sharded_by_preset() -> None:
    """Stands in for ``configure_model`` on a module the preset sharded."""
