"""FSDP1's sharded layout written on CPU: torch's ``FullyShardedDataParallel`` wraps a LightningModule on
``device_id=cpu`` (gloo; Lightning's ``FSDPStrategy`` refuses a CPU accelerator), one AdamW step, then Lightning's
own ``FSDPStrategy(state_dict_type="sharded")`` takes the states (``lightning_module_state_dict``,
``optimizer_state``) and writes the folder (``save_checkpoint``: ``model``, ``optimizer_0``, ``meta.pt``).

    python fsdp1_save.py OUT    (on WORLD_SIZE ranks: RANK, MASTER_ADDR, MASTER_PORT set)

Rank 0 also writes ``OUT.full.pt``: the full weights, gathered by FSDP1's ``summon_full_params`` (the reference).
Prints ``SAVED <rank>``.
"""

from __future__ import annotations

import sys
import warnings

import torch
import torch.distributed as dist
from lightning.fabric.plugins.environments import LightningEnvironment
from lightning.pytorch import LightningModule
from lightning.pytorch.strategies import FSDPStrategy
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel


class Module(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.model(batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.1)


def module() -> Module:
    torch.manual_seed(0)
    return Module()


def main(out: str) -> None:
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    wrapped = FullyShardedDataParallel(module(), device_id=torch.device("cpu"), use_orig_params=True)
    optimizer = torch.optim.AdamW(wrapped.parameters(), lr=0.1)
    torch.manual_seed(rank)
    wrapped(torch.randn(3, 4)).sum().backward()
    optimizer.step()
    strategy = FSDPStrategy(state_dict_type="sharded")
    environment = LightningEnvironment()
    environment.set_global_rank(rank)
    environment.set_world_size(dist.get_world_size())
    strategy._cluster_environment = environment
    strategy.model = wrapped
    checkpoint = {
        "state_dict": strategy.lightning_module_state_dict(),
        "optimizer_states": [strategy.optimizer_state(optimizer)],
        "lr_schedulers": [],
        "epoch": 0,
        "global_step": 1,
        "loops": {},
        "callbacks": {},
        "pytorch-lightning_version": "2.6.6",
    }
    strategy.save_checkpoint(checkpoint, out)
    with FullyShardedDataParallel.summon_full_params(wrapped):  # FSDP1's own gather of the flat shards
        weights = {name: value.detach().clone() for name, value in wrapped.module.state_dict().items()}
    if rank == 0:
        torch.save(weights, out + ".full.pt")
    dist.barrier()
    print(f"SAVED {rank}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
