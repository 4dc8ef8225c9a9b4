"""The rules of the FSDP presets (``FSDPStrategy``): those of ``fsdp_offload_ckpt`` (:data:`RULES`), which the
other FSDP presets share (:mod:`.sharding_rules`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from lightning_presets.core.context import Context, Options
from lightning_presets.core.mesh import AUTO, mesh_shape
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.guards.builders import needs_cuda, one_device, one_of, repeated_block
from lightning_presets.guards.precision_rules import STRATEGY_HARDWARE_RULES, half_weights_have_a_scaler
from lightning_presets.inspection.hooks import overrides
from lightning_presets.strategies.fsdp.options import FSDPOptions

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
STATE_DICT_TYPES = ("full", "sharded")


fsdp_needs_cuda = needs_cuda(
    "LP101", "FSDP needs CUDA devices",
    why="FSDP needs CUDA devices, got accelerator={accelerator!r} ({devices} device(s) × {nodes} node(s)); "
    "on CPU it would fail when `fit` starts",
    hint="run it with accelerator='cuda'; to test sharding on CPU use strategy='fsdp2' (FSDP2 over gloo), "
    "strategy='tp2d_hybrid' (tensor parallel and FSDP2) or strategy='ddp'",
    fails='Trainer(strategy="fsdp_offload_ckpt", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8)',
    evidence="runtime: fit on CPU: torch raises RuntimeError 'FSDP needs a non-CPU accelerator device'",
)  # fmt: skip


sharding_strategy_known = one_of(
    "LP104", "unknown sharding_strategy", key="sharding_strategy", default="FULL_SHARD", choices=SHARDING_STRATEGIES,
    what="an FSDP sharding strategy",
    accepts=lambda value: not isinstance(value, str) or value.upper() in SHARDING_STRATEGIES,
    fails='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARDED")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARD")',
    evidence="runtime: KeyError from ShardingStrategy[...]",
)  # fmt: skip

state_dict_type_known = one_of(
    "LP105", "unknown state_dict_type", key="state_dict_type", default="full", choices=STATE_DICT_TYPES,
    what="a checkpoint format", consequence="; Lightning would only fail when the first checkpoint is saved",
    fails='lightning_presets.strategy("fsdp_offload_ckpt", state_dict_type="sharding")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", state_dict_type="sharded")',
    evidence="runtime: Lightning raises ValueError 'Unknown state_dict_type'",
)  # fmt: skip


HYBRID_SHARDINGS = ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")


def _two_dimensional(mesh: Any) -> bool:
    """Whether a ``device_mesh`` option makes a 2-D mesh: a pair, a 2-D DeviceMesh, or the hybrid preset's 'auto'."""
    if mesh == AUTO or mesh_shape(mesh) is not None:
        return True
    return type(mesh).__name__ == "DeviceMesh" and getattr(mesh, "ndim", 0) == 2


@rule(
    "LP117", "error", "options", "a 2-D device_mesh with a sharding strategy that is not hybrid",
    fails='lightning_presets.strategy("fsdp_grad_op", device_mesh=(2, 8))',
    fixed='lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 8))',
    evidence="runtime: 2 processes: torch's FSDP init reduces each rank's gradients over itself alone",
)  # fmt: skip
def mesh_needs_hybrid_sharding(options: Options) -> Problem | None:
    view = FSDPOptions.of(options)
    mesh, sharding = view.device_mesh, str(getattr(view.sharding_strategy, "name", view.sharding_strategy))
    if mesh is None or not _two_dimensional(mesh) or view.sharding in HYBRID_SHARDINGS:
        return None
    return Problem(
        f"{options.call('device_mesh', 'sharding_strategy')}: with sharding_strategy={sharding!r} torch's FSDP uses "
        "only the first dimension of a 2-D device mesh, so the ranks along the second one never synchronise "
        "their gradients",
        "drop device_mesh (a 1-D job needs none), or use strategy='fsdp_hybrid_shard' (HYBRID_SHARD) for a "
        "(replicas, shard size) mesh",
    )


fsdp_has_peers = one_device(
    "LP106", "one device in total: sharding buys nothing",
    why="one device in total, so FSDP has nothing to shard across and only its communication and CPU-offload "
    "overhead remain",
    hint="use devices>1 (or more nodes); for one GPU, plain precision='bf16-mixed' without a strategy is faster",
    fails='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=1)',
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8)',
)  # fmt: skip


repeated_block_found = repeated_block(
    "LP107", "no repeated block found to wrap and checkpoint",
    consequence="the whole model becomes one FSDP unit{checkpointing}",
    hint="pass the block class: lightning_presets.strategy({preset!r}, auto_wrap_policy={{MyBlock}}, "
    "activation_checkpointing_policy={{MyBlock}}), or hold the blocks in an nn.ModuleList",
    unless_given=("auto_wrap_policy", "activation_checkpointing_policy"),
    setup='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8).fit(model)',
)  # fmt: skip


@rule(
    "LP118", "error", "model", "gradient clipping by norm in the Trainer, which FSDP's precision plugin refuses",
    fails='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gradient_clip_val=1.0)'
    ".fit(nn.Linear(64, 64))",
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gradient_clip_val=1.0, '
    'gradient_clip_algorithm="value").fit(nn.Linear(64, 64))',
    evidence="runtime: FSDPPrecision.clip_grad_by_norm raises MisconfigurationException at the first optimizer step",
    unless="your LightningModule overrides configure_gradient_clipping",
    when=lambda ctx: ctx.clips_by_norm, shows=("gradient_clip_val",),
    consequence="the first optimizer step raises on every rank (FSDP's precision plugin refuses to clip by norm; clip "
    "through the FSDP root)",
)  # fmt: skip
def clipping_by_norm_goes_through_the_module(ctx: Context, model: nn.Module) -> Problem | None:
    if not ctx.clips_by_norm or overrides(model, "configure_gradient_clipping"):
        return None
    return Problem(
        f"{ctx.call('gradient_clip_val')}: Lightning's FSDP precision plugin refuses to clip gradients by norm "
        "(torch.nn.utils.clip_grad_norm_ is wrong on FSDP's sharded gradients), so the first optimizer step raises "
        "on every rank",
        "clip through the FSDP root in your LightningModule: def configure_gradient_clipping(self, optimizer, "
        "gradient_clip_val=None, gradient_clip_algorithm=None): self.trainer.model.clip_grad_norm_(gradient_clip_val)"
        "; or pass gradient_clip_algorithm='value'",
    )


@rule(
    "LP119", "warning", "options", "Fabric with use_orig_params=False: no joint setup of model and optimizer",
    fails='lightning_presets.strategy("fsdp_offload_ckpt", target="fabric", use_orig_params=False)',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", target="fabric")',
)  # fmt: skip
def fabric_keeps_original_parameters(options: Options) -> Problem | None:
    if options.target not in ("fabric", "lightning_fabric") or FSDPOptions.of(options).use_orig_params is not False:
        return None
    return Problem(
        f"{options.call('use_orig_params')}: with use_orig_params=False, Fabric's FSDP refuses "
        "fabric.setup(model, optimizer) (it raises ValueError then); only setup_module, then an optimizer made from "
        "the wrapped module's parameters and setup_optimizers, works",
        "drop use_orig_params (Lightning's default is True), or set up in that order: "
        "model = fabric.setup_module(model); optimizer = fabric.setup_optimizers(make_optimizer(model.parameters()))",
    )


RULES: tuple[Rule, ...] = (
    fsdp_needs_cuda,
    sharding_strategy_known,
    state_dict_type_known,
    mesh_needs_hybrid_sharding,
    clipping_by_norm_goes_through_the_module,
    fabric_keeps_original_parameters,
    fsdp_has_peers,
    repeated_block_found,
    half_weights_have_a_scaler,
    *STRATEGY_HARDWARE_RULES,
)
