"""The small jobs the evidence tests run for real: a LightningModule that counts its steps, and a short ``fit``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from torch.utils.data import DataLoader

from models import TinyTransformer, counting_sequences, next_token_loss, parallelize

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


class Steps(LightningModule):
    """A two-block TinyTransformer that records its losses (``training_step`` is the closure Lightning steps)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = TinyTransformer(n_layers=2)
        self.losses: list[float] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = next_token_loss(self.model, batch)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader[torch.Tensor]:
        return DataLoader(counting_sequences(8), batch_size=4)  # type: ignore[arg-type]


class ShardsItself(Steps):
    """The tp2d_hybrid contract: ``configure_model`` applies tensor parallelism and FSDP2."""

    def configure_model(self) -> None:
        parallelize(self.model, self.device_mesh)


def trainer(strategy: Any, **kwargs: Any) -> Trainer:
    """A quiet CPU Trainer of one process and two steps; ``kwargs`` override."""
    arguments: dict[str, Any] = {"accelerator": "cpu", "devices": 1, "max_steps": 2, **QUIET, **kwargs}
    return Trainer(strategy=strategy, **arguments)


def fit(strategy: Any, module: LightningModule | None = None, **kwargs: Any) -> LightningModule:
    """``trainer(strategy, **kwargs).fit(module)`` (eight counting sequences, batches of 4); returns the module."""
    module = module if module is not None else Steps()
    trainer(strategy, **kwargs).fit(module)
    return module


def run_child(code: str, env: dict[str, str]) -> str:
    """Run ``code`` in a fresh interpreter that can ``import proof``; its stdout (``PROOF`` lines)."""
    here = str(Path(__file__).resolve().parent)
    path = os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])])
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=240,
                          env={**os.environ, **env, "PYTHONPATH": path}, check=False)  # fmt: skip
    return done.stdout + done.stderr


class Normed(LightningModule):
    """A module with batch norm, for the sync_batchnorm rules."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Linear(4, 1))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.net(batch[0]).pow(2).mean()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


class SyncNormed(Normed):
    """A module whose batch norm is ``nn.SyncBatchNorm`` already (built so), with no sync_batchnorm flag anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.net[1] = torch.nn.SyncBatchNorm(4)


def one_gloo_process() -> None:
    """A gloo process group of one in this process, on a free port (the ``process_group`` fixture removes it)."""
    import socket

    import torch.distributed as dist

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=0, world_size=1)
