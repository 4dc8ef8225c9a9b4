"""Jobs for the runtime guards' tests (``tests/test_runtime_guards.py``, ``tests/evidence/test_fails_runtime.py``):
real 2-process Trainer and Fabric runs of a DDP preset on CPU (gloo), each a function of the rank's environment.

Every rank that trains prints ``RESULT {json}``: its losses and a checksum of its weights.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import time
from datetime import timedelta
from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader

PRESET = "ddp_static_graph"


def _report(**values: Any) -> None:
    sys.stdout.write("RESULT " + json.dumps({"rank": int(os.environ.get("RANK", 0)), **values}) + "\n")
    sys.stdout.flush()


def _checksum(model: nn.Module) -> float:
    return sum(float(p.detach().double().sum()) for p in model.parameters())


class Regression:
    """A tiny regression LightningModule (built lazily: ``lightning.pytorch`` is imported by the job)."""

    @staticmethod
    def make(*, log_on_rank0_only: bool = False) -> Any:
        import lightning.pytorch as pl

        class Module(pl.LightningModule):
            def __init__(self) -> None:
                super().__init__()
                torch.manual_seed(0)
                self.layer = nn.Linear(4, 1)
                self.losses: list[float] = []

            def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
                inputs, target = batch
                loss = nn.functional.mse_loss(self.layer(inputs.to(self.layer.weight.dtype)), target.to(
                    self.layer.weight.dtype))  # fmt: skip
                self.losses.append(float(loss))
                return loss

            def on_train_epoch_end(self) -> None:
                if log_on_rank0_only and self.global_rank == 0:
                    self.log("epoch_loss", torch.tensor(self.losses[-1]), sync_dist=True)

            def configure_optimizers(self) -> torch.optim.Optimizer:
                return torch.optim.SGD(self.parameters(), lr=0.1)

        return Module()


def _data() -> DataLoader[Any]:
    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(32, 4, generator=generator)
    target = inputs.sum(dim=1, keepdim=True)
    return DataLoader(list(zip(inputs, target, strict=True)), batch_size=4)


def _trainer(precision: str = "32-true", max_epochs: int = 1, **strategy: Any) -> Any:
    import lightning.pytorch as pl

    import lightning_presets

    return pl.Trainer(
        strategy=lightning_presets.strategy(PRESET, **strategy) if strategy else PRESET,
        accelerator="cpu", devices=2, max_epochs=max_epochs, precision=precision, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
    )  # fmt: skip


def fit(precision_of_rank1: str = "32-true") -> None:
    """Train for one epoch; rank 1 picks ``precision_of_rank1`` from its LOCAL_RANK (a script that reads its precision
    from the rank's environment)."""
    torch.set_num_threads(1)
    precision = precision_of_rank1 if os.environ.get("LOCAL_RANK") == "1" else "32-true"
    module = Regression.make()
    trainer = _trainer(precision)
    start = time.perf_counter()
    trainer.fit(module, _data())
    _report(losses=module.losses, checksum=_checksum(module), seconds=time.perf_counter() - start)


def fit_fabric() -> None:
    """The same through Fabric: the handshake runs in ``launch``."""
    from lightning.fabric import Fabric

    torch.set_num_threads(1)
    fabric = Fabric(strategy=PRESET, accelerator="cpu", devices=2)
    fabric.launch()
    torch.manual_seed(0)
    layer = nn.Linear(4, 1)
    model, optimizer = fabric.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    losses = []
    for inputs, target in _data():
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), target)
        fabric.backward(loss)
        optimizer.step()
        losses.append(float(loss))
    _report(losses=losses, checksum=_checksum(layer))


def fabric_stuck() -> None:
    """Fabric: rank 1 waits for a batch that never comes in its third step while rank 0 goes on into the step's
    collectives, which DDP issues from C++ (its bucket rebuild in the forward pass, the gradient reduction)."""
    import queue

    from lightning.fabric import Fabric

    torch.set_num_threads(1)
    source: queue.Queue[Any] = queue.Queue()  # nothing is ever put here
    fabric = Fabric(strategy=PRESET, accelerator="cpu", devices=2)
    fabric.launch()
    torch.manual_seed(0)
    layer = nn.Linear(4, 1)
    model, optimizer = fabric.setup(layer, torch.optim.SGD(layer.parameters(), lr=0.1))
    for step, (inputs, target) in enumerate(_data()):
        if fabric.global_rank == 1 and step == 2:
            inputs = source.get()  # a data source that never returns
        loss = nn.functional.mse_loss(model(inputs), target)
        fabric.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    _report(done=True)


def join(seconds: str = "0") -> None:
    """Form the process group (the test starts rank 0 only); ``seconds`` > 0: the DDP strategy's own timeout."""
    torch.set_num_threads(1)
    strategy = {"timeout": timedelta(seconds=float(seconds))} if float(seconds) > 0 else {}
    trainer = _trainer(**strategy)
    trainer.fit(Regression.make(), _data())
    _report(joined=True)


def join_late(delay: str, seconds: str) -> None:
    """Rank 1 comes ``delay`` seconds after rank 0 (a node that starts late), within the strategy's ``timeout`` of
    ``seconds``: torch waits for it, and so must the presets."""
    if os.environ.get("RANK") == "1":
        time.sleep(float(delay))
    fit_with(timeout=timedelta(seconds=float(seconds)))


def fit_with(**strategy: Any) -> None:
    torch.set_num_threads(1)
    module = Regression.make()
    _trainer(**strategy).fit(module, _data())
    _report(losses=module.losses, checksum=_checksum(module))


def log_on_rank0(seconds: str = "0") -> None:
    """Rank 0 alone logs with ``sync_dist=True`` in ``on_train_epoch_end``; rank 1 then stays in the second epoch's
    first step (as a rank that went on to other work would). ``seconds`` > 0: the process group's own timeout."""
    torch.set_num_threads(1)
    strategy = {"timeout": timedelta(seconds=float(seconds))} if float(seconds) > 0 else {}
    module = Regression.make(log_on_rank0_only=True)
    trainer = _trainer(max_epochs=1, **strategy)
    trainer.fit(module, _data())
    if trainer.global_rank == 1:
        time.sleep(3600)  # rank 1 is done with fit: it goes on with something else and never enters the collective
    _report(done=True)


def slow_step(seconds: str) -> None:
    """Rank 1 computes for ``seconds`` in its third training_step (a slow batch: the CPU busy, one line) while rank 0
    waits for it in DDP's gradient reduction."""
    import lightning.pytorch as pl

    class Slow(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.layer = nn.Linear(4, 1)

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            inputs, target = batch
            end = time.monotonic() + float(seconds) if self.global_rank == 1 and batch_idx == 2 else 0.0
            while time.monotonic() < end:  # a slow batch: busy all along
                pass
            return nn.functional.mse_loss(self.layer(inputs), target)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    torch.set_num_threads(1)
    module = Slow()
    _trainer().fit(module, _data())
    _report(checksum=_checksum(module))


def save_slowly(seconds: str) -> None:
    """Rank 0 writes ``ckpt/last.ckpt`` at the end of each epoch slowly (half the bytes, ``seconds`` of a slow disk,
    the rest) while rank 1 waits in Lightning's checkpoint barrier; then every rank loads the checkpoint."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from lightning.pytorch.plugins import TorchCheckpointIO

    class SlowDisk(TorchCheckpointIO):
        def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
            buffer = io.BytesIO()
            torch.save(checkpoint, buffer)
            data = buffer.getvalue()
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as file:
                file.write(data[: len(data) // 2])
                file.flush()
                time.sleep(float(seconds))  # a slow disk: no CPU, the same line all along
                file.write(data[len(data) // 2 :])

    torch.set_num_threads(1)
    module = Regression.make()
    trainer = pl.Trainer(
        strategy=PRESET, accelerator="cpu", devices=2, max_epochs=2, logger=False, enable_progress_bar=False,
        enable_model_summary=False, plugins=[SlowDisk()],
        callbacks=[ModelCheckpoint(dirpath="ckpt", save_last=True, save_top_k=0)],
    )  # fmt: skip
    trainer.fit(module, _data())
    state = torch.load("ckpt/last.ckpt", weights_only=False)
    _report(global_step=state["global_step"], epoch=state["epoch"], checksum=_checksum(module))


def resume_rank_paths() -> None:
    """Train an epoch and save ``first.ckpt``; then each rank resumes from its own copy at a path of its own (a
    node's local disk: ``node<rank>/copy/last.ckpt``, the same bytes and times) for a second epoch."""
    torch.set_num_threads(1)
    rank = os.environ["RANK"]
    trainer = _trainer()
    trainer.fit(Regression.make(), _data())
    trainer.save_checkpoint("first.ckpt")  # rank 0 writes; every rank waits for it
    own = os.path.abspath(os.path.join(f"node{rank}", "copy", "last.ckpt"))
    os.makedirs(os.path.dirname(own), exist_ok=True)
    shutil.copy2("first.ckpt", own)
    resumed = Regression.make()
    _trainer(max_epochs=2).fit(resumed, _data(), ckpt_path=own)
    _report(losses=resumed.losses, checksum=_checksum(resumed), path=own)


def resume_node_local() -> None:
    """``fit(ckpt_path="ckpt/last.ckpt")`` where each rank's working folder stands for its node's local disk: the
    checkpoint is only on rank 0's."""
    torch.set_num_threads(1)
    rank = os.environ["RANK"]
    folder = f"node{rank}"
    os.makedirs(os.path.join(folder, "ckpt"), exist_ok=True)
    os.chdir(folder)
    if rank == "0":
        torch.save({"state_dict": {}}, "ckpt/last.ckpt")
    _trainer().fit(Regression.make(), _data(), ckpt_path="ckpt/last.ckpt")
    _report(resumed=True)
