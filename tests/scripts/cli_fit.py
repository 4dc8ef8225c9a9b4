"""A LightningCLI ``fit`` from a YAML config that names a preset (``trainer.strategy: fsdp2``).

    python tests/scripts/cli_fit.py fit --config config.yaml

Lightning re-runs the same command line for rank 1. Every rank prints one line ``RESULT {json}``: the strategy the
CLI built, the world size, the share of the parameters it holds (DTensor shards) and the losses.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for `models`

import torch
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import LightningCLI
from torch.utils.data import DataLoader

from models import TinyTransformer, counting_sequences, next_token_loss


class TinyModel(LightningModule):
    """A plain module: no configure_model, no sharding code (the preset shards it)."""

    def __init__(self, learning_rate: float = 1e-2) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.model = TinyTransformer()
        self.learning_rate = learning_rate
        self.losses: list[float] = []

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        loss = next_token_loss(self.model, batch)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=self.learning_rate)


class CountingData(LightningDataModule):
    def __init__(self, batch_size: int = 4) -> None:
        super().__init__()
        self.batch_size = batch_size

    def train_dataloader(self) -> DataLoader[torch.Tensor]:
        return DataLoader(counting_sequences(32), batch_size=self.batch_size)  # type: ignore[arg-type]


def main() -> None:
    cli = LightningCLI(TinyModel, CountingData, save_config_callback=None)
    trainer, model = cli.trainer, cli.model
    from torch.distributed.tensor import DTensor

    parameters = list(model.parameters())
    report = {
        "rank": trainer.global_rank,
        "world_size": trainer.world_size,
        "strategy": type(trainer.strategy).__name__,
        "preset": trainer.strategy._lp_preset.name,
        "dtensor_parameters": sum(isinstance(p, DTensor) for p in parameters),
        "parameters": len(parameters),
        "local_numel": sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in parameters),
        "losses": model.losses,
    }
    sys.stdout.write("RESULT " + json.dumps(report) + "\n")
    sys.stdout.flush()
    torch.distributed.barrier()  # both ranks tear the process group down together (see fsdp2_fit.py)
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
