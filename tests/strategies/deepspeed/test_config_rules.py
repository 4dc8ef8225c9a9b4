"""``lightning_presets.strategies.deepspeed.config_rules``: each error rule's executed proof (``proves``), its accepted
neighbours (run, and each rule widened, by ``neighbours.neighbour_tests``), and the rules' tests.

DeepSpeed's engine needs CUDA, so each proof executes, on CPU, the Lightning or DeepSpeed code that fails on the
config the preset built with the guard switched off (``helpers.py``).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
from jobs import Steps
from lightning.fabric import Fabric
from lightning.pytorch import Trainer
from proof import Proof

import lightning_presets
from helpers import QUIET, codes
from lightning_presets import PresetConfigError, PresetWarning
from lightning_presets.strategies.deepspeed import config_rules
from lightning_presets.tools.simulation import SimulatedGPU, simulated_cuda
from neighbours import LINEAR, Neighbour, _ds, _t, adder, n, neighbour_tests
from strategies.deepspeed.helpers import (
    _SEQUENCE_PARALLEL,
    _Z2,
    ZERO2,
    Blocks,
    _cuda_trainer,
    _deepspeed_config,
    _fabric_batch,
    _fabric_ds,
    _strategy,
    _trainer_batch,
    _trainer_config,
    ds_fabric,
    ds_trainer,
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


# --- the rules' tests ----------------------------------------------------------------------------------------


def test_batch_arithmetic_uses_the_real_world_size() -> None:
    assert config_rules.batch_arithmetic(64, 4, 2, 8) is None
    message = config_rules.batch_arithmetic(64, 4, 1, 8)
    assert message == (
        "train_batch_size=64, but train_micro_batch_size_per_gpu=4 × gradient_accumulation_steps=1 × world size 8 = 32"
    )
    assert config_rules.batch_arithmetic(64, 4, None, 8) is None  # DeepSpeed derives accumulation = 2
    assert "4 × world size 8 = 32" in (config_rules.batch_arithmetic(48, 4, None, 8) or "")


@needs_deepspeed
def test_lp404_parameter_offload_below_stage_3_is_ignored_and_warned(cuda8: SimulatedGPU) -> None:
    """DeepSpeed passes only offload_optimizer to its stage 1/2 optimizer: the parameters stay on the GPU."""
    with pytest.warns(PresetWarning) as caught:
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", offload_parameters=True))
    (warning,) = [w.message.finding for w in caught if isinstance(w.message, PresetWarning)]
    assert (warning.code, warning.severity) == ("LP404", "warning")
    assert "ZeRO stage 2" in warning.message
    assert "silently ignores offload_param" in warning.message
    config = {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=config))


@needs_deepspeed
def test_lp405_fp16_and_bf16_together(cuda8: SimulatedGPU) -> None:
    both = {"fp16": {"enabled": True}, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    with pytest.raises(PresetConfigError) as excinfo:
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=both))
    assert codes(excinfo) == ("LP405",)
    assert "the config enables both" in excinfo.value.findings[0].message
    fp16 = {"fp16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    with pytest.raises(PresetConfigError) as excinfo:
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=fp16), precision="bf16-mixed")
    assert "precision='bf16-mixed' makes Lightning add bf16.enabled=True" in excinfo.value.findings[0].message
    bf16 = {"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=bf16), precision="bf16-mixed")


@needs_deepspeed
def test_lp405_reads_a_config_file_as_lightning_loaded_it(cuda8: SimulatedGPU, tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text('{"fp16": {"enabled": true}, "bf16": {"enabled": true}}')
    with pytest.raises(PresetConfigError) as excinfo:
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=str(path)))
    assert codes(excinfo) == ("LP405",)


@needs_deepspeed
def test_lp406_fabric_batch_size_shows_the_arithmetic(cuda8: SimulatedGPU) -> None:
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}
    with pytest.raises(PresetConfigError) as excinfo:
        ds_fabric(config, devices=4, num_nodes=2)
    assert codes(excinfo) == ("LP406",)
    message = excinfo.value.findings[0].message
    assert "train_micro_batch_size_per_gpu=4 × gradient_accumulation_steps=4 × world size 8 = 128" in message
    assert "devices=4 × num_nodes=2 = 8" in message
    assert "set it to 4 × 4 × 8 = 128" in excinfo.value.findings[0].hint
    with pytest.raises(PresetConfigError):
        ds_fabric({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 4})
    ds_fabric({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})
    ds_fabric({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})  # accumulation derived: 2


@needs_deepspeed
def test_lp407_trainer_batch_size_is_checked_with_accumulate_grad_batches(cuda8: SimulatedGPU) -> None:
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", config=config)
    built = ds_trainer(strategy, accumulate_grad_batches=1)
    model = Blocks()
    model.trainer = built
    with pytest.raises(PresetConfigError) as excinfo:
        built.strategy.connect(model)
    assert codes(excinfo) == ("LP407",)
    assert "= 32" in excinfo.value.findings[0].message
    assert "accumulate_grad_batches=1" in excinfo.value.findings[0].message
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", config=config)
    built = ds_trainer(strategy, accumulate_grad_batches=2)
    model.trainer = built
    built.strategy.connect(model)


@needs_deepspeed
def test_lp408_auto_values_are_listed(cuda8: SimulatedGPU) -> None:
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}
    with pytest.raises(PresetConfigError) as excinfo:
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=config))
    assert codes(excinfo) == ("LP408", "LP414")
    error, warning = excinfo.value.findings
    assert "train_micro_batch_size_per_gpu;" in error.message
    assert "delete train_micro_batch_size_per_gpu (Lightning uses the train dataloader's batch size)" in error.hint
    assert (warning.code, warning.severity) == ("LP414", "warning")
    assert "zero_optimization.reduce_bucket_size" in warning.message
    assert "give zero_optimization.reduce_bucket_size a number" in warning.hint
    ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": {"stage": 2}}))


@needs_deepspeed
def test_lp414_auto_inside_a_modelled_section_is_only_warned(cuda8: SimulatedGPU) -> None:
    """DeepSpeed's config classes replace "auto" there with their defaults: nothing fails (formerly LP408)."""
    config = {"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}
    with pytest.warns(PresetWarning, match="LP414"):
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=config))


@needs_deepspeed
def test_lp409_accumulation_in_the_config_only_with_the_trainer(cuda8: SimulatedGPU) -> None:
    config = {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}
    with pytest.raises(PresetConfigError) as excinfo:
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=config))
    assert codes(excinfo) == ("LP409",)
    assert "accumulate_grad_batches=4" in excinfo.value.findings[0].hint
    ds_fabric(config)  # Fabric leaves accumulation to the config


@needs_deepspeed
def test_errors_are_reported_together(cuda8: SimulatedGPU) -> None:
    config = {"gradient_accumulation_steps": 2, "train_batch_size": "auto", "fp16": {"enabled": True}}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", config=config)
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy=strategy, accelerator="cpu", devices=2, precision="bf16-mixed", **QUIET)
    assert codes(excinfo) == ("LP403", "LP405", "LP408", "LP409")


SP = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "sequence_parallel_size": 2}


@needs_deepspeed
def test_lp406_divides_the_world_by_sequence_parallel_size(cuda8: SimulatedGPU) -> None:
    """Issue 23: DeepSpeed's batch arithmetic spans the data-parallel ranks, world size / sequence_parallel_size."""
    with pytest.raises(PresetConfigError) as excinfo:
        ds_fabric({**SP, "train_batch_size": 64})  # 4 × 2 × (8 / 2) = 32
    assert codes(excinfo) == ("LP406",)
    finding = excinfo.value.findings[0]
    assert "gradient_accumulation_steps=2 × world size 4 = 32" in finding.message
    assert "devices=8 × num_nodes=1 = 8, of which DeepSpeed's data parallelism spans 4 (sequence_parallel_size=2)" in (
        finding.message
    )
    assert "set it to 4 × 2 × 4 = 32" in finding.hint
    ds_fabric({**SP, "train_batch_size": 32})  # formerly refused against the whole world (4 × 2 × 8 = 64)
    ds_fabric({**SP, "train_batch_size": 32, "data_parallel_size": 4})  # the mesh deepspeed.initialize builds
    ds_fabric({**SP, "train_batch_size": 64, "sequence_parallel_size": 1})
    ds_fabric({**SP, "train_batch_size": 64, "gradient_accumulation_steps": 4})


@needs_deepspeed
def test_lp418_and_lp407_parse_with_sequence_parallel_size(cuda8: SimulatedGPU) -> None:
    refused = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "sequence_parallel_size": 3}
    with pytest.raises(PresetConfigError) as excinfo:  # 8 / 3 data-parallel ranks: DeepSpeed's own assertion
        ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=refused))
    assert codes(excinfo) == ("LP418",)
    assert "32 != 4 * 1 * 2.66" in excinfo.value.findings[0].message
    for accepted in (
        {**refused, "sequence_parallel_size": 2, "train_batch_size": 16},  # 4 × 1 × (8 / 2)
        {**refused, "sequence_parallel_size": 1},  # 4 × 1 × 8
        {key: value for key, value in refused.items() if key != "train_batch_size"},  # derived by DeepSpeed
    ):
        built = ds_trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=accepted))
        model = Blocks()
        model.trainer = built
        built.strategy.connect(model)  # LP407 (the Trainer's accumulation) divides by it too


_CLIPPING = {"zero_optimization": {"stage": 2}}


def _clipping_findings(configured: float | None, requested: float | None) -> set[str]:
    config = dict(_CLIPPING) if configured is None else {**_CLIPPING, "gradient_clipping": configured}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", config=config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ds_trainer(strategy, **({} if requested is None else {"gradient_clip_val": requested}))
    return {each.message.finding.code for each in caught if isinstance(each.message, PresetWarning)}


@needs_deepspeed
@pytest.mark.parametrize(("configured", "requested"), [(1.0, 0.3), (0.3, 1.0), (1, 2)])
def test_lp421_warns_whichever_threshold_is_larger(cuda8: SimulatedGPU, configured: float, requested: float) -> None:
    """The config's gradient_clipping wins over a different gradient_clip_val, larger or smaller: a warning, never an
    error (the run trains, at the config's threshold)."""
    assert "LP421" in _clipping_findings(configured, requested)


@needs_deepspeed
@pytest.mark.parametrize(
    ("configured", "requested"),
    [(None, 0.3), (1.0, None), (1.0, 1), (0.3, 0.3), (1.0, 0.0)],
    ids=["the-trainer's-alone", "the-config's-alone", "the-same-twice", "the-same-below-1", "the-trainer-clips-none"],
)
def test_lp421_is_quiet_with_one_threshold(cuda8: SimulatedGPU, configured: float | None, requested: float) -> None:
    assert "LP421" not in _clipping_findings(configured, requested)


def test_lp421_is_a_warning() -> None:
    assert config_rules.one_clipping_threshold.severity == "warning"
