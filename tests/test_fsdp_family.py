"""``fsdp_hybrid_shard`` and ``fsdp_grad_op``: their guards (LP110-LP115 plus the shared FSDP rules), their
construction on simulated CUDA in the four namespaces, and the hooks (HSDP mesh filled from the final
context, auto-wrap without activation checkpointing).

FSDP1 cannot run on CPU: nothing here runs FSDP. The hooks go through Lightning's real
``_setup_model``/``setup_module`` with torch's ``FullyShardedDataParallel`` replaced by a recorder.
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from typing import Any

import pytest
from torch import nn
from torch.distributed.fsdp import ShardingStrategy

import lightning_presets
from helpers import NAMESPACE_IDS, NAMESPACES, QUIET, context, setup_model, wrapped_modules
from lightning_presets import Context, Options, PresetConfigError, PresetWarning
from lightning_presets.core.versions import recorded
from lightning_presets.strategies.fsdp import sharding_rules as family
from lightning_presets.tools.simulation import SimulatedGPU
from models import Block, FlatMLP, TinyTransformer

HYBRID = "fsdp_hybrid_shard"
GRAD_OP = "fsdp_grad_op"
TWO_NODES = {"accelerator": "cuda", "devices": 8, "num_nodes": 2}
BASE = context(
    HYBRID,
    {"sharding_strategy": "HYBRID_SHARD", "device_mesh": "auto", "auto_wrap_policy": None},
    num_nodes=2,
    precision_plugin="FSDPPrecision",
)


def ctx(device_mesh: Any = "auto", **changes: Any) -> Context:
    return dataclasses.replace(BASE, options={**BASE.options, "device_mesh": device_mesh}, **changes)


def options(preset: str = HYBRID, **values: Any) -> Options:
    return Options(preset=preset, target="trainer", values=values, overrides=values)


def build(namespace: tuple[str, str, str], strategy: Any = HYBRID, **kwargs: Any) -> Any:
    """Construct that namespace's ``Trainer``/``Fabric`` and return its strategy."""
    _, package, caller = namespace
    constructor = getattr(importlib.import_module(package), caller)
    built = constructor(strategy=strategy, **(QUIET if caller == "Trainer" else {}), **kwargs)
    return built.strategy if caller == "Trainer" else built._strategy


def trainer_strategy(strategy: Any = HYBRID, **kwargs: Any) -> Any:
    return build(NAMESPACES[0], strategy, **kwargs)


def fsdp_kwargs(strategy: Any) -> dict[str, Any]:
    return strategy.kwargs if hasattr(strategy, "kwargs") else strategy._fsdp_kwargs  # type: ignore[no-any-return]


# ---------------------------------------------------------------------------------------------- rules


def test_lp110_warns_about_a_single_replica_and_names_the_presets_to_use() -> None:
    finding = family.hybrid_has_replicas(ctx(num_nodes=1))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP110", "warning")
    assert "devices=8, num_nodes=1" in finding.message
    assert "device_mesh=(1, 8): 1 replica(s)" in finding.message
    assert "fsdp_grad_op" in finding.hint
    assert "fsdp_offload_ckpt" in finding.hint
    assert "device_mesh=(2, 4)" in finding.hint


@pytest.mark.parametrize(("mesh", "nodes"), [("auto", 2), ((2, 4), 1), ((2, 8), 2)])
def test_lp110_accepts_replicas_on_one_node_or_across_nodes(mesh: Any, nodes: int) -> None:
    """An explicit mesh on one 8-GPU node replicates inside the node: nothing to warn about."""
    assert family.hybrid_has_replicas(ctx(device_mesh=mesh, num_nodes=nodes)) is None


def test_lp116_rejects_shard_groups_of_one_device() -> None:
    finding = family.shards_have_peers(ctx(devices_per_node=1, num_nodes=4))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP116", "error")
    assert "device_mesh=(4, 1)" in finding.message
    assert "NO_SHARD" in finding.message
    assert "fsdp_grad_op" in finding.hint


@pytest.mark.parametrize(("mesh", "per_node", "nodes"), [("auto", 8, 2), ((2, 4), 8, 1), ("auto", 1, 1)])
def test_lp116_accepts_shard_groups_of_several_devices(mesh: Any, per_node: int, nodes: int) -> None:
    assert family.shards_have_peers(ctx(device_mesh=mesh, devices_per_node=per_node, num_nodes=nodes)) is None


@pytest.mark.parametrize("preset", [GRAD_OP, "fsdp_offload_ckpt"])
def test_lp117_rejects_a_two_dimensional_mesh_without_hybrid_sharding(preset: str) -> None:
    from lightning_presets.strategies.fsdp import rules as fsdp

    finding = fsdp.mesh_needs_hybrid_sharding(options(preset, device_mesh=(2, 8), sharding_strategy="FULL_SHARD"))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP117", "error")
    assert "only the first dimension" in finding.message
    assert "fsdp_hybrid_shard" in finding.hint


@pytest.mark.parametrize(
    ("mesh", "sharding"),
    [((2, 8), "HYBRID_SHARD"), ("auto", "_HYBRID_SHARD_ZERO2"), (None, "FULL_SHARD"), ((16,), "FULL_SHARD")],
)
def test_lp117_accepts_hybrid_sharding_or_no_two_dimensional_mesh(mesh: Any, sharding: str) -> None:
    from lightning_presets.strategies.fsdp import rules as fsdp

    assert fsdp.mesh_needs_hybrid_sharding(options(HYBRID, device_mesh=mesh, sharding_strategy=sharding)) is None


@pytest.mark.parametrize("mesh", [(2, 4, 2), (0, 16), (2, -8), (2.0, 8), "2x8", 16])
def test_lp111_rejects_a_malformed_device_mesh(mesh: Any) -> None:
    finding = family.device_mesh_shape(options(device_mesh=mesh))
    assert finding is not None
    assert finding.code == "LP111"
    assert f"device_mesh={mesh!r}" in finding.message
    assert "device_mesh=(2, 8)" in finding.hint


@pytest.mark.parametrize("mesh", ["auto", (2, 8), [4, 4], None])
def test_lp111_accepts_auto_and_pairs_of_positive_integers(mesh: Any) -> None:
    assert family.device_mesh_shape(options(device_mesh=mesh)) is None


def test_lp112_rejects_a_mesh_that_does_not_cover_the_world_and_shows_the_arithmetic() -> None:
    finding = family.mesh_matches_world(ctx(device_mesh=(2, 4)))
    assert finding is not None
    assert finding.code == "LP112"
    assert "device_mesh=(2, 4): 2 replica(s) × shard size 4 = 8" in finding.message
    assert "devices=8 × num_nodes=2 = 16" in finding.message
    assert "device_mesh=(2, 8)" in finding.hint


@pytest.mark.parametrize("mesh", ["auto", (2, 8), (4, 4)])
def test_lp112_accepts_a_mesh_of_the_world_size(mesh: Any) -> None:
    assert family.mesh_matches_world(ctx(device_mesh=mesh)) is None


def test_lp112_auto_mesh_always_matches_the_world() -> None:
    assert family.resolved_mesh(ctx(devices_per_node=4, num_nodes=3)) == (3, 4)
    assert family.mesh_matches_world(ctx(devices_per_node=4, num_nodes=3)) is None


def test_lp113_warns_about_shard_groups_that_straddle_nodes_unevenly() -> None:
    finding = family.shards_align_with_nodes(ctx(device_mesh=(2, 12), num_nodes=3))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP113", "warning")
    assert "shard size of 12 neither divides the 8 devices per node nor is a multiple of them" in finding.message
    assert "(1, 2, 4, 8)" in finding.hint
    assert "device_mesh=(3, 8)" in finding.hint


@pytest.mark.parametrize(("mesh", "nodes"), [((4, 4), 2), ((1, 16), 2), ((2, 16), 4)])
def test_lp113_accepts_shard_groups_inside_a_node_or_of_whole_nodes(mesh: Any, nodes: int) -> None:
    assert family.shards_align_with_nodes(ctx(device_mesh=mesh, num_nodes=nodes)) is None


def test_lp113_leaves_a_mesh_of_the_wrong_size_to_lp112() -> None:
    assert family.shards_align_with_nodes(ctx(device_mesh=(1, 12))) is None


@pytest.mark.parametrize(
    ("preset", "value"),
    [(GRAD_OP, "FULL_SHARD"), (GRAD_OP, ShardingStrategy.HYBRID_SHARD), (HYBRID, "SHARD_GRAD_OP")],
)
def test_lp114_rejects_a_sharding_strategy_of_another_preset(preset: str, value: Any) -> None:
    finding = family.sharding_matches_preset(options(preset, sharding_strategy=value))
    assert finding is not None
    assert finding.code == "LP114"
    assert f"sharding_strategy={value!r}" in finding.message
    assert "fsdp_offload_ckpt" in finding.hint


@pytest.mark.parametrize(
    ("preset", "value"),
    [(GRAD_OP, "SHARD_GRAD_OP"), (GRAD_OP, ShardingStrategy.SHARD_GRAD_OP), (HYBRID, "hybrid_shard"),
     (HYBRID, "_HYBRID_SHARD_ZERO2"), (HYBRID, "BOGUS")],  # not a sharding strategy at all: LP104's, not LP114's
)  # fmt: skip
def test_lp114_accepts_the_presets_own_sharding_strategy(preset: str, value: Any) -> None:
    assert family.sharding_matches_preset(options(preset, sharding_strategy=value)) is None


def test_lp115_warns_without_a_repeated_block() -> None:
    finding = family.blocks_found_to_wrap(ctx(), FlatMLP())
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP115", "warning")
    assert "FlatMLP" in finding.message
    assert "body (Sequential), head (Linear)" in finding.message
    assert "auto_wrap_policy={MyBlock}" in finding.hint


def test_lp115_accepts_a_model_with_blocks_or_a_policy() -> None:
    assert family.blocks_found_to_wrap(ctx(), TinyTransformer()) is None
    with_policy = dataclasses.replace(BASE, options={**BASE.options, "auto_wrap_policy": {nn.Linear}})
    assert family.blocks_found_to_wrap(with_policy, FlatMLP()) is None


def test_presets_reuse_the_shared_fsdp_rules() -> None:
    for preset in (HYBRID, GRAD_OP):
        codes = {each.code for each in lightning_presets.get_preset(preset).rules}
        assert {"LP101", "LP105", "LP114", "LP115"} <= codes
    assert {"LP110", "LP111", "LP112", "LP113", "LP116"} <= {each.code for each in family.HYBRID_RULES}
    assert "LP106" in {each.code for each in family.GRAD_OP_RULES}


# ------------------------------------------------------------------- construction on simulated CUDA


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_hybrid_fills_the_mesh_from_nodes_and_devices(cuda8: SimulatedGPU, namespace: tuple[str, str, str]) -> None:
    strategy = build(namespace, **TWO_NODES)
    assert fsdp_kwargs(strategy)["device_mesh"] == (2, 8)
    assert strategy.sharding_strategy == ShardingStrategy.HYBRID_SHARD
    assert strategy._state_dict_type == "sharded"
    assert strategy._lp_context.world_size == 16


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_grad_op_constructs_in_every_namespace(cuda8: SimulatedGPU, namespace: tuple[str, str, str]) -> None:
    strategy = build(namespace, GRAD_OP, accelerator="cuda", devices=8)
    assert strategy.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP
    assert "device_mesh" not in fsdp_kwargs(strategy)
    assert strategy.cpu_offload.offload_params is False


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_lp110_at_construction_in_every_namespace(cuda8: SimulatedGPU, namespace: tuple[str, str, str]) -> None:
    with pytest.warns(PresetWarning) as caught:
        build(namespace, accelerator="cuda", devices=8)
    assert [w.message.finding.code for w in caught if isinstance(w.message, PresetWarning)] == ["LP110"]


def test_lp110_neighbour_an_explicit_mesh_on_one_node_is_accepted(cuda8: SimulatedGPU) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        strategy = trainer_strategy(
            lightning_presets.strategy(HYBRID, device_mesh=(2, 4)), accelerator="cuda", devices=8
        )
    assert strategy.kwargs["device_mesh"] == (2, 4)


def test_lp116_at_construction_two_nodes_of_one_device(cuda8: SimulatedGPU) -> None:
    with pytest.raises(PresetConfigError) as error:
        trainer_strategy(accelerator="cuda", devices=1, num_nodes=2)
    assert error.value.codes == ("LP116",)


def test_lp117_at_construction_for_a_grad_op_mesh(cuda8: SimulatedGPU) -> None:
    with pytest.raises(PresetConfigError) as error:
        lightning_presets.strategy(GRAD_OP, device_mesh=(2, 8))
    assert error.value.codes == ("LP117",)


def test_lp112_user_mesh_of_the_wrong_size_at_construction(cuda8: SimulatedGPU) -> None:
    with pytest.raises(PresetConfigError) as error:
        trainer_strategy(lightning_presets.strategy(HYBRID, device_mesh=(2, 4)), **TWO_NODES)
    assert error.value.codes == ("LP112",)
    assert "`Trainer(strategy='fsdp_hybrid_shard', devices=8, num_nodes=2)`" in str(error.value)


@pytest.mark.parametrize("mesh", [(4, 4), [4, 4]])
def test_lp112_neighbour_a_user_mesh_is_kept_as_a_tuple(cuda8: SimulatedGPU, mesh: Any) -> None:
    """A list (LightningCLI YAML) too: Lightning builds the mesh from tuples only."""
    strategy = trainer_strategy(lightning_presets.strategy(HYBRID, device_mesh=mesh), **TWO_NODES)
    assert strategy.kwargs["device_mesh"] == (4, 4)


def test_hybrid_device_mesh_none_means_the_automatic_mesh(cuda8: SimulatedGPU) -> None:
    strategy = trainer_strategy(lightning_presets.strategy(HYBRID, device_mesh=None), **TWO_NODES)
    assert strategy.kwargs["device_mesh"] == (2, 8)
    assert family.resolved_mesh(ctx(device_mesh=None)) == (2, 8)


def test_lp113_at_construction(cuda8: SimulatedGPU) -> None:
    with pytest.warns(PresetWarning) as caught:
        trainer_strategy(lightning_presets.strategy(HYBRID, device_mesh=(2, 12)), accelerator="cuda", devices=8,
                         num_nodes=3)  # fmt: skip
    assert [w.message.finding.code for w in caught if isinstance(w.message, PresetWarning)] == ["LP113"]


def test_lp113_neighbour_shard_groups_of_two_whole_nodes(cuda8: SimulatedGPU) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        strategy = trainer_strategy(lightning_presets.strategy(HYBRID, device_mesh=(2, 16)), accelerator="cuda",
                                    devices=8, num_nodes=4)  # fmt: skip
    assert strategy.kwargs["device_mesh"] == (2, 16)


def test_lp111_and_lp114_when_the_strategy_is_built() -> None:
    with pytest.raises(PresetConfigError) as error:
        lightning_presets.strategy(HYBRID, device_mesh=(2, 4, 2), sharding_strategy="FULL_SHARD")
    assert set(error.value.codes) == {"LP111", "LP114"}
    with pytest.warns(PresetWarning, match="LP114"):
        lightning_presets.strategy(GRAD_OP, sharding_strategy="FULL_SHARD", target="fabric")


def test_lp114_and_lp117_hybrid_preset_with_full_shard_keeps_its_mesh() -> None:
    """FULL_SHARD on the hybrid preset's automatic 2-D mesh would train apart: LP117 refuses, LP114 explains."""
    with pytest.raises(PresetConfigError) as error:
        lightning_presets.strategy(HYBRID, sharding_strategy="FULL_SHARD")
    assert error.value.codes == ("LP117", "LP114")


@pytest.mark.parametrize("preset", [HYBRID, GRAD_OP])
@pytest.mark.parametrize("caller", ["Trainer", "Fabric"])
def test_lp101_on_cpu(preset: str, caller: str) -> None:
    namespace = NAMESPACES[0] if caller == "Trainer" else NAMESPACES[1]
    with pytest.raises(PresetConfigError) as error:
        build(namespace, preset, accelerator="cpu", devices=2, num_nodes=2)
    assert "LP101" in error.value.codes


@pytest.mark.parametrize("preset", [HYBRID, GRAD_OP])
def test_a_plugin_fsdp_refuses_is_lightnings_construction_error(cuda8: SimulatedGPU, preset: str) -> None:
    from lightning.pytorch.plugins.precision import DoublePrecision

    with pytest.raises(TypeError, match="FSDPPrecision"):
        trainer_strategy(preset, plugins=[DoublePrecision()], **TWO_NODES)
    strategy = trainer_strategy(preset, precision="bf16-mixed", **TWO_NODES)
    assert type(strategy.precision_plugin).__name__ == "FSDPPrecision"


def test_lp106_grad_op_warns_on_one_device(cuda8: SimulatedGPU) -> None:
    with pytest.warns(PresetWarning, match="LP106"):
        trainer_strategy(GRAD_OP, accelerator="cuda", devices=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        trainer_strategy(GRAD_OP, accelerator="cuda", devices=2)


def test_hybrid_process_group_replaces_the_automatic_mesh() -> None:
    groups = (object(), object())
    strategy = lightning_presets.strategy(HYBRID, process_group=groups)
    assert strategy.kwargs["process_group"] is groups
    assert "device_mesh" not in strategy.kwargs


def test_tested_with_records_versions_and_construction_evidence() -> None:
    import lightning
    import torch

    for preset in (HYBRID, GRAD_OP):
        tested = lightning_presets.get_preset(preset).tested_with
        assert lightning.__version__ in recorded(tested, "lightning")
        assert torch.__version__.split("+")[0] in recorded(tested, "torch")
        assert "construction on simulated CUDA" in tested["evidence"]
        assert "runtime" not in tested["evidence"]


# ------------------------------------------------------ the hooks: Lightning's real setup path, FSDP replaced


def checkpoint_wrappers(model: nn.Module) -> int:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    return sum(isinstance(module, CheckpointWrapper) for module in model.modules())


@pytest.mark.parametrize("caller", ["Trainer", "Fabric"])
@pytest.mark.parametrize("preset", [HYBRID, GRAD_OP])
def test_hook_wraps_the_blocks_without_checkpointing(
    cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]], caller: str, preset: str
) -> None:
    strategy = build(NAMESPACES[0] if caller == "Trainer" else NAMESPACES[1], preset, **TWO_NODES)
    model = TinyTransformer(n_layers=3)
    setup_model(strategy, model)

    (call,) = recording_fsdp
    assert wrapped_modules(call["auto_wrap_policy"], model) == set(model.layers)
    assert call["sharding_strategy"] == strategy.sharding_strategy
    assert call.get("device_mesh") == ((2, 8) if preset == HYBRID else None)
    assert not strategy._activation_checkpointing_kwargs
    assert checkpoint_wrappers(model) == 0
    assert strategy.lp_blocks == {Block}


def test_hook_user_checkpointing_policy_still_applies(
    cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]]
) -> None:
    strategy = trainer_strategy(
        lightning_presets.strategy(GRAD_OP, activation_checkpointing_policy={Block}), **TWO_NODES
    )
    model = TinyTransformer(n_layers=2)
    setup_model(strategy, model)
    assert checkpoint_wrappers(model) == 2


def test_hook_warns_lp115_for_a_blockless_model(cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]]) -> None:
    strategy = trainer_strategy(GRAD_OP, accelerator="cuda", devices=8)
    with pytest.warns(PresetWarning, match="LP115"):
        setup_model(strategy, FlatMLP())
    (call,) = recording_fsdp
    assert "auto_wrap_policy" not in call
