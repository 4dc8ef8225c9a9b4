"""A real 2-process run of the ``ddp_static_graph`` preset on CPU (gloo), through the Trainer or Fabric.

Run it as a file (Lightning re-runs ``sys.argv`` for rank 1):

    python tests/scripts/ddp_fit.py --api trainer
    python tests/scripts/ddp_fit.py --api fabric

Every rank prints one line ``RESULT {json}``: the DDP flags torch actually got, the losses and a
checksum of the trained weights (equal on every rank when the gradients were synchronised).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for `models`

import torch
from torch import nn

from models import TinyTransformer, counting_sequences, fabric_train, next_token_loss

PRESET = "ddp_static_graph"
BATCH_SIZE = 4
LEARNING_RATE = 1e-2


def _report(ddp: Any, model: nn.Module, losses: list[float], **extra: Any) -> None:
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    report = {
        "rank": torch.distributed.get_rank(),
        "world_size": torch.distributed.get_world_size(),
        "backend": torch.distributed.get_backend(),
        "wrapper": type(ddp).__name__,
        "static_graph": bool(getattr(ddp, "static_graph", False)),
        "gradient_as_bucket_view": bool(getattr(ddp, "gradient_as_bucket_view", False)),
        "find_unused_parameters": bool(getattr(ddp, "find_unused_parameters", True)),
        "weights_checksum": checksum,
        "losses": losses,
        **extra,
    }
    sys.stdout.write("RESULT " + json.dumps(report) + "\n")  # one write: the ranks share the pipe
    sys.stdout.flush()


def run_trainer(steps: int) -> None:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.model = TinyTransformer()
            self.losses: list[float] = []
            self.wrappers: list[nn.Module] = []  # a list, so the wrapper is not registered as a submodule

        def on_train_start(self) -> None:
            self.wrappers.append(self.trainer.strategy.model)  # Lightning unwraps it again at teardown

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            loss = next_token_loss(self.model, batch)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=LEARNING_RATE)

    module = Module()
    trainer = pl.Trainer(
        strategy=PRESET,
        accelerator="cpu",
        devices=2,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(module, DataLoader(counting_sequences(32), batch_size=BATCH_SIZE))  # type: ignore[arg-type]
    _report(module.wrappers[0], module, module.losses, api="trainer", strategy=type(trainer.strategy).__name__)


def run_fabric(steps: int) -> None:
    from lightning.fabric import Fabric

    fabric = Fabric(strategy=PRESET, accelerator="cpu", devices=2)
    fabric.launch()
    torch.manual_seed(0)
    model = TinyTransformer()
    wrapped, losses = fabric_train(fabric, model, steps, lr=LEARNING_RATE, batch_size=BATCH_SIZE)
    _report(wrapped._forward_module, model, losses, api="fabric", strategy=type(fabric.strategy).__name__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api", choices=("trainer", "fabric"), required=True)
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if args.api == "trainer":
        run_trainer(args.steps)
    else:
        run_fabric(args.steps)


if __name__ == "__main__":
    main()
