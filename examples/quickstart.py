"""Quick start: a guarded preset by name, with no import of lightning_presets.

    pip install lightning-presets
    python examples/quickstart.py

1. Trains a tiny model for a few steps with ``Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2)``:
   tensor parallelism over 2 CPU processes (gloo), FSDP2 over the data-parallel dimension.
2. Shows a misconfiguration being rejected while the Trainer is constructed:
   ``Trainer(strategy="fsdp_offload_ckpt", accelerator="cpu", devices=2)``.

Run it as a file: Lightning starts rank 1 by running this script again.
"""

from __future__ import annotations

import torch
from lightning.pytorch import LightningModule, Trainer
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class TinyRegressor(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)  # every rank starts from the same weights
        self.model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
        self.losses: list[float] = []

    def configure_model(self) -> None:
        # tp2d_hybrid gives every LightningModule a 2D device mesh: (data_parallel, tensor_parallel).
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        # The last layer keeps its output a DTensor (use_local_output=False): converted inside the module,
        # `to_local()` would return a view as the output of the fully_shard-ed module, which FSDP2 warns about.
        plan = {"0": ColwiseParallel(), "2": RowwiseParallel(use_local_output=False)}
        parallelize_module(self.model, self.device_mesh["tensor_parallel"], plan)
        fully_shard(self.model, mesh=self.device_mesh["data_parallel"])

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        loss = F.mse_loss(self.model(inputs).to_local(), targets)  # replicated over the tensor-parallel ranks
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.Adam(self.parameters(), lr=2e-2)


STEPS_PER_EPOCH = 8
EPOCHS = 5


def random_regression(samples: int = 8 * STEPS_PER_EPOCH) -> DataLoader[tuple[torch.Tensor, ...]]:
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(samples, 8, generator=generator)
    targets = inputs.sum(dim=1, keepdim=True)
    return DataLoader(TensorDataset(inputs, targets), batch_size=8)


def train() -> Trainer:
    trainer = Trainer(
        strategy="tp2d_hybrid",  # resolved by lightning-presets' start-up hook: no import needed
        accelerator="cpu",
        devices=2,
        max_epochs=EPOCHS,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    model = TinyRegressor()
    trainer.fit(model, random_regression())
    if trainer.is_global_zero:
        mesh = model.device_mesh
        weight = model.model[0].weight
        print(
            f"trained with {type(trainer.strategy).__name__} on {trainer.world_size} CPU processes, "
            f"mesh {dict(zip(mesh.mesh_dim_names or (), mesh.shape, strict=True))}; "
            f"first layer weight {tuple(weight.shape)} held as {type(weight).__name__} {weight.placements}, "
            f"{tuple(weight.to_local().shape)} on this rank"
        )
        first, last = model.losses[:STEPS_PER_EPOCH], model.losses[-STEPS_PER_EPOCH:]
        print(f"mean loss, first epoch {sum(first) / len(first):.3f} -> last epoch {sum(last) / len(last):.3f}")
    return trainer


def show_rejection() -> None:
    from lightning_presets import PresetConfigError

    try:
        Trainer(strategy="fsdp_offload_ckpt", accelerator="cpu", devices=2)
    except PresetConfigError as error:
        print(f"\nrejected while Trainer(...) was constructed, codes {list(error.codes)}:\n{error}")
    else:
        raise SystemExit("expected fsdp_offload_ckpt on CPU to be rejected")


if __name__ == "__main__":
    trainer = train()
    # Lightning leaves the process group open; closing it lets both processes exit cleanly.
    torch.distributed.destroy_process_group()
    if trainer.is_global_zero:
        show_rejection()
