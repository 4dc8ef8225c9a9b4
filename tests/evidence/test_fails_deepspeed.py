"""DeepSpeed presets. DeepSpeed's engine needs CUDA, so each proof executes, on CPU, the Lightning or DeepSpeed code
that fails: Lightning's strategy methods that format the config (``_format_config``), DeepSpeed's config parser
(``DeepSpeedConfig``, what ``deepspeed.initialize`` builds first) on that config, and ``deepspeed.checkpointing``.
The configs are built by the presets themselves with the guard switched off; one CUDA device is simulated for the
Trainer (world size 1: the batch arithmetic of the documented 8-device examples, scaled)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from jobs import Steps, fit, trainer
from proof import Proof

import lightning_presets
from lightning_presets.registry import requirements
from lightning_presets.tools.simulation import simulated_cuda

pytestmark = [
    pytest.mark.skipif(not requirements.is_importable("deepspeed"), reason="deepspeed is not installed"),
    pytest.mark.usefixtures("process_group"),
]
ZERO2 = "deepspeed_zero2_offload"


def _strategy(**overrides: Any) -> Any:
    return lightning_presets.strategy(ZERO2, **overrides)


def _cuda_trainer(strategy: Any, **kwargs: Any) -> Any:
    with simulated_cuda(1):
        return trainer(strategy, accelerator="cuda", devices=1, **kwargs)


def _trainer_config(strategy: Any, **kwargs: Any) -> dict[str, Any]:
    made = _cuda_trainer(strategy, **kwargs)
    module = Steps()
    made.strategy._lightning_module = module
    module.trainer = made
    made.fit_loop._data_source.instance = module  # where Lightning reads the micro-batch size from
    made.strategy._format_config()
    return dict(made.strategy.config)


def _deepspeed_config(config: dict[str, Any]) -> Any:
    from deepspeed.runtime.config import DeepSpeedConfig

    return DeepSpeedConfig(config, mpu=None, mesh_device=None)


@pytest.mark.proves("LP401")
def test_lp401_lightning_imports_a_broken_deepspeed(
    proof: Proof, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.strategies import DeepSpeedStrategy

    package = tmp_path / "deepspeed"
    package.mkdir()
    (package / "__init__.py").write_text(
        'raise RuntimeError("CUDA_HOME does not exist, unable to compile CUDA op(s)")\n'
    )
    with _shadowed("deepspeed", tmp_path, monkeypatch), proof.raises(RuntimeError, r"CUDA_HOME", code="LP401"):
        DeepSpeedStrategy(stage=2)


@pytest.mark.proves("LP402")
def test_lp402_lightning_refuses_deepspeed_below_0_16_with_this_torch(
    proof: Proof, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch.strategies import deepspeed as lightning_deepspeed

    if not hasattr(lightning_deepspeed, "_DEEPSPEED_GREATER_EQUAL_0_16"):
        pytest.skip("Lightning 2.5 has no such check: the pair fails when DeepSpeed loads a checkpoint (torch.load)")
    monkeypatch.setattr(lightning_deepspeed, "_DEEPSPEED_GREATER_EQUAL_0_16", False)  # as with deepspeed 0.15.4
    with proof.raises(ImportError, r"PyTorch >= 2.6 requires DeepSpeed >= 0.16.0", code="LP402"):
        lightning_deepspeed.DeepSpeedStrategy(stage=2)


@pytest.mark.proves("LP403")
def test_lp403_deepspeed_on_cpu_fails_when_fit_starts(proof: Proof) -> None:
    proof.refused("LP403", lambda: trainer(ZERO2))
    with proof.guard_off("LP403"), proof.raises(RuntimeError, r"only supported on CUDA GPUs"):
        fit(ZERO2)


@pytest.mark.proves("LP405")
def test_lp405_fp16_and_bf16_together_fail_in_deepspeeds_config(proof: Proof) -> None:
    config = {"fp16": {"enabled": True}, "zero_optimization": {"stage": 2}}

    proof.refused("LP405", lambda: _cuda_trainer(_strategy(config=dict(config)), precision="bf16-mixed"))
    with proof.guard_off("LP405"):
        formatted = _trainer_config(_strategy(config=dict(config)), precision="bf16-mixed")
        assert formatted["bf16"] == {"enabled": True}  # Lightning added it from precision=
        with proof.raises(AssertionError, r"bfloat16 and fp16 modes cannot be simultaneously enabled"):
            _deepspeed_config(formatted)


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


@pytest.mark.proves("LP408")
def test_lp408_auto_batch_values_fail_in_deepspeeds_config(proof: Proof) -> None:
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}

    proof.refused("LP408", lambda: _cuda_trainer(_strategy(config=dict(config))))
    with proof.guard_off("LP408"):
        formatted = _trainer_config(_strategy(config=dict(config)))
        assert formatted["train_micro_batch_size_per_gpu"] == "auto"  # Lightning fills it only when absent
        with proof.raises(TypeError, r"str|int"):
            _deepspeed_config(formatted)


@pytest.mark.proves("LP409")
def test_lp409_accumulation_steps_in_the_config_fail_in_fit(proof: Proof) -> None:
    config = {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}

    proof.refused("LP409", lambda: _cuda_trainer(_strategy(config=dict(config))))
    with proof.guard_off("LP409"), proof.raises(Exception, r"Do not set `gradient_accumulation_steps`"):
        _trainer_config(_strategy(config=dict(config)))


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


@pytest.mark.proves("LP422")
def test_lp422_two_optimizers_fail_in_lightnings_deepspeed_setup(proof: Proof) -> None:
    """The Trainer: Lightning's DeepSpeedStrategy._init_optimizers (what fit runs before creating the engine) refuses a
    module with two optimizers; Fabric's setup refuses them too. One optimizer passes the same code."""
    from lightning.fabric import Fabric

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


@pytest.mark.proves("LP410")
def test_lp410_an_unknown_offload_device_fails_deepspeeds_config_validation(proof: Proof) -> None:
    proof.refused("LP410", lambda: _strategy(offload_optimizer_device="gpu"))
    with proof.guard_off("LP410", "LP418"):  # LP418: DeepSpeed's own parser, run at construction, refuses it too
        formatted = _trainer_config(_strategy(offload_optimizer_device="gpu"))
        assert formatted["zero_optimization"]["offload_optimizer"]["device"] == "gpu"
        with proof.raises(ValueError, r"offload_optimizer\.device"):
            _deepspeed_config(formatted)


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


# --- helpers ------------------------------------------------------------------------------------------------------


def _shadowed(name: str, site: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``import name`` finds the package under ``site`` instead of the installed one, inside the block; the modules
    imported before are restored afterwards."""
    from contextlib import contextmanager

    @contextmanager
    def shadow() -> Iterator[None]:
        saved = {key: module for key, module in sys.modules.items() if key == name or key.startswith(f"{name}.")}
        for key in saved:
            monkeypatch.delitem(sys.modules, key)
        monkeypatch.syspath_prepend(str(site))
        try:
            yield
        finally:
            for key in [key for key in sys.modules if key == name or key.startswith(f"{name}.")]:
                del sys.modules[key]
            sys.modules.update(saved)

    return shadow()
