"""Rank 1 stays in its third training_step (a data source that never returns) while rank 0 waits in DDP's gradient
reduction, which DDP issues from C++: run as a script (Lightning's own launcher starts rank 1), with
``LIGHTNING_PRESETS_DIAGNOSE=1`` for the hang report (``tests/test_runtime_guards.py``)."""

from __future__ import annotations

import queue
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader

import lightning_presets  # noqa: F401  # the presets' strategy names

SOURCE: queue.Queue[Any] = queue.Queue()
"""Nothing is ever put here."""


class Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        inputs, target = batch
        if self.global_rank == 1 and batch_idx == 2:
            inputs = SOURCE.get()  # a data source that never returns
        return nn.functional.mse_loss(self.layer(inputs), target)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(32, 4, generator=generator)
    data = DataLoader(list(zip(inputs, inputs.sum(dim=1, keepdim=True), strict=True)), batch_size=4)
    trainer = pl.Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, max_epochs=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    trainer.fit(Regression(), data)
    print("RESULT {}", flush=True)
