"""``fsdp_offload_ckpt``: its guards (LP101-LP107), its construction in the four namespaces on simulated
CUDA, and the repeated-block hook that sets auto-wrap and activation checkpointing.

FSDP1 cannot run on CPU, so nothing here runs FSDP: the hook is exercised through Lightning's real
``_setup_model``/``setup_module`` with torch's ``FullyShardedDataParallel`` replaced by a recorder.
Activation checkpointing itself is real (it works on CPU).
"""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from typing import Any

# Import every namespace before the first simulated_cuda(): a namespace first imported while the simulation
# is active would copy the patched device count and keep it afterwards (see the report on _simulation.py).
import lightning.pytorch  # noqa: F401
import lightning_fabric  # noqa: F401
import pytest
import pytorch_lightning  # noqa: F401
import torch
from torch import nn
from torch.distributed.fsdp import ShardingStrategy

import lightning_presets
from helpers import NAMESPACE_IDS, QUIET, RecordingFSDP, context, setup_model, wrapped_modules
from helpers import NAMESPACES as CONSTRUCTORS
from lightning_presets import Context, Options, PresetConfigError, PresetWarning
from lightning_presets.inspection.blocks import describe_children, find_repeated_blocks
from lightning_presets.strategies.fsdp import rules as fsdp
from lightning_presets.tools.examples import check_examples
from lightning_presets.tools.simulation import SimulatedGPU
from models import Attention, Block, FeedForward, FlatMLP, TinyTransformer, TwoStacks, next_token_loss

PRESET = "fsdp_offload_ckpt"
CUDA_CONTEXT = context(
    PRESET,
    {"sharding_strategy": "FULL_SHARD", "auto_wrap_policy": None, "activation_checkpointing_policy": None},
    precision_plugin="FSDPPrecision",
)

# (target, constructor module, constructor name, strategies package, precision package)
NAMESPACES = [
    (target, package, caller, f"{package}.strategies", f"{package}.plugins.precision")
    for target, package, caller in CONSTRUCTORS
]


def ctx(**changes: Any) -> Context:
    return dataclasses.replace(CUDA_CONTEXT, **changes)


def options(**values: Any) -> Options:
    return Options(preset=PRESET, target="trainer", values=values, overrides=values)


def build(namespace: tuple[str, ...], **kwargs: Any) -> Any:
    """Construct ``Trainer``/``Fabric`` of that namespace and return its strategy."""
    _, package, caller, _, _ = namespace
    constructor = getattr(importlib.import_module(package), caller)
    extra = QUIET if caller == "Trainer" else {}
    built = constructor(**{"strategy": PRESET, **extra, **kwargs})
    return built.strategy if caller == "Trainer" else built._strategy


def strategy_of(trainer_kwargs: dict[str, Any], caller: str = "Trainer") -> Any:
    return build(NAMESPACES[0] if caller == "Trainer" else NAMESPACES[1], **trainer_kwargs)


# ---------------------------------------------------------------------------------------------- rules


def test_lp101_rejects_cpu_and_points_to_cpu_presets() -> None:
    finding = fsdp.fsdp_needs_cuda(ctx(accelerator="cpu", devices_per_node=2))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP101", "error")
    assert "accelerator='cpu'" in finding.message
    assert "2 device(s)" in finding.message
    assert "tp2d_hybrid" in finding.hint
    assert "ddp" in finding.hint


@pytest.mark.parametrize("accelerator", ["mps", "xla"])
def test_lp101_rejects_other_accelerators(accelerator: str) -> None:
    finding = fsdp.fsdp_needs_cuda(ctx(accelerator=accelerator))
    assert finding is not None
    assert f"accelerator={accelerator!r}" in finding.message


def test_lp101_accepts_cuda() -> None:
    assert fsdp.fsdp_needs_cuda(ctx(accelerator="cuda")) is None


def test_lp104_rejects_unknown_sharding_strategy_with_choices() -> None:
    finding = fsdp.sharding_strategy_known(options(sharding_strategy="FULL_SHARDED"))
    assert finding is not None
    assert finding.code == "LP104"
    assert "sharding_strategy='FULL_SHARDED'" in finding.message
    assert all(repr(choice) in finding.hint for choice in fsdp.SHARDING_STRATEGIES)


@pytest.mark.parametrize("value", ["FULL_SHARD", "shard_grad_op", ShardingStrategy.NO_SHARD])
def test_lp104_accepts_known_sharding_strategies(value: Any) -> None:
    assert fsdp.sharding_strategy_known(options(sharding_strategy=value)) is None


def test_lp105_rejects_unknown_state_dict_type() -> None:
    finding = fsdp.state_dict_type_known(options(state_dict_type="sharding"))
    assert finding is not None
    assert finding.code == "LP105"
    assert "state_dict_type='sharding'" in finding.message
    assert "'full'" in finding.hint
    assert "'sharded'" in finding.hint


@pytest.mark.parametrize("value", ["full", "sharded"])
def test_lp105_accepts_known_state_dict_types(value: str) -> None:
    assert fsdp.state_dict_type_known(options(state_dict_type=value)) is None


def test_lp106_warns_on_a_single_device() -> None:
    finding = fsdp.fsdp_has_peers(ctx(devices_per_node=1, num_nodes=1))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP106", "warning")
    assert "devices=1, num_nodes=1" in finding.message


@pytest.mark.parametrize(("devices", "nodes"), [(2, 1), (1, 2)])
def test_lp106_accepts_more_than_one_device(devices: int, nodes: int) -> None:
    assert fsdp.fsdp_has_peers(ctx(devices_per_node=devices, num_nodes=nodes)) is None


def test_lp107_warns_when_no_repeated_block_and_names_the_children() -> None:
    finding = fsdp.repeated_block_found(ctx(), FlatMLP())
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP107", "warning")
    assert "FlatMLP" in finding.message
    assert "body (Sequential), head (Linear)" in finding.message
    assert "auto_wrap_policy={MyBlock}" in finding.hint


def test_lp107_accepts_a_model_with_blocks() -> None:
    assert fsdp.repeated_block_found(ctx(), TinyTransformer()) is None


def test_lp107_accepts_a_blockless_model_when_both_policies_are_given() -> None:
    given = ctx(options={"auto_wrap_policy": {nn.Linear}, "activation_checkpointing_policy": {nn.Linear}})
    assert fsdp.repeated_block_found(given, FlatMLP()) is None


# ------------------------------------------------------------------------------------ block detection


def test_find_repeated_blocks_finds_the_transformer_block() -> None:
    assert find_repeated_blocks(TinyTransformer()) == {Block}


def test_find_repeated_blocks_prefers_the_largest_stack_by_parameters_not_by_count() -> None:
    # six small Linear layers versus two Blocks: the Blocks hold far more parameters
    assert find_repeated_blocks(TwoStacks()) == {Block}


def test_find_repeated_blocks_accepts_a_sequential_model_itself() -> None:
    assert find_repeated_blocks(nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))) == {nn.Linear}


@pytest.mark.parametrize(
    "model",
    [
        FlatMLP(),
        nn.Sequential(nn.Linear(4, 4)),  # one module is not a repetition
        nn.Sequential(nn.ReLU(), nn.ReLU(), nn.Linear(4, 4)),  # mixed types
        nn.Sequential(nn.Sequential(nn.ReLU(), nn.ReLU()), nn.Linear(2, 2)),  # identical but parameter-free
    ],
    ids=["flat-mlp", "single", "mixed", "parameter-free"],
)
def test_find_repeated_blocks_finds_nothing(model: nn.Module) -> None:
    assert find_repeated_blocks(model) == set()


def test_describe_children_is_truncated() -> None:
    model = nn.Sequential(*(nn.Linear(2, 2) for _ in range(9)))
    text = describe_children(model, limit=3)
    assert text == "0 (Linear), 1 (Linear), 2 (Linear), ... 6 more"


# --------------------------------------------------------------- construction on simulated CUDA (4 namespaces)


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_constructs_on_simulated_cuda_in_every_namespace(cuda8: SimulatedGPU, namespace: tuple[str, ...]) -> None:
    target, _, _, strategies_package, precision_package = namespace
    strategy = build(namespace, accelerator="cuda", devices=8, precision="bf16-mixed")
    own_fsdp = importlib.import_module(strategies_package).FSDPStrategy
    assert isinstance(strategy, own_fsdp)
    for other in NAMESPACES:  # the class tree of its own namespace, not another's
        if other[3] != strategies_package:
            assert not isinstance(strategy, importlib.import_module(other[3]).FSDPStrategy)
    assert strategy.cpu_offload.offload_params is True
    assert strategy.sharding_strategy == ShardingStrategy.FULL_SHARD
    precision = strategy.precision_plugin if namespace[2] == "Trainer" else strategy.precision
    assert type(precision) is importlib.import_module(precision_package).FSDPPrecision
    assert precision.precision == "bf16-mixed"
    assert strategy._lp_context.target == target
    assert strategy.world_size == 8


def test_pytorch_lightning_namespace_by_plain_import(cuda8: SimulatedGPU) -> None:
    import pytorch_lightning as pl

    trainer = pl.Trainer(strategy=PRESET, accelerator="cuda", devices=8, precision="16-mixed", **QUIET)
    assert isinstance(trainer.strategy, pl.strategies.FSDPStrategy)
    assert isinstance(trainer.strategy.precision_plugin, pl.plugins.precision.FSDPPrecision)
    assert trainer.strategy.precision_plugin.precision == "16-mixed"


def test_lightning_fabric_namespace_by_plain_import(cuda8: SimulatedGPU) -> None:
    import lightning_fabric as lf

    fabric = lf.Fabric(strategy=PRESET, accelerator="cuda", devices=4, precision="bf16-true")
    assert isinstance(fabric._strategy, lf.strategies.FSDPStrategy)
    assert fabric._strategy.precision.precision == "bf16-true"
    assert fabric.world_size == 4


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_lp101_on_cpu_in_every_namespace(namespace: tuple[str, ...]) -> None:
    with pytest.raises(PresetConfigError) as raised:
        build(namespace, accelerator="cpu", devices=2)
    assert raised.value.codes == ("LP101",)
    assert f"`{namespace[2]}(strategy='fsdp_offload_ckpt', accelerator='cpu')`" in str(raised.value)


def test_a_plugin_that_is_not_fsdp_precision_is_lightnings_own_construction_error(cuda8: SimulatedGPU) -> None:
    """The preset no longer stores any plugin to report it later: Lightning's setter refuses it at construction."""
    from lightning.pytorch.plugins import DoublePrecision, HalfPrecision

    for plugin in (HalfPrecision("bf16-true"), DoublePrecision()):
        with pytest.raises(TypeError, match="FSDPPrecision"):
            strategy_of({"accelerator": "cuda", "devices": 8, "plugins": [plugin]})


def test_a_precision_string_fsdp_refuses_is_lightnings_own_construction_error(cuda8: SimulatedGPU) -> None:
    with pytest.raises(ValueError, match="not supported in FSDP") as raised:
        strategy_of({"accelerator": "cuda", "devices": 8, "precision": "64-true"})
    assert not isinstance(raised.value, PresetConfigError)


@pytest.mark.parametrize("caller", ["Trainer", "Fabric"])
def test_a_precision_string_gets_fsdp_precision(cuda8: SimulatedGPU, caller: str) -> None:
    strategy = strategy_of({"accelerator": "cuda", "devices": 8, "precision": "bf16-true"}, caller)
    precision = strategy.precision_plugin if caller == "Trainer" else strategy.precision
    assert type(precision).__name__ == "FSDPPrecision"
    assert precision.precision == "bf16-true"


@pytest.mark.parametrize("target", ["trainer", "fabric", "pytorch_lightning", "lightning_fabric"])
@pytest.mark.parametrize(
    ("key", "value", "code"), [("sharding_strategy", "FULL_SHARDED", "LP104"), ("state_dict_type", "sharding", "LP105")]
)
def test_override_typos_are_findings_not_key_errors(target: str, key: str, value: str, code: str) -> None:
    with pytest.raises(PresetConfigError) as raised:
        lightning_presets.strategy(PRESET, target=target, **{key: value})
    assert not isinstance(raised.value, KeyError)
    assert raised.value.codes == (code,)
    assert f"{key}={value!r}" in str(raised.value)


def test_override_neighbours_are_applied(cuda8: SimulatedGPU) -> None:
    strategy = lightning_presets.strategy(PRESET, sharding_strategy="SHARD_GRAD_OP", state_dict_type="full")
    assert strategy.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP
    assert strategy._state_dict_type == "full"
    strategy = strategy_of({"strategy": strategy, "accelerator": "cuda", "devices": 8})
    assert strategy.sharding_strategy == ShardingStrategy.SHARD_GRAD_OP
    assert strategy.cpu_offload.offload_params is True


def test_lp106_warns_on_one_simulated_gpu(cuda8: SimulatedGPU) -> None:
    with pytest.warns(PresetWarning) as caught:
        strategy_of({"accelerator": "cuda", "devices": 1})
    assert [warning.message.finding.code for warning in caught.list if isinstance(warning.message, PresetWarning)] == [
        "LP106"
    ]


def test_lp106_neighbour_eight_gpus_do_not_warn(cuda8: SimulatedGPU) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        strategy_of({"accelerator": "cuda", "devices": 8})


# ------------------------------------------------------------- the documented examples of every rule


def test_documented_examples_fail_and_pass() -> None:
    report = check_examples(PRESET)
    assert report.checked == 2 * len(lightning_presets.get_preset(PRESET).rules)
    assert report.failures == ()


# ------------------------------------------------------ the hook: Lightning's real setup path, FSDP replaced


def checkpointed_blocks(model: nn.Module) -> list[type[nn.Module]]:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    return [
        type(module._checkpoint_wrapped_module) for module in model.modules() if isinstance(module, CheckpointWrapper)
    ]


@pytest.mark.parametrize("caller", ["Trainer", "Fabric"])
def test_hook_wraps_and_checkpoints_the_repeated_blocks(
    cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]], caller: str
) -> None:
    strategy = strategy_of({"accelerator": "cuda", "devices": 8}, caller)
    model = TinyTransformer(n_layers=3)
    blocks = set(model.layers)
    setup_model(strategy, model)

    (call,) = recording_fsdp
    assert wrapped_modules(call["auto_wrap_policy"], model) == blocks
    assert call["cpu_offload"].offload_params is True
    assert call["sharding_strategy"] == ShardingStrategy.FULL_SHARD
    assert wrapped_modules(strategy._activation_checkpointing_kwargs["auto_wrap_policy"], model) == blocks
    assert strategy.lp_blocks == {Block}
    # Lightning applied activation checkpointing for real: each Block is now inside a CheckpointWrapper
    assert checkpointed_blocks(model) == [Block, Block, Block]


def test_hook_checkpointing_keeps_the_gradients(cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]]) -> None:
    """Runtime on CPU for the checkpointing half: same loss and gradients as the plain model."""
    torch.manual_seed(0)
    model = TinyTransformer()
    plain = TinyTransformer()
    plain.load_state_dict(model.state_dict())
    setup_model(strategy_of({"accelerator": "cuda", "devices": 8}), model)
    tokens = torch.randint(0, 32, (2, 8))
    loss, plain_loss = next_token_loss(model, tokens), next_token_loss(plain, tokens)
    loss.backward()
    plain_loss.backward()
    torch.testing.assert_close(loss, plain_loss)
    for (name, param), plain_param in zip(model.named_parameters(), plain.parameters(), strict=True):
        assert param.grad is not None, name
        torch.testing.assert_close(param.grad, plain_param.grad)


@pytest.mark.parametrize("caller", ["Trainer", "Fabric"])
def test_user_policies_win(cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]], caller: str) -> None:
    target = caller.lower()
    chosen = lightning_presets.strategy(
        PRESET, target=target, auto_wrap_policy={Attention}, activation_checkpointing_policy={FeedForward}
    )
    strategy = strategy_of({"strategy": chosen, "accelerator": "cuda", "devices": 8}, caller)
    model = TinyTransformer()
    setup_model(strategy, model)
    (call,) = recording_fsdp
    assert wrapped_modules(call["auto_wrap_policy"], model) == {layer.attn for layer in model.layers}
    assert checkpointed_blocks(model) == [FeedForward, FeedForward]


def test_user_auto_wrap_policy_wins_and_checkpointing_still_found(
    cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]]
) -> None:
    chosen = lightning_presets.strategy(PRESET, auto_wrap_policy={Attention})
    strategy = strategy_of({"strategy": chosen, "accelerator": "cuda", "devices": 8})
    model = TinyTransformer()
    setup_model(strategy, model)
    (call,) = recording_fsdp
    assert wrapped_modules(call["auto_wrap_policy"], model) == {layer.attn for layer in model.layers}
    assert checkpointed_blocks(model) == [Block, Block]


def test_hook_without_blocks_warns_lp107_and_wraps_the_whole_model(
    cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]]
) -> None:
    strategy = strategy_of({"accelerator": "cuda", "devices": 8})
    with pytest.warns(PresetWarning, match=r"LP107.*body \(Sequential\), head \(Linear\)"):
        setup_model(strategy, FlatMLP())
    (call,) = recording_fsdp
    assert "auto_wrap_policy" not in call
    assert strategy._activation_checkpointing_kwargs == {}


def test_hook_leaves_a_hand_wrapped_model_alone(cuda8: SimulatedGPU, recording_fsdp: list[dict[str, Any]]) -> None:
    """A model wrapped in configure_model: no policy is added, so Lightning has nothing to ignore or warn about."""
    strategy = strategy_of({"accelerator": "cuda", "devices": 8})
    model = TinyTransformer()
    model.add_module("wrapped", RecordingFSDP())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        setup_model(strategy, model)
    assert recording_fsdp == []  # Lightning did not wrap again
    assert "auto_wrap_policy" not in strategy.kwargs
    assert checkpointed_blocks(model) == []
