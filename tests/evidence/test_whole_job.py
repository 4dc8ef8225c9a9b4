"""Evidence for the whole-job rules: each failing configuration, with its guard switched off (LIGHTNING_PRESETS_SKIP),
fails the way the rule says, in Lightning's, torch's or DeepSpeed's own code.

CPU families run for real (2 gloo processes); for the CUDA-only families the Lightning or DeepSpeed function that
raises runs on CPU with the configuration's values.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule, Trainer

import lightning_presets
from lightning_presets.tools.simulation import SimulatedGPU

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
needs_deepspeed = pytest.mark.skipif(
    __import__("importlib").util.find_spec("deepspeed") is None, reason="needs deepspeed (installed in CI's main legs)"
)


def guard_off(monkeypatch: pytest.MonkeyPatch, code: str) -> None:
    """The rule ``code`` does not run: what follows is what the job would do without it."""
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", code)


class Tiny(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.layer(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


_ACCUMULATE = textwrap.dedent(
    """
    import torch, lightning.pytorch as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Tiny(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)
        def training_step(self, batch, batch_idx):
            return self.layer(batch[0]).pow(2).mean()
        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    if __name__ == "__main__":
        trainer = pl.Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, max_steps=2,
                             accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False)
        trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4))
        print("TRAINED", trainer.global_rank)
    """
)


@pytest.mark.distributed
def test_lp308_static_graph_with_accumulation_fails_in_backward(tmp_path: Path) -> None:
    """2 gloo processes, guard off: every rank dies in backward; the same job with plain DDP trains (test below)."""
    script = tmp_path / "accumulate.py"
    script.write_text(_ACCUMULATE)
    env = {**os.environ, "LIGHTNING_PRESETS_SKIP": "LP308", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=600,
                          cwd=tmp_path, check=False)  # fmt: skip
    assert done.returncode != 0
    assert "expect_autograd_hooks_ INTERNAL ASSERT FAILED" in done.stdout + done.stderr
    assert "TRAINED" not in done.stdout


def test_lp308_neighbour_plain_ddp_accumulates() -> None:
    """The rule's fix (strategy='ddp') builds without a finding, and the preset with static_graph=False too."""
    Trainer(strategy="ddp", accelerator="cpu", devices=2, accumulate_grad_batches=2, **QUIET)
    with pytest.warns(lightning_presets.PresetWarning, match="LP302"):
        strategy = lightning_presets.strategy("ddp_static_graph", static_graph=False)
    Trainer(strategy=strategy, accelerator="cpu", devices=2, accumulate_grad_batches=2, **QUIET)


def test_lp118_fsdp_precision_refuses_clipping_by_norm(monkeypatch: pytest.MonkeyPatch, cuda8: SimulatedGPU) -> None:
    """The precision plugin the FSDP preset runs with refuses the Trainer's default clipping at the optimizer step."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.utilities import GradClipAlgorithmType

    guard_off(monkeypatch, "LP118")
    trainer = Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gradient_clip_val=1.0, **QUIET)
    layer = torch.nn.Linear(4, 1)
    layer(torch.ones(1, 4)).sum().backward()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    with pytest.raises(MisconfigurationException, match=r"gradient_clip_algorithm='norm'.* not supported"):
        trainer.precision_plugin.clip_gradients(optimizer, 1.0, GradClipAlgorithmType.NORM)
    trainer.precision_plugin.clip_gradients(optimizer, 1.0, GradClipAlgorithmType.VALUE)  # the fix: by value


@needs_deepspeed
def test_lp415_deepspeed_refuses_clipping_by_value(monkeypatch: pytest.MonkeyPatch, cuda8: SimulatedGPU) -> None:
    from lightning.fabric.utilities.exceptions import MisconfigurationException

    guard_off(monkeypatch, "LP415")
    trainer = Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, gradient_clip_val=1.0,
                      gradient_clip_algorithm="value", **QUIET)  # fmt: skip
    module = Tiny()
    module.trainer = trainer
    trainer.strategy._lightning_module = module
    with pytest.raises(MisconfigurationException, match="DeepSpeed does not support clipping gradients by value"):
        trainer.strategy.init_deepspeed()  # what `fit` calls in setup, on every rank


@needs_deepspeed
def test_lp417_deepspeed_refuses_a_torch_optimizer_with_offload() -> None:
    """DeepSpeed's engine refuses torch's AdamW with ZeRO-Offload unless zero_force_ds_cpu_optimizer is false."""
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.engine import DeepSpeedEngine
    from deepspeed.runtime.zero.utils import ZeRORuntimeException

    parameters = list(torch.nn.Linear(4, 4).parameters())
    offload = {
        "train_micro_batch_size_per_gpu": 1,
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}},
    }
    engine: Any = DeepSpeedEngine.__new__(DeepSpeedEngine)
    engine._config = DeepSpeedConfig(offload)
    with pytest.raises(ZeRORuntimeException, match="zero_force_ds_cpu_optimizer"):
        DeepSpeedEngine._configure_optimizer(engine, torch.optim.AdamW(parameters), parameters)
    engine._config = DeepSpeedConfig({**offload, "zero_force_ds_cpu_optimizer": False})
    with pytest.raises(AttributeError):  # past the check: the next step needs a real engine, which is the point
        DeepSpeedEngine._configure_optimizer(engine, torch.optim.AdamW(parameters), parameters)


@needs_deepspeed
def test_lp418_the_parser_is_deepspeeds_own() -> None:
    """The config the rule refuses is refused by DeepSpeed's own DeepSpeedConfig (what the engine builds at `fit`)."""
    from deepspeed.runtime.config import DeepSpeedConfig

    typo = {"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}}
    with pytest.raises(Exception, match="reduce_bucket_sise"):
        DeepSpeedConfig(typo)
    DeepSpeedConfig({**typo, "zero_optimization": {"stage": 2, "reduce_bucket_size": 5}})


@needs_deepspeed
def test_lp420_deepspeed_refuses_device_indices(monkeypatch: pytest.MonkeyPatch, cuda8: SimulatedGPU) -> None:
    from lightning.fabric.strategies.deepspeed import _validate_device_index_selection

    guard_off(monkeypatch, "LP420")
    trainer = Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=[1, 3], **QUIET)
    with pytest.raises(RuntimeError, match="don't match the local rank values"):
        _validate_device_index_selection(trainer.strategy.parallel_devices)  # setup_environment, when `fit` starts
    _validate_device_index_selection([torch.device("cuda", 0), torch.device("cuda", 1)])


def test_lp309_post_local_sgd_needs_an_averaging_period(monkeypatch: pytest.MonkeyPatch) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_local_sgd

    guard_off(monkeypatch, "LP309")
    state = post_local_sgd.PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=8)
    strategy = lightning_presets.strategy("ddp_static_graph", ddp_comm_state=state,
                                          ddp_comm_hook=post_local_sgd.post_localSGD_hook)  # fmt: skip
    strategy.optimizers = []
    with pytest.raises(ValueError, match="model averaging period is not provided"):
        strategy._enable_model_averaging()  # what setup_optimizers calls when `fit` starts


def test_lp095_the_refusal_is_the_environments_own(monkeypatch: pytest.MonkeyPatch, simulated_cluster: Any) -> None:
    """Under SLURM with 4 tasks per node, a job of 8 devices builds with the guard off and is refused at launch."""
    simulated_cluster("slurm", nodes=2, tasks_per_node=4)
    guard_off(monkeypatch, "LP095")
    trainer = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=8, num_nodes=2, **QUIET)
    environment = trainer.strategy.cluster_environment
    assert type(environment).__name__ == "SLURMEnvironment"
    with pytest.raises(ValueError, match="ntasks-per-node=4"):
        trainer.strategy._launcher.launch(lambda: None)  # the launcher validates first, before it runs anything
    environment.validate_settings(num_devices=4, num_nodes=2)


def test_lp509_xla_fsdp_refuses_an_unknown_state_dict_type(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from lightning_presets.tools.simulation.stand_ins import standing_in

    guard_off(monkeypatch, "LP509")
    with standing_in("torch_xla"):
        sys.modules["torch_xla.distributed.fsdp"].XlaFullyShardedDataParallel = type("XlaFSDP", (torch.nn.Module,), {})
        strategy = lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", state_dict_type="consolidated")
        strategy.broadcast = lambda obj, src=0: obj
        with pytest.raises(ValueError, match="Unknown state_dict_type: consolidated"):
            strategy.load_checkpoint(tmp_path, state={"model": torch.nn.Linear(2, 2)})


def test_the_skip_variable_is_what_turns_each_guard_off(monkeypatch: pytest.MonkeyPatch, cuda8: SimulatedGPU) -> None:
    """Without LIGHTNING_PRESETS_SKIP the same configurations are refused, so the tests above ran them unguarded."""
    monkeypatch.delenv("LIGHTNING_PRESETS_SKIP", raising=False)
    with pytest.raises(lightning_presets.PresetConfigError, match="LP308"):
        Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, accumulate_grad_batches=2, **QUIET)
    with pytest.raises(lightning_presets.PresetConfigError, match="LP420"):
        Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=[1, 3], **QUIET)
    with pytest.raises(lightning_presets.PresetConfigError, match="LP415"):
        Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, gradient_clip_algorithm="value",
                **QUIET)  # fmt: skip
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_local_sgd

    state = post_local_sgd.PostLocalSGDState(None, None, 8)
    with pytest.raises(lightning_presets.PresetConfigError, match="LP309"):
        lightning_presets.strategy("ddp_static_graph", ddp_comm_state=state)
