"""Jobs for ``tests/test_explain_notes.py``: a real failure inside a preset's run, and the notes it gets."""

from __future__ import annotations

import json

import torch
from torch import nn


def trainer_mixes_a_tensor_with_a_dtensor() -> None:
    """``tp2d_hybrid`` on 2 CPU ranks: the training step adds a plain tensor to a tensor-parallel weight (a DTensor),
    which DTensor refuses; rank 0 prints the exception's message and notes (``NOTES {json}``), then re-raises."""
    from lightning.pytorch import LightningModule, Trainer

    class Model(LightningModule):
        def configure_model(self) -> None:
            from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

            self.linear = nn.Linear(4, 4)
            parallelize_module(self.linear, self.device_mesh["tensor_parallel"], ColwiseParallel())

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return (self.linear.weight + torch.ones(4, 4)).sum()  # a plain tensor meets the sharded weight

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer = Trainer(
        strategy="tp2d_hybrid", accelerator="cpu", devices=2, max_steps=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip
    data = torch.utils.data.DataLoader(torch.zeros(8, 4), batch_size=2)
    try:
        trainer.fit(Model(), data)
    except RuntimeError as error:
        if trainer.global_rank == 0:
            print("NOTES " + json.dumps({"message": str(error), "notes": getattr(error, "__notes__", [])}), flush=True)
        raise
