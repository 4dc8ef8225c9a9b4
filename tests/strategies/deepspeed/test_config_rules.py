"""``lightning_presets.strategies.deepspeed.config_rules``: each error rule's executed proof (``proves``), its accepted
neighbours (run, and each rule widened, by ``neighbours.neighbour_tests``), and the rules' tests.

DeepSpeed's engine needs CUDA, so each proof executes, on CPU, the Lightning or DeepSpeed code that fails on the
config the preset built with the guard switched off (``helpers.py``).
"""

from __future__ import annotations

from typing import Any

import pytest
from jobs import Steps
from lightning.pytorch import Trainer
from proof import Proof

import lightning_presets
from lightning_presets.tools.simulation import SimulatedGPU, simulated_cuda
from neighbours import LINEAR, Neighbour, _ds, _t, adder, n, neighbour_tests
from strategies.deepspeed.helpers import (
    _SEQUENCE_PARALLEL,
    _Z2,
    ZERO2,
    _cuda_trainer,
    _deepspeed_config,
    _fabric_batch,
    _fabric_ds,
    _strategy,
    _trainer_batch,
    _trainer_config,
    needs_deepspeed,
)

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP405",
    n(_t(_ds('{"bf16": {"enabled": True}, ' + _Z2 + "}")), "bf16 alone"),
    n(_t(_ds('{"fp16": {"enabled": True}, ' + _Z2 + "}"), "cuda", ', precision="16-mixed"'), "fp16 alone"),
    n(_t(_ds('{"fp16": {"enabled": False}, "bf16": {"enabled": True}, ' + _Z2 + "}")), "fp16 disabled"),
    n(_t(_ds("{" + _Z2 + "}"), "cuda", ', precision="bf16-mixed"'), "precision= chooses bf16"),
)
_add(
    "LP406",
    n(_fabric_batch(32, 4), "32 = 4 × 1 × 8"),
    n(_fabric_batch(64, 4), "64 = 4 × 2 × 8: DeepSpeed derives 2 accumulation steps"),
    n(_fabric_batch(64, 4, 2), "64 = 4 × 2 × 8, the steps given"),
    n(_fabric_batch(16, 4, 1, 4), "16 = 4 × 1 × 4 devices"),
    n(
        _fabric_ds.format(_ds(_SEQUENCE_PARALLEL, target=', target="fabric"'), 8),
        "Ulysses sequence parallelism: DeepSpeed's data-parallel world is 8 / sequence_parallel_size = 4, so "
        "16 = 4 × 1 × 4 (deepspeed/runtime/config.py divides the world size by sequence_parallel_size); the review's "
        "false rejection of LP406/LP418",
    ),
)
_add(
    "LP407",
    n(_trainer_batch(64, 4, 2), "64 = 4 × 2 × 8"),
    n(_trainer_batch(32, 4, 1), "32 = 4 × 1 × 8"),
    n(_trainer_batch(128, 4, 4), "128 = 4 × 4 × 8"),
    n(_trainer_batch(16, 4, 2, 2), "16 = 4 × 2 × 2 devices"),
    n(
        _t(_ds(_SEQUENCE_PARALLEL), "cuda", ", accumulate_grad_batches=1") + f".fit({LINEAR})",
        "sequence_parallel_size=2: 16 = 4 × 1 × (8 / 2), as DeepSpeed's config counts the data-parallel world",
    ),
)
_add(
    "LP408",
    n(_t(_ds("{" + _Z2 + "}")), "no 'auto' at all"),
    n(_t(_ds('{"train_micro_batch_size_per_gpu": 4, ' + _Z2 + "}")), "the micro-batch given"),
    n(
        _t(_ds('{"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}')),
        "'auto' inside zero_optimization, which DeepSpeed's model drops for its default",
    ),
    n(_t(_ds('{"bf16": {"enabled": "auto"}, ' + _Z2 + "}"), "cuda", ', precision="bf16-mixed"'), "'auto' in bf16"),
)
_add(
    "LP409",
    n(_t(_ds("{" + _Z2 + "}"), "cuda", ", accumulate_grad_batches=4"), "the Trainer's accumulate_grad_batches"),
    n(_t(_ds("{" + _Z2 + "}"), "cuda", ", accumulate_grad_batches=1"), "no accumulation"),
    n(
        _fabric_ds.format(_ds('{"gradient_accumulation_steps": 4, ' + _Z2 + "}", target=', target="fabric"'), 8),
        "Fabric takes gradient_accumulation_steps from the config",
    ),
)
_z3 = 'lightning_presets.strategy("deepspeed_zero3_offload_ckpt", {})'
_add(
    "LP413",
    n(_t(_z3.format("partition_activations=True")), "partitioned activations"),
    n(_t(_z3.format("partition_activations=True, contiguous_memory_optimization=False")), "contiguous off"),
    n(_t(_z3.format("partition_activations=True, cpu_checkpointing=True")), "activations checkpointed to the CPU"),
)
_add(
    "LP418",
    n(_t(_ds('{"zero_optimization": {"stage": 2, "reduce_bucket_size": 500000000}}')), "the key spelled right"),
    n(_t(_ds('{"zero_optimization": {"stage": 2, "allgather_bucket_size": 200000000}}')), "another ZeRO key"),
    n(_t(_ds('{"zero_optimization": {"stage": 2, "overlap_comm": True}}')), "overlap_comm"),
    n(_t(_ds('{"zero_optimization": {"stage": 2}, "steps_per_print": 100}')), "a top-level key"),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP405")
def test_lp405_fp16_and_bf16_together_fail_in_deepspeeds_config(proof: Proof) -> None:
    config = {"fp16": {"enabled": True}, "zero_optimization": {"stage": 2}}

    proof.refused("LP405", lambda: _cuda_trainer(_strategy(config=dict(config)), precision="bf16-mixed"))
    with proof.guard_off("LP405"):
        formatted = _trainer_config(_strategy(config=dict(config)), precision="bf16-mixed")
        assert formatted["bf16"] == {"enabled": True}  # Lightning added it from precision=
        with proof.raises(AssertionError, r"bfloat16 and fp16 modes cannot be simultaneously enabled"):
            _deepspeed_config(formatted)


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP406")
def test_lp406_fabrics_train_batch_size_fails_deepspeeds_batch_assertion(proof: Proof) -> None:
    from lightning.fabric import Fabric

    config = {"train_batch_size": 6, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}

    def build() -> Any:
        strategy = lightning_presets.strategy(ZERO2, target="fabric", config=dict(config))
        with simulated_cuda(1):
            return Fabric(strategy=strategy, accelerator="cuda", devices=1)

    proof.refused("LP406", build)
    with proof.guard_off("LP406"):
        fabric = build()
        fabric.strategy._format_config()  # what Fabric's setup does before deepspeed.initialize
        with proof.raises(AssertionError, r"Check batch related parameters"):
            _deepspeed_config(dict(fabric.strategy.config))


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP407")
def test_lp407_the_trainers_accumulation_fails_deepspeeds_batch_assertion(proof: Proof) -> None:
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}

    def fit_on_simulated_cuda() -> Any:  # LP407 is a `trainer` rule: it runs when fit connects the module
        made = _cuda_trainer(_strategy(config=dict(config)), accumulate_grad_batches=1)
        with simulated_cuda(1):
            made.fit(Steps())

    proof.refused("LP407", fit_on_simulated_cuda)
    with proof.guard_off("LP407"):
        formatted = _trainer_config(_strategy(config=dict(config)), accumulate_grad_batches=1)
        assert formatted["gradient_accumulation_steps"] == 1  # Lightning wrote the Trainer's accumulation
        with proof.raises(AssertionError, r"Check batch related parameters"):
            _deepspeed_config(formatted)


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP408")
def test_lp408_auto_batch_values_fail_in_deepspeeds_config(proof: Proof) -> None:
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}

    proof.refused("LP408", lambda: _cuda_trainer(_strategy(config=dict(config))))
    with proof.guard_off("LP408"):
        formatted = _trainer_config(_strategy(config=dict(config)))
        assert formatted["train_micro_batch_size_per_gpu"] == "auto"  # Lightning fills it only when absent
        with proof.raises(TypeError, r"str|int"):
            _deepspeed_config(formatted)


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP409")
def test_lp409_accumulation_steps_in_the_config_fail_in_fit(proof: Proof) -> None:
    config = {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}

    proof.refused("LP409", lambda: _cuda_trainer(_strategy(config=dict(config))))
    with proof.guard_off("LP409"), proof.raises(Exception, r"Do not set `gradient_accumulation_steps`"):
        _trainer_config(_strategy(config=dict(config)))


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
def test_lp421_the_configs_clipping_silently_wins_over_gradient_clip_val() -> None:
    """LP421 is a warning (the severity policy: an option silently overridden by another explicit setting of the
    user's): Lightning keeps the config's gradient_clipping and DeepSpeed's parser reads it, the Trainer's threshold
    is gone, the run trains at the config's. Its other sides: the Trainer's value alone reaches DeepSpeed, and the
    same value twice stays."""
    config = {"gradient_clipping": 1.0, "train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2}}
    with pytest.warns(lightning_presets.PresetWarning, match=r"LP421.*DeepSpeed clips the gradient norm at 1\.0"):
        formatted = _trainer_config(_strategy(config=dict(config)), gradient_clip_val=0.3)
    assert _deepspeed_config(formatted).gradient_clipping == 1.0  # what the warning says wins
    alone = {key: value for key, value in config.items() if key != "gradient_clipping"}
    assert _deepspeed_config(_trainer_config(_strategy(config=alone), gradient_clip_val=0.3)).gradient_clipping == 0.3
    twice = _trainer_config(_strategy(config=dict(config)), gradient_clip_val=1.0)
    assert _deepspeed_config(twice).gradient_clipping == 1.0


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP413")
def test_lp413_contiguous_checkpointing_fails_as_lightning_configures_it(proof: Proof) -> None:
    def strategy() -> Any:
        return lightning_presets.strategy("deepspeed_zero3_offload_ckpt", partition_activations=True,
                                          contiguous_memory_optimization=True)  # fmt: skip

    proof.refused("LP413", lambda: _cuda_trainer(strategy()))
    with proof.guard_off("LP413"):
        made = _cuda_trainer(strategy())
        with proof.raises(AssertionError, r"number of layers|partitioned activations"):
            made.strategy._set_deepspeed_activation_checkpointing()  # what Lightning's setup calls


@needs_deepspeed
@pytest.mark.proves("LP418")
def test_lp418_the_parser_is_deepspeeds_own(proof: Proof, cuda8: SimulatedGPU) -> None:
    """The config the rule refuses is refused by DeepSpeed's own DeepSpeedConfig (what the engine builds at `fit`)."""
    from deepspeed.runtime.config import DeepSpeedConfig

    typo = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}}
    strategy = lightning_presets.strategy
    proof.refused(
        "LP418",
        lambda: Trainer(strategy=strategy("deepspeed_zero2_offload", config=dict(typo)), accelerator="cuda", devices=8),
    )
    with proof.raises(Exception, "reduce_bucket_sise", code="LP418"):
        DeepSpeedConfig(typo)
    DeepSpeedConfig({**typo, "zero_optimization": {"stage": 2, "reduce_bucket_size": 5}})
