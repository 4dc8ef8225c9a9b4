"""The rules of ``fsdp_hybrid_shard`` (HSDP) and ``fsdp_grad_op`` (ZeRO-2-like): the sharding each preset stands
for and the hybrid mesh, with the CUDA, precision and block rules of ``fsdp_offload_ckpt`` (:mod:`.rules`), without
its CPU offload and activation checkpointing.
"""

from __future__ import annotations

from typing import Any, cast

from lightning_presets.core.context import Context, Options
from lightning_presets.core.mesh import AUTO, HYBRID_SHARD
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.guards.builders import repeated_block
from lightning_presets.guards.precision_rules import STRATEGY_HARDWARE_RULES, half_weights_have_a_scaler
from lightning_presets.strategies.fsdp.options import FSDPOptions
from lightning_presets.strategies.fsdp.rules import (
    HYBRID_SHARDINGS,
    SHARDING_STRATEGIES,
    clipping_by_norm_goes_through_the_module,
    fabric_keeps_original_parameters,
    fsdp_has_peers,
    fsdp_needs_cuda,
    mesh_needs_hybrid_sharding,
    sharding_strategy_known,
    state_dict_type_known,
)

# The sharding strategies each preset stands for; anything else is another preset.
PRESET_SHARDING = {
    "fsdp_hybrid_shard": ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"),
    "fsdp_grad_op": ("SHARD_GRAD_OP",),
}


def resolved_mesh(ctx: Context) -> tuple[int, int] | None:
    """The (replicas, shard size) the preset runs with; ``None`` for a DeviceMesh object or a process group."""
    return cast("tuple[int, int] | None", ctx.mesh_sizes(HYBRID_SHARD))  # ('auto': nodes, devices per node)


def _mesh_text(mesh: tuple[int, int]) -> str:
    return f"device_mesh={mesh}: {mesh[0]} replica(s) × shard size {mesh[1]} = {mesh[0] * mesh[1]}"


@rule(
    "LP114", "warning", "options", "a sharding_strategy the preset does not stand for",
    fails='lightning_presets.strategy("fsdp_grad_op", sharding_strategy="FULL_SHARD")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARD")',
)  # fmt: skip
def sharding_matches_preset(options: Options) -> Problem | None:
    allowed = PRESET_SHARDING.get(options.preset)
    view = FSDPOptions.of(options)
    if allowed is None or view.sharding_strategy is None or view.sharding in allowed:
        return None
    if view.sharding not in SHARDING_STRATEGIES:  # not a sharding strategy at all: LP104 says so
        return None
    return Problem(
        f"{options.call('sharding_strategy')}: {options.preset!r} is {' or '.join(allowed)}, not "
        f"{view.sharding!r}; it trains, but not as the preset's name promises",
        "drop sharding_strategy, or pick the preset for it: strategy='fsdp_offload_ckpt' (FULL_SHARD), "
        "'fsdp_grad_op' (SHARD_GRAD_OP), 'fsdp_hybrid_shard' (HYBRID_SHARD across nodes)",
    )


def _dimensions(mesh: Any) -> int | None:
    """How many dimensions a ``device_mesh`` option has: a tuple of positive integers, or a ``DeviceMesh``."""
    if type(mesh).__name__ == "DeviceMesh":
        return int(getattr(mesh, "ndim", 0))
    if isinstance(mesh, (tuple, list)) and mesh and all(type(size) is int and size > 0 for size in mesh):
        return len(mesh)
    return None


@rule(
    "LP111", "error", "options", "a device_mesh of the wrong shape for the sharding strategy",
    fails='lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 4, 2))',
    fixed='lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 8))',
    evidence="runtime: torch's FSDP init raises ValueError 'Expected device_mesh to have ndim=2'",
)  # fmt: skip
def device_mesh_shape(options: Options) -> Problem | None:
    view = FSDPOptions.of(options)
    value = view.device_mesh
    dimensions = None if value in (AUTO, None) else _dimensions(value)
    hybrid = view.sharding in HYBRID_SHARDINGS
    if value in (AUTO, None) or dimensions == 2 or (dimensions == 1 and not hybrid):
        return None  # a 2-D mesh without hybrid sharding is LP117's
    return Problem(
        f"{options.call('device_mesh', 'sharding_strategy')}: device_mesh must be 'auto' or (replicas, shard size), "
        f"two positive integers{'' if hybrid else ', or one dimension for a sharding that is not hybrid'}, got "
        f"{value!r}",
        "drop device_mesh ('auto' = (num_nodes, devices per node)), or pass e.g. device_mesh=(2, 8) for 2 nodes "
        "of 8 devices",
    )


@rule(
    "LP110", "warning", "construction", "hybrid sharding with a single replica",
    fails='Trainer(strategy="fsdp_hybrid_shard", accelerator="cuda", devices=8, num_nodes=1)',
    fixed='Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 4)), '
    'accelerator="cuda", devices=8, num_nodes=1)',
)  # fmt: skip
def hybrid_has_replicas(ctx: Context) -> Problem | None:
    mesh = resolved_mesh(ctx)
    if mesh is None or mesh[0] != 1 or mesh[1] != ctx.world_size or ctx.world_size == 1:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: {_mesh_text(mesh)}; with one replica hybrid sharding is full "
        "sharding with an extra process group to replicate across",
        "on one node use strategy='fsdp_grad_op' (fastest when the model fits) or strategy='fsdp_offload_ckpt' "
        f"(largest models), or pass device_mesh=(replicas, shard size) with replicas>1, e.g. "
        f"device_mesh=(2, {max(ctx.world_size // 2, 1)})",
    )


@rule(
    "LP116", "error", "construction", "hybrid sharding with shard groups of one device",
    fails='Trainer(strategy="fsdp_hybrid_shard", accelerator="cuda", devices=1, num_nodes=4)',
    fixed='Trainer(strategy="fsdp_grad_op", accelerator="cuda", devices=1, num_nodes=4)',
    evidence="runtime: 2 processes: torch's FSDP init switches to NO_SHARD over a 1-rank group, so no gradient reaches "
    "the other replica",
)  # fmt: skip
def shards_have_peers(ctx: Context) -> Problem | None:
    mesh = resolved_mesh(ctx)
    if mesh is None or mesh[1] != 1 or mesh[0] < 2 or mesh[0] != ctx.world_size:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: {_mesh_text(mesh)}; torch turns a shard group of one device into "
        "NO_SHARD and then never all-reduces the gradients across the replicas, so the replicas train apart "
        "silently",
        "with one device per node use strategy='fsdp_grad_op' or strategy='fsdp_offload_ckpt' (sharding across "
        f"the {ctx.world_size} devices), or strategy='ddp' when the model fits on one device",
    )


@rule(
    "LP112", "error", "construction", "device_mesh does not cover devices × nodes",
    fails='Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 4)), '
    'accelerator="cuda", devices=8, num_nodes=2)',
    fixed='Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 8)), '
    'accelerator="cuda", devices=8, num_nodes=2)',
    evidence="runtime: torch raises RuntimeError for a larger mesh; the rank a smaller mesh leaves out raises "
    "IndexError, 2 processes",
)  # fmt: skip
def mesh_matches_world(ctx: Context) -> Problem | None:
    mesh = resolved_mesh(ctx)
    if mesh is None or mesh[0] * mesh[1] == ctx.world_size:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: {_mesh_text(mesh)}, but the world size is {ctx.world_arithmetic}; "
        "Lightning would only fail once every process has joined",
        f"drop device_mesh ('auto' = ({ctx.num_nodes}, {ctx.devices_per_node})), or pass "
        f"device_mesh=({ctx.num_nodes}, {ctx.devices_per_node})",
    )


@rule(
    "LP113", "warning", "construction", "shard groups that straddle node boundaries unevenly",
    fails='Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 12)), '
    'accelerator="cuda", devices=8, num_nodes=3)',
    fixed='Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(3, 8)), '
    'accelerator="cuda", devices=8, num_nodes=3)',
)  # fmt: skip
def shards_align_with_nodes(ctx: Context) -> Problem | None:
    mesh = resolved_mesh(ctx)
    if mesh is None or mesh[0] * mesh[1] != ctx.world_size:
        return None
    per_node = ctx.devices_per_node
    if per_node % mesh[1] == 0 or mesh[1] % per_node == 0:  # inside a node, or whole nodes: both are clean
        return None
    sizes = [size for size in range(1, per_node + 1) if per_node % size == 0]
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: {_mesh_text(mesh)}; a shard size of {mesh[1]} neither divides the "
        f"{per_node} devices per node nor is a multiple of them, so some shard groups straddle nodes and their "
        "all-gathers run at the speed of the inter-node network",
        f"use a shard size that divides {per_node} ({', '.join(map(str, sizes))}) or a multiple of it (whole "
        f"nodes), e.g. device_mesh=({ctx.num_nodes}, {per_node})",
    )


blocks_found_to_wrap = repeated_block(
    "LP115", "no repeated block found to wrap",
    consequence="the whole model becomes one FSDP unit, so communication cannot overlap computation",
    hint="pass the block class: lightning_presets.strategy({preset!r}, auto_wrap_policy={{MyBlock}}), or hold "
    "the blocks in an nn.ModuleList",
    unless_given=("auto_wrap_policy",),
    setup='Trainer(strategy="fsdp_grad_op", accelerator="cuda", devices=8).fit(model)',
)  # fmt: skip


_COMMON: tuple[Rule, ...] = (
    fsdp_needs_cuda,
    sharding_strategy_known,
    sharding_matches_preset,
    state_dict_type_known,
    mesh_needs_hybrid_sharding,
    clipping_by_norm_goes_through_the_module,
    fabric_keeps_original_parameters,
    blocks_found_to_wrap,
    half_weights_have_a_scaler,
    *STRATEGY_HARDWARE_RULES,
)
HYBRID_RULES: tuple[Rule, ...] = (
    *_COMMON,
    device_mesh_shape,
    hybrid_has_replicas,
    shards_have_peers,
    mesh_matches_world,
    shards_align_with_nodes,
)
GRAD_OP_RULES: tuple[Rule, ...] = (*_COMMON, fsdp_has_peers)
