"""Jobs of two gloo processes for the guards' legal and refused sides around gradient accumulation with DDP's static
graph (LP308), SyncBatchNorm off CUDA (LP217, LP219, LP310), the fsdp2 preset's block sharding and a manual
multi-node launch inside an interactive SLURM allocation (LP712). Started by ``tests/harness.py``
(``run_job("guard_truth:FUNCTION", path=(SCRIPTS,))``); each prints ``RESULT {json}`` lines on rank 0 (and on
every rank where the ranks are compared), and a failure it provoked with a guard off as a ``PROOF`` line."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]  # tests/evidence (proof)

import torch  # noqa: E402
from lightning.pytorch import LightningModule, Trainer  # noqa: E402
from proof import report  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def result(**values: Any) -> None:
    print("RESULT " + json.dumps({"rank": torch.distributed.get_rank(), **values}), flush=True)


class Regression(LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy
    """``net`` on 4 features, a squared-output loss; records its losses."""

    def __init__(self, net: nn.Module) -> None:
        super().__init__()
        self.net = net
        self.losses: list[float] = []

    def training_step(self, batch: list[torch.Tensor]) -> torch.Tensor:
        loss = self.net(batch[0]).pow(2).mean()
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _data(batches: int = 8) -> DataLoader[Any]:
    torch.manual_seed(1)
    return DataLoader(TensorDataset(torch.randn(4 * batches * 2, 4)), batch_size=4)


def _weights(module: nn.Module) -> list[float]:
    return [round(float(value), 6) for value in torch.cat([p.detach().flatten() for p in module.parameters()])]


def static_graph_schedule(schedule: str) -> None:
    """ddp_static_graph with ``GradientAccumulationScheduler({epoch: factor})`` (``schedule`` is ``epoch:factor``), 3
    epochs; torch's failure in backward is reported as a PROOF line (scenario ``lp308_scheduler``)."""
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    epoch, factor = map(int, schedule.split(":"))
    torch.manual_seed(0)
    module = Regression(nn.Linear(4, 1))
    scheduler = GradientAccumulationScheduler({epoch: factor})
    trainer = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, max_epochs=3, callbacks=[scheduler],
                      **QUIET)  # fmt: skip
    try:
        trainer.fit(module, _data(4))
    except RuntimeError as error:
        report("lp308_scheduler", error)
        raise
    result(losses=module.losses, accumulated=trainer.accumulate_grad_batches, weights=_weights(module))


def fabric_accumulation_recipe() -> None:
    """Fabric's documented gradient accumulation (``is_accumulating = iteration % 2 != 0``: iteration 0 synchronises)
    with ddp_static_graph, then with plain ddp on the same seeds: each rank's weights after each."""
    from lightning.fabric import Fabric

    weights = {}
    for strategy in ("ddp_static_graph", "ddp"):
        fabric = Fabric(strategy=strategy, accelerator="cpu", devices=2)
        fabric.launch()  # the harness started the processes: Lightning launches nothing
        torch.manual_seed(0)
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = fabric.setup(model, optimizer)
        torch.manual_seed(1 + fabric.global_rank)
        for iteration in range(6):
            is_accumulating = iteration % 2 != 0
            with fabric.no_backward_sync(model, enabled=is_accumulating):
                fabric.backward(model(torch.randn(4, 4)).pow(2).mean())
            if not is_accumulating:
                optimizer.step()
                optimizer.zero_grad()
        weights[strategy] = _weights(model)
    result(weights=weights)


def _norm_model(norm: str) -> nn.Module:
    layer = {"BatchNorm1d": nn.BatchNorm1d(4), "LayerNorm": nn.LayerNorm(4), "GroupNorm": nn.GroupNorm(2, 4),
             "SyncBatchNorm": nn.SyncBatchNorm(4)}[norm]  # fmt: skip
    return nn.Sequential(nn.Linear(4, 4), layer, nn.Linear(4, 1))


def norm_layers(*cases: str) -> None:
    """One ``Trainer.fit`` of 3 steps per case ``strategy/norm/flag`` (``flag``: ``sync`` for sync_batchnorm=True, else
    ``-``), one after another in the same two processes: the losses and the norm layers' types after fit; the first
    case that fails is reported as a PROOF line (scenario ``norm_layers``)."""
    for case in cases:
        strategy, norm, flag = case.split("/")
        torch.manual_seed(0)
        module = Regression(_norm_model(norm))
        trainer = Trainer(strategy=strategy, accelerator="cpu", devices=2, max_steps=3,
                          sync_batchnorm=flag == "sync", **QUIET)  # fmt: skip
        try:
            trainer.fit(module, _data())
        except ValueError as error:
            report("norm_layers", error)
            raise
        kinds = sorted({type(layer).__name__ for layer in module.modules() if "Norm" in type(layer).__name__})
        finite = len(module.losses) == 3 and all(math.isfinite(loss) for loss in module.losses)
        result(case=case, trained=finite, norms=kinds)


def sequential_blocks(outer: str) -> None:
    """fsdp2 on a model whose three repeated blocks are ``nn.Sequential``s held in an ``nn.Sequential`` (``outer``
    ``sequential``) or an ``nn.ModuleList`` (``list``): the losses and how many modules fully_shard took."""
    from torch.distributed.fsdp import FSDPModule

    class Blocks(Regression):
        def __init__(self) -> None:
            blocks = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)]
            super().__init__(nn.Sequential(*blocks) if outer == "sequential" else nn.ModuleList(blocks))
            self.head = nn.Linear(4, 1)

        def training_step(self, batch: list[torch.Tensor]) -> torch.Tensor:
            hidden = batch[0]
            for block in self.net:
                hidden = block(hidden)
            loss = self.head(hidden).pow(2).mean()
            self.losses.append(float(loss.detach()))
            return loss

    torch.manual_seed(0)
    module = Blocks()
    Trainer(strategy="fsdp2", accelerator="cpu", devices=2, max_steps=3, **QUIET).fit(module, _data())
    result(losses=module.losses, sharded=sum(isinstance(each, FSDPModule) for each in module.modules()))


def interactive_slurm_nodes() -> None:
    """Lightning's manual multi-node launch (MASTER_ADDR, MASTER_PORT, NODE_RANK on each node) inside an interactive
    SLURM allocation: this process is one node of ``num_nodes=2``, one device each; every rank reports its place.
    The harness starts each process as torchrun would; what a user's shell holds on each node is only MASTER_ADDR,
    MASTER_PORT, NODE_RANK (``rank_env``) and the allocation's SLURM variables, so torchrun's own go."""
    import os

    for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        os.environ.pop(name)
    torch.manual_seed(0)
    module = Regression(nn.Linear(4, 1))
    trainer = Trainer(strategy="ddp", accelerator="cpu", devices=1, num_nodes=2, max_steps=3, **QUIET)
    trainer.fit(module, _data())
    environment = type(trainer.strategy.cluster_environment).__name__
    result(world=trainer.world_size, node=trainer.node_rank, environment=environment, losses=module.losses,
           weights=_weights(module))  # fmt: skip
