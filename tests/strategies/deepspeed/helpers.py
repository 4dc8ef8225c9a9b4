"""What DeepSpeed's rule tests share: the proofs' configs built by the presets (DeepSpeed's engine needs CUDA, so a
proof executes, on CPU, the Lightning or DeepSpeed code that fails: Lightning's strategy methods that format the config
(``_format_config``), DeepSpeed's config parser (``DeepSpeedConfig``, what ``deepspeed.initialize`` builds first) on
that config; one CUDA device is simulated for the Trainer, world size 1), and the neighbours' programs."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from jobs import Steps, trainer
from lightning.fabric import Fabric
from lightning.pytorch import LightningModule, Trainer
from torch import nn

import lightning_presets
from helpers import QUIET
from lightning_presets.registry import requirements
from lightning_presets.tools.simulation import simulated_cuda
from neighbours import LINEAR, _ds, _t

needs_deepspeed = pytest.mark.skipif(
    not requirements.is_importable("deepspeed"),
    reason="deepspeed is not installed (pip install --no-build-isolation deepspeed); its missing path is tested",
)

# --- a DeepSpeed job on 8 simulated GPUs, and models with and without repeated blocks ---------------------------


def ds_trainer(strategy: Any = "deepspeed_zero2_offload", **kwargs: Any) -> Trainer:
    return Trainer(strategy=strategy, **{"accelerator": "cuda", "devices": 8, **QUIET, **kwargs})


def ds_fabric(config: dict[str, Any], **kwargs: Any) -> Fabric:
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config=config)
    return Fabric(strategy=strategy, **{"accelerator": "cuda", "devices": 8, **kwargs})


class Blocks(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class NoBlocks(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)


# --- the proofs -----------------------------------------------------------------------------------------------------

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


# --- the neighbours' programs ---------------------------------------------------------------------------------------

_Z2 = '"zero_optimization": {"stage": 2}'
_fabric_ds = 'Fabric(strategy={}, accelerator="cuda", devices={})'
_SEQUENCE_PARALLEL = (
    '{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "sequence_parallel_size": 2, ' + _Z2 + "}"
)


def _fabric_batch(train: int, micro: int, accumulation: int | None = None, devices: int = 8) -> str:
    steps = f'"gradient_accumulation_steps": {accumulation}, ' if accumulation else ""
    config = f'{{"train_batch_size": {train}, "train_micro_batch_size_per_gpu": {micro}, {steps}{_Z2}}}'
    return _fabric_ds.format(_ds(config, target=', target="fabric"'), devices)


def _trainer_batch(train: int, micro: int, accumulation: int, devices: int = 8) -> str:
    config = f'{{"train_batch_size": {train}, "train_micro_batch_size_per_gpu": {micro}, {_Z2}}}'
    return _t(_ds(config), "cuda", f", accumulate_grad_batches={accumulation}", devices) + f".fit({LINEAR})"


_OFFLOAD = '{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "%s"}}%s}'


def _offload(device: str = "cpu", more: str = "", optimizer: str = "torch.optim.AdamW(model.parameters())") -> str:
    config = _OFFLOAD % (device, more)
    return (
        f"model = {LINEAR}\n"
        f"fabric = {_fabric_ds.format(_ds(config, target=', target=' + chr(34) + 'fabric' + chr(34)), 8)}\n"
        f"fabric.setup(model, {optimizer})\n"
    )
