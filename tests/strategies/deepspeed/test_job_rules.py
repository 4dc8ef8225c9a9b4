"""``lightning_presets.strategies.deepspeed.job_rules``: each error rule's executed proof (``proves``; LP412's is a GPU
check, ``benchmarks/gpu/gpu_checks.py``), its accepted neighbours (run, and each rule widened, by
``neighbours.neighbour_tests``), and the rules' tests.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from jobs import Steps, fit, trainer
from lightning.fabric import Fabric
from lightning.pytorch import Trainer
from proof import Proof
from torch import nn

import lightning_presets
from helpers import QUIET, codes
from lightning_presets import PresetConfigError, PresetWarning
from lightning_presets.registry import requirements
from lightning_presets.tools.simulation import SimulatedGPU, simulated_cuda
from neighbours import LINEAR, Neighbour, _ds, _t, adder, n, neighbour_tests
from strategies.deepspeed.helpers import (
    _Z2,
    ZERO2,
    Blocks,
    NoBlocks,
    _cuda_trainer,
    _deepspeed_config,
    _fabric_ds,
    _offload,
    _strategy,
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
    "LP403",
    n(_t('"deepspeed_zero2_offload"'), "CUDA"),
    n(_t('"deepspeed_zero2_offload"', "gpu"), "'gpu' = 'cuda'"),
    n(_t('"deepspeed_zero3_offload_ckpt"', "cuda", "", 2), "the other preset, 2 GPUs"),
    n('Fabric(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8)', "Fabric on CUDA"),
)
_z = 'lightning_presets.strategy("deepspeed_zero2_offload", {})'
_add(
    "LP410",
    n(_t(_z.format('offload_optimizer_device="cpu"')), "offload to the CPU"),
    n(_t(_z.format("stage=1")), "ZeRO stage 1"),
    n(_t(_z.format("stage=3")), "ZeRO stage 3"),
    n(_t(_z.format('stage=3, offload_params_device="cpu"')), "stage 3 with parameters offloaded"),
)
_add(
    "LP412",
    n(_t('"deepspeed_zero2_offload"', "cuda", ', precision="bf16-mixed"'), "precision= drives DeepSpeedPrecision"),
    n(_t('"deepspeed_zero2_offload"', "cuda", ', precision="16-mixed"'), "fp16 through precision="),
    n(
        "from lightning.pytorch.plugins import DeepSpeedPrecision\n"
        + _t('"deepspeed_zero2_offload"', "cuda", ', plugins=[DeepSpeedPrecision("bf16-mixed")]'),
        "DeepSpeed's own plugin",
    ),
    n(_t('"deepspeed_zero2_offload"', "cuda", ', precision="32-true"'), "full precision"),
)
_add(
    "LP415",
    n(_t('"deepspeed_zero2_offload"', "cuda", ", gradient_clip_val=1.0"), "clipping by norm, DeepSpeed's own"),
    n(_t('"deepspeed_zero2_offload"', "cuda", ', gradient_clip_val=1.0, gradient_clip_algorithm="norm"'), "'norm'"),
    n(
        "from lightning.pytorch.utilities import GradClipAlgorithmType\n"
        + _t(
            '"deepspeed_zero2_offload"',
            "cuda",
            ", gradient_clip_val=0.5, gradient_clip_algorithm=GradClipAlgorithmType.NORM",
        ),
        "the enum",
    ),
    n(_t('"deepspeed_zero2_offload"'), "no clipping"),
)
_add(
    "LP417",
    n(_offload(more=', "zero_force_ds_cpu_optimizer": False'), "a torch optimizer, DeepSpeed told to take it"),
    n(_offload(device="none"), "no optimizer offload: any torch optimizer"),
    n(
        f"model = {LINEAR}\nfabric = "
        + _fabric_ds.format(_ds("{" + _Z2 + "}", target=', target="fabric"'), 8)
        + "\nfabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))\n",
        "ZeRO-2 without offload, SGD",
    ),
)
_add(
    "LP422",
    n(_offload(more=', "zero_force_ds_cpu_optimizer": False'), "one optimizer"),
    n(
        f"model = {LINEAR}\nfabric = "
        + _fabric_ds.format(_ds("{" + _Z2 + "}", target=', target="fabric"'), 8)
        + "\nfabric.setup(model, torch.optim.SGD(model.parameters(), lr=0.1))\n",
        "one SGD",
    ),
    n(
        f"model = {LINEAR}\nfabric = "
        + _fabric_ds.format(_ds("{" + _Z2 + "}", target=', target="fabric"'), 8)
        + "\nfabric.setup(model, torch.optim.SGD([{'params': model.weight, 'lr': 0.1}, {'params': model.bias}]))\n",
        "one optimizer, two parameter groups with their own lr",
    ),
)
_add(
    "LP420",
    n(_t('"deepspeed_zero2_offload"', "cuda", "", 2), "devices=2: GPUs 0 and 1"),
    n(_t('"deepspeed_zero2_offload"', "cuda", "", [0, 1]), "the list 0..n-1"),
    n(_t('"deepspeed_zero2_offload"', "cuda", "", [0]), "GPU 0 alone"),
    n(_t('"deepspeed_zero2_offload"', "cuda", "", "0,1,2,3"), "the string of 0..3"),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP403")
def test_lp403_deepspeed_on_cpu_fails_when_fit_starts(proof: Proof) -> None:
    proof.refused("LP403", lambda: trainer(ZERO2))
    with proof.guard_off("LP403"), proof.raises(RuntimeError, r"only supported on CUDA GPUs"):
        fit(ZERO2)


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP422")
def test_lp422_two_optimizers_fail_in_lightnings_deepspeed_setup(proof: Proof) -> None:
    """The Trainer: Lightning's DeepSpeedStrategy._init_optimizers (what fit runs before creating the engine) refuses a
    module with two optimizers; Fabric's setup refuses them too. One optimizer passes the same code."""

    class TwoOptimizers(Steps):  # a GAN's generator and discriminator: manual optimization, as Lightning 2 asks
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.01)]

    def fabric() -> Any:
        with simulated_cuda(1):
            made = Fabric(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=1)
        made._launched = True  # launch() would form DeepSpeed's NCCL group; setup's own checks come first
        return made

    model = torch.nn.Linear(4, 4)
    two = (torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(model.parameters(), lr=0.01))
    proof.refused("LP422", lambda: fabric().setup(model, *two, move_to_device=False))
    with proof.guard_off("LP422"):
        made = _cuda_trainer(_strategy())
        module = TwoOptimizers()
        made.strategy._lightning_module = module
        module.trainer = made
        with proof.raises(Exception, r"only supports single optimizer"):
            made.strategy._init_optimizers()
        with proof.raises(ValueError, r"only one optimizer is supported"):
            fabric().setup(model, *two, move_to_device=False)
    one = Steps()
    made.strategy._lightning_module = one
    one.trainer = made
    optimizer, _ = made.strategy._init_optimizers()
    assert isinstance(optimizer, torch.optim.Optimizer)


@needs_deepspeed
@pytest.mark.usefixtures("process_group")
@pytest.mark.proves("LP410")
def test_lp410_an_unknown_offload_device_fails_deepspeeds_config_validation(proof: Proof) -> None:
    proof.refused("LP410", lambda: _strategy(offload_optimizer_device="gpu"))
    with proof.guard_off("LP410", "LP418"):  # LP418: DeepSpeed's own parser, run at construction, refuses it too
        formatted = _trainer_config(_strategy(offload_optimizer_device="gpu"))
        assert formatted["zero_optimization"]["offload_optimizer"]["device"] == "gpu"
        with proof.raises(ValueError, r"offload_optimizer\.device"):
            _deepspeed_config(formatted)


@needs_deepspeed
@pytest.mark.proves("LP415")
def test_lp415_deepspeed_refuses_clipping_by_value(proof: Proof, cuda8: SimulatedGPU) -> None:
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch import LightningModule

    def build() -> Trainer:
        return Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, gradient_clip_val=1.0,
                       gradient_clip_algorithm="value", **QUIET)  # fmt: skip

    proof.refused("LP415", build)
    with proof.guard_off("LP415"):
        trainer = build()
        module = LightningModule()
        module.trainer = trainer
        trainer.strategy._lightning_module = module
        with proof.raises(MisconfigurationException, "DeepSpeed does not support clipping gradients by value"):
            trainer.strategy.init_deepspeed()  # what `fit` calls in setup, on every rank


@needs_deepspeed
@pytest.mark.proves("LP417")
def test_lp417_deepspeed_refuses_a_torch_optimizer_with_offload(proof: Proof, cuda8: SimulatedGPU) -> None:
    """DeepSpeed's engine refuses torch's AdamW with ZeRO-Offload unless zero_force_ds_cpu_optimizer is false."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.utils import ZeRORuntimeException

    zero = {"stage": 2, "offload_optimizer": {"device": "cpu"}}
    config: dict[str, Any] = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": zero}
    model = torch.nn.Linear(4, 4)
    parameters = list(model.parameters())

    def build() -> None:
        strategy = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config=dict(config))
        fabric = Fabric(strategy=strategy, accelerator="cuda", devices=8)
        fabric.strategy._lp_check_optimizers(model, [torch.optim.AdamW(parameters)])

    proof.refused("LP417", build)
    engine: Any = DeepSpeedEngine.__new__(DeepSpeedEngine)
    engine._config = DeepSpeedConfig(config)
    with proof.raises(ZeRORuntimeException, "zero_force_ds_cpu_optimizer", code="LP417"):
        DeepSpeedEngine._configure_optimizer(engine, torch.optim.AdamW(parameters), parameters)
    engine._config = DeepSpeedConfig({**config, "zero_force_ds_cpu_optimizer": False})
    with pytest.raises(AttributeError):  # past the check: the next step needs a real engine
        DeepSpeedEngine._configure_optimizer(engine, torch.optim.AdamW(parameters), parameters)


@needs_deepspeed
@pytest.mark.proves("LP420")
def test_lp420_deepspeed_refuses_device_indices(proof: Proof, cuda8: SimulatedGPU) -> None:
    from lightning.fabric.strategies.deepspeed import _validate_device_index_selection

    def build() -> Trainer:
        return Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=[1, 3], **QUIET)

    proof.refused("LP420", build)
    with proof.guard_off("LP420"):
        trainer = build()
        with proof.raises(RuntimeError, "don't match the local rank values"):
            _validate_device_index_selection(trainer.strategy.parallel_devices)  # setup_environment, at `fit`
    _validate_device_index_selection([torch.device("cuda", 0), torch.device("cuda", 1)])


# --- the rules' tests ----------------------------------------------------------------------------------------


@needs_deepspeed
def test_lp403_non_cuda_accelerator_is_refused_at_construction() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        ds_trainer(accelerator="cpu", devices=2)
    assert codes(excinfo) == ("LP403",)
    assert "accelerator='cpu', devices=2" in excinfo.value.findings[0].message


@needs_deepspeed
def test_lp403_accepted_on_cuda(cuda8: SimulatedGPU) -> None:
    assert ds_trainer().strategy._lp_context.accelerator == "cuda"


@needs_deepspeed
def test_lp410_unknown_stage_or_offload_device() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("deepspeed_zero2_offload", stage=5, offload_optimizer_device="gpu")
    assert codes(excinfo) == ("LP410",)
    assert "stage=5, offload_optimizer_device='gpu'" in excinfo.value.findings[0].message
    lightning_presets.strategy("deepspeed_zero2_offload", stage=1, offload_optimizer_device="nvme")


@pytest.fixture
def zero3(cuda8: SimulatedGPU) -> Any:
    if not requirements.is_importable("deepspeed"):
        pytest.skip("deepspeed is not installed")
    return ds_trainer("deepspeed_zero3_offload_ckpt").strategy


def test_lp411_no_repeated_block_warns(zero3: Any) -> None:
    with pytest.warns(PresetWarning, match=r"\[LP411\].*no repeated block found in NoBlocks"):
        zero3._lp_prepare_model(NoBlocks())
    model = Blocks()
    zero3._lp_prepare_model(model)
    assert zero3.lp_blocks == {nn.Sequential}


@needs_deepspeed
def test_lp420_reads_the_device_indices_lightning_resolved(cuda8: SimulatedGPU) -> None:
    for devices in ([1, 3], "1,3"):
        with pytest.raises(PresetConfigError) as excinfo:
            ds_trainer(devices=devices)
        assert codes(excinfo) == ("LP420",)
        assert "Lightning refuses [1, 3]" in excinfo.value.findings[0].message
        assert "CUDA_VISIBLE_DEVICES=1,3 and pass devices=2" in excinfo.value.findings[0].hint
    for devices in ([0, 1], "0,1", 2, -1):
        ds_trainer(devices=devices)


_OFFLOADED = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


@needs_deepspeed
@pytest.mark.parametrize("name", ["adam.DeepSpeedCPUAdam", "lion.DeepSpeedCPULion"])
def test_lp417_takes_deepspeeds_own_cpu_optimizers_with_the_offload(cuda8: SimulatedGPU, name: str) -> None:
    """DeepSpeed's engine takes its CPU Adam and CPU Lion with ZeRO-Offload (zero_force_ds_cpu_optimizer left true);
    a torch optimizer it refuses (LP417)."""
    import importlib

    module, _, class_name = name.partition(".")
    klass = getattr(importlib.import_module(f"deepspeed.ops.{module}"), class_name)
    own = klass.__new__(klass)  # an instance is all the rule reads; building one compiles DeepSpeed's CPU op
    strategy = ds_fabric(_OFFLOADED)._strategy
    strategy._lp_check_optimizers(None, [own])
    with pytest.raises(PresetConfigError, match="LP417"):
        strategy._lp_check_optimizers(None, [torch.optim.AdamW(nn.Linear(2, 2).parameters())])
