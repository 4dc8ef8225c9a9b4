"""``ddp_static_graph`` with manual optimization on 2 CPU processes (gloo): are the gradients all-reduced?

Lightning 2.5 never all-reduces a static graph's gradients under manual optimization (Lightning issue #18086);
the preset flushes the first backward where Lightning does not (``lightning_presets.registry.compat``). Rank 0
prints one line ``RESULT {json}`` per step: whether both ranks hold the same gradient after ``manual_backward``.

    python tests/scripts/ddp_manual_static.py
"""

from __future__ import annotations

import json
import sys

import torch
import torch.distributed as dist
from lightning.pytorch import LightningModule, Trainer
from torch import nn

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


class ManualModel(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        optimizer = self.optimizers()
        optimizer.zero_grad()
        inputs = torch.full((2, 4), float(self.global_rank + 1))  # each rank its own data
        self.manual_backward(self.layer(inputs).sum())
        gradient = self.layer.weight.grad.detach().clone()
        gathered = [torch.zeros_like(gradient) for _ in range(dist.get_world_size())]
        dist.all_gather(gathered, gradient)
        if self.global_rank == 0:
            synced = all(torch.equal(gathered[0], other) for other in gathered[1:])
            sys.stdout.write("RESULT " + json.dumps({"step": batch_idx, "synced": synced}) + "\n")
            sys.stdout.flush()
        optimizer.step()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> torch.utils.data.DataLoader[torch.Tensor]:
        return torch.utils.data.DataLoader(torch.zeros(8, 4), batch_size=2)


if __name__ == "__main__":
    Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, max_steps=2, **QUIET).fit(ManualModel())
