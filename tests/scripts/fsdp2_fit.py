"""A real 2-process run of the ``fsdp2`` / ``fsdp2_offload_ckpt`` presets on CPU (gloo), unchanged model.

Run it as a file (Lightning re-runs ``sys.argv`` for rank 1):

    python tests/scripts/fsdp2_fit.py --preset fsdp2 --api trainer
    python tests/scripts/fsdp2_fit.py --preset fsdp2_offload_ckpt --api fabric --call self

The LightningModule has no ``configure_model`` and never calls ``fully_shard``: the preset shards it.
Every rank prints one line ``RESULT {json}``: its share of the parameters, what was sharded, how often
the blocks ran forward (activation checkpointing runs them again in backward) and the losses.
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

from models import Block, TinyTransformer, counting_sequences, fabric_train, next_token_loss

BATCH_SIZE = 4
LEARNING_RATE = 1e-2
BLOCK_FORWARDS = [0]
_block_forward = Block.forward


def _counted_forward(self: Block, x: torch.Tensor) -> torch.Tensor:
    BLOCK_FORWARDS[0] += 1
    return _block_forward(self, x)


Block.forward = _counted_forward  # type: ignore[method-assign]


def _report(model: nn.Module, total: int, losses: list[float], **extra: Any) -> None:
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.distributed.tensor import DTensor

    for module in model.modules():  # the root keeps its parameters gathered after a forward-only step
        if isinstance(module, FSDPModule):
            module.reshard()
    parameters = list(model.parameters())
    local = sum(p.to_local().numel() if isinstance(p, DTensor) else p.numel() for p in parameters)
    sharded = [type(module).__name__ for module in model.modules() if isinstance(module, FSDPModule)]
    outermost = next(module for module in model.modules() if isinstance(module, FSDPModule))
    root_state = fully_shard.state(outermost)  # type: ignore[attr-defined]
    group = root_state._fsdp_param_group
    report = {
        "rank": torch.distributed.get_rank(),
        "world_size": torch.distributed.get_world_size(),
        "backend": torch.distributed.get_backend(),
        "local_numel": local,
        "total_numel": total,
        "dtensor_parameters": sum(isinstance(p, DTensor) for p in parameters),
        "parameters": len(parameters),
        "fsdp_modules": sharded,
        "root_offload_policy": type(group.offload_policy).__name__ if group is not None else None,
        "local_devices": sorted({str(p.to_local().device) for p in parameters if isinstance(p, DTensor)}),
        "block_forwards": BLOCK_FORWARDS[0],
        "losses": losses,
        **extra,
    }
    sys.stdout.write("RESULT " + json.dumps(report) + "\n")  # one write: the ranks share the pipe
    sys.stdout.flush()


def run_trainer(preset: str, call: str, steps: int, shards_itself: bool, precision: str) -> None:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    class Module(pl.LightningModule):
        """A plain LightningModule: no configure_model, no sharding code."""

        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.model = TinyTransformer()
            self.losses: list[float] = []

        def forward(self, tokens: torch.Tensor) -> torch.Tensor:
            return self.model(tokens)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            loss = next_token_loss(self if call == "self" else self.model, batch)
            self.losses.append(loss.item())
            return loss

        def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
            self.log("val_loss", next_token_loss(self.model, batch), sync_dist=True)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=LEARNING_RATE)

    class ShardsItself(Module):
        """The usual ModelParallelStrategy module: it applies fully_shard itself, the preset leaves it alone."""

        def configure_model(self) -> None:
            from torch.distributed.fsdp import FSDPModule, fully_shard

            if isinstance(self.model, FSDPModule):  # configure_model runs again for validate: stay idempotent
                return
            mesh = self.device_mesh["data_parallel"]
            for layer in self.model.layers:
                fully_shard(layer, mesh=mesh)
            fully_shard(self.model, mesh=mesh)

    module = ShardsItself() if shards_itself else Module()
    total = sum(p.numel() for p in module.parameters())
    trainer = pl.Trainer(
        strategy=preset,
        accelerator="cpu",
        devices=2,
        precision=precision,
        max_steps=steps,
        limit_val_batches=1,
        val_check_interval=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    data = DataLoader(counting_sequences(32), batch_size=BATCH_SIZE)  # type: ignore[arg-type]
    trainer.fit(module, data, data)
    fit_val_loss = float(trainer.callback_metrics["val_loss"])
    (metrics,) = trainer.validate(module, data, verbose=False)  # a second setup of the same sharded module
    _report(
        module,
        total,
        module.losses,
        api="trainer",
        strategy=type(trainer.strategy).__name__,
        precision=trainer.precision,
        val_loss=fit_val_loss,
        validate_loss=metrics["val_loss"],
        configure_model_left=hasattr(type(module), "configure_model") and "configure_model" in vars(module),
    )


def run_fabric(preset: str, call: str, steps: int) -> None:
    from lightning.fabric import Fabric

    fabric = Fabric(strategy=preset, accelerator="cpu", devices=2)
    fabric.launch()
    torch.manual_seed(0)
    model = TinyTransformer()
    total = sum(p.numel() for p in model.parameters())
    _, losses = fabric_train(fabric, model, steps, lr=LEARNING_RATE, batch_size=BATCH_SIZE)
    _report(model, total, losses, api="fabric", strategy=type(fabric.strategy).__name__)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", choices=("fsdp2", "fsdp2_offload_ckpt"), required=True)
    parser.add_argument("--api", choices=("trainer", "fabric"), required=True)
    parser.add_argument(
        "--call", choices=("inner", "self"), default="inner", help="training_step calls self.model or self"
    )
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--precision", default="32-true", help="the Trainer's precision")
    parser.add_argument("--shards-itself", action="store_true", help="the LightningModule applies fully_shard")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if args.api == "trainer":
        run_trainer(args.preset, args.call, args.steps, args.shards_itself, args.precision)
    else:
        run_fabric(args.preset, args.call, args.steps)
    # Tear the process group down on both ranks together: left to the interpreter's exit, a rank aborted with
    # "terminate called without an active exception" in about one run in five here (after its RESULT line).
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
