"""A real 2-process run of the ``tp2d_hybrid`` preset on CPU (gloo), through the Trainer or Fabric.

Run it as a file (Lightning re-runs ``sys.argv`` for rank 1):

    python tests/scripts/train_tp2d.py --api trainer                 # strategy="tp2d_hybrid", autoload only
    python tests/scripts/train_tp2d.py --api trainer --split 2x1     # lightning_presets.strategy(...)
    python tests/scripts/train_tp2d.py --api fabric --split 1x2

Rank 0 prints one line ``RESULT {json}`` with every rank's losses, its single-process reference loss
and the layout of its parameters. With ``--api trainer`` and no ``--split``, the script never imports
``lightning_presets``: the string resolves through the start-up hook alone, in both processes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for `models`

import torch
from torch import nn

from models import TinyTransformer, counting_sequences, next_token_loss, parallelize, unsharded_copy

PARAMETERS = ("embedding.weight", "layers.0.attn.q.weight", "layers.0.attn.o.weight", "layers.0.ffn.up.bias")
# Set first thing in main(), before Lightning is imported: the start-up hook must not load the package itself.
_loaded_at_start = False
BATCH_SIZE = 4
LEARNING_RATE = 1e-2


def _layout(model: nn.Module) -> dict[str, Any]:
    """How each watched parameter is held on this rank."""
    from torch.distributed.tensor import DTensor

    named = dict(model.named_parameters())
    layout = {}
    for name in PARAMETERS:
        param = named[name]
        if isinstance(param, DTensor):
            layout[name] = {
                "dtensor": True,
                "mesh_dims": list(param.device_mesh.mesh_dim_names or ()),
                "mesh_shape": list(param.device_mesh.shape),
                "placements": [str(placement) for placement in param.placements],
                "global_shape": list(param.shape),
                "local_shape": list(param.to_local().shape),
            }
        else:
            layout[name] = {"dtensor": False, "global_shape": list(param.shape), "local_shape": list(param.shape)}
    return layout


def _rank_report(model: nn.Module, losses: list[float], reference: float, mesh: Any, strategy: Any) -> dict[str, Any]:
    return {
        "rank": torch.distributed.get_rank(),
        "strategy_class": f"{type(strategy).__module__}.{type(strategy).__qualname__}",
        "preset": strategy._lp_preset.name,
        "lightning_presets_loaded_at_start": _loaded_at_start,
        "world_size": torch.distributed.get_world_size(),
        "backend": torch.distributed.get_backend(),
        "mesh_dims": list(mesh.mesh_dim_names),
        "mesh_shape": list(mesh.shape),
        "data_rank": mesh["data_parallel"].get_local_rank(),
        "tensor_rank": mesh["tensor_parallel"].get_local_rank(),
        "losses": losses,
        "reference_loss": reference,
        "layout": _layout(model),
    }


def _gather_and_print(report: dict[str, Any], extra: dict[str, Any]) -> None:
    reports: list[Any] = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(reports, report)
    if torch.distributed.get_rank() == 0:
        print("RESULT " + json.dumps({**extra, "ranks": reports}), flush=True)


def _sizes(split: str | None) -> dict[str, int]:
    if split is None:
        return {}
    data, tensor = (int(part) for part in split.split("x"))
    return {"data_parallel_size": data, "tensor_parallel_size": tensor}


def run_trainer(split: str | None, steps: int) -> None:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)  # same weights on every rank: tensor parallelism slices them
            self.model = TinyTransformer()
            self.losses: list[float] = []
            self.reference_loss = math.nan
            self._reference: list[nn.Module] = []  # a list, so it is not registered as a submodule

        def configure_model(self) -> None:
            self._reference.append(unsharded_copy(self.model))
            parallelize(self.model, self.device_mesh)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            if not self.losses:
                with torch.no_grad():
                    self.reference_loss = next_token_loss(self._reference[0], batch).item()
            loss = next_token_loss(self.model, batch)
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=LEARNING_RATE)

        def on_train_end(self) -> None:
            report = _rank_report(self.model, self.losses, self.reference_loss, self.device_mesh, self.trainer.strategy)
            _gather_and_print(report, extra)

    if split is None:
        strategy: Any = "tp2d_hybrid"
    else:
        import lightning_presets

        strategy = lightning_presets.strategy("tp2d_hybrid", **_sizes(split))
    trainer = pl.Trainer(
        strategy=strategy,
        accelerator="cpu",
        devices=2,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    extra = {
        "api": "trainer",
        "strategy_class": f"{type(trainer.strategy).__module__}.{type(trainer.strategy).__qualname__}",
        "lightning_base": next(
            f"{k.__module__}.{k.__qualname__}"
            for k in type(trainer.strategy).__mro__
            if k.__module__.startswith("lightning.")
        ),
        "script_imported_lightning_presets": split is not None,
    }
    data = DataLoader(counting_sequences(16), batch_size=BATCH_SIZE)  # type: ignore[arg-type]
    trainer.fit(Module(), data)
    _shut_down()


def run_fabric(split: str | None, steps: int) -> None:
    from lightning.fabric import Fabric
    from torch.utils.data import DataLoader

    import lightning_presets

    strategy = lightning_presets.strategy("tp2d_hybrid", target="fabric", parallelize_fn=parallelize, **_sizes(split))
    fabric = Fabric(strategy=strategy, accelerator="cpu", devices=2)
    fabric.launch()
    torch.manual_seed(0)
    model = TinyTransformer()
    reference = unsharded_copy(model)
    model = fabric.setup(model)
    optimizer = fabric.setup_optimizers(torch.optim.Adam(model.parameters(), lr=LEARNING_RATE))
    data = fabric.setup_dataloaders(DataLoader(counting_sequences(16), batch_size=BATCH_SIZE))  # type: ignore[arg-type]
    losses: list[float] = []
    reference_loss = math.nan
    while len(losses) < steps:
        for batch in data:
            if not losses:
                with torch.no_grad():
                    reference_loss = next_token_loss(reference, batch).item()
            loss = next_token_loss(model, batch)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            losses.append(loss.item())
            if len(losses) == steps:
                break
    extra = {
        "api": "fabric",
        "strategy_class": f"{type(strategy).__module__}.{type(strategy).__qualname__}",
        "script_imported_lightning_presets": True,
    }
    report = _rank_report(
        model.module if hasattr(model, "module") else model, losses, reference_loss, strategy.device_mesh, strategy
    )
    _gather_and_print(report, extra)
    _shut_down()


def _shut_down() -> None:
    """Destroy the process group before exit: a live gloo group can abort the interpreter at shutdown."""
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def main() -> None:
    global _loaded_at_start
    _loaded_at_start = "lightning_presets" in sys.modules
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--api", choices=("trainer", "fabric"), required=True)
    parser.add_argument("--split", default=None, help="DATAxTENSOR, e.g. 2x1; default: the preset's auto split")
    parser.add_argument("--steps", type=int, default=8)
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if args.api == "trainer":
        run_trainer(args.split, args.steps)
    else:
        run_fabric(args.split, args.steps)


if __name__ == "__main__":
    main()
