"""The held-out cases' models (issue 35, item 9): each a small LightningModule written from a public thread (the
thread's URL is in ``cases.py``), with its own ``train_dataloader`` as the job would have it. Nothing here is used by
the package or its tests; ``bench_rehearsal_heldout.py`` checks each with ``check --model``."""

import torch
from lightning.pytorch import LightningModule
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


def _pairs(features=32, classes=4, n=16, batch=8):
    return DataLoader(TensorDataset(torch.randn(n, features), torch.randint(0, classes, (n,))), batch_size=batch)


class Base(LightningModule):
    """A classifier that trains on (x, y) pairs: the legal shape every case changes in one place."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(32, 4)
        self.example_input_array = torch.zeros(8, 32)

    def forward(self, x):
        return self.net(x)

    def loss(self, batch):
        x, y = batch
        return F.cross_entropy(self(x), y)

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return _pairs()

    def val_dataloader(self):
        return _pairs()


# ----------------------------------------------------------------------------------------- misconfigurations


class PlateauNoMonitor(Base):
    """ReduceLROnPlateau returned without a monitor (dict form)."""

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt)}


class PlateauNoMonitorLists(Base):
    """ReduceLROnPlateau returned in the two-lists form, with no monitor anywhere."""

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        return [opt], [torch.optim.lr_scheduler.ReduceLROnPlateau(opt)]


class PlateauUnloggedMetric(Base):
    """ReduceLROnPlateau stepped every step on 'loss', which the module never logs (it logs 'train_loss')."""

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        sched = {
            "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt),
            "monitor": "loss",
            "interval": "step",
            "frequency": 1,
        }
        return [opt], [sched]


class TupleOptimizerScheduler(Base):
    """(optimizer, scheduler) as one tuple: Lightning reads every item of a flat tuple as an optimizer."""

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        return opt, torch.optim.lr_scheduler.StepLR(opt, step_size=1)


class SchedulerListInDict(Base):
    """{"optimizer": opt, "lr_scheduler": [scheduler]}: a list where Lightning wants one scheduler or its dict."""

    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        return {"optimizer": opt, "lr_scheduler": [torch.optim.lr_scheduler.StepLR(opt, step_size=1)]}


class DictWithoutLoss(Base):
    """training_step returns a dict with no 'loss' key."""

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        return {"train_loss": loss}


class DictWithLogNoLoss(Base):
    """The 0.x form: {'train_loss': ..., 'log': {...}} and no 'loss'."""

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        return {"train_loss": loss, "log": {"train_loss": loss}}


class LayersAsLocals(Base):
    """Layers assigned to local names in __init__ (self_layer = ... instead of self.layer = ...): no parameters."""

    def __init__(self):
        LightningModule.__init__(self)
        self_layer = nn.Linear(32, 4)  # noqa: F841  (the thread's typo)
        self.example_input_array = torch.zeros(8, 32)

    def forward(self, x):
        return nn.Linear(32, 4)(x)


class LayersInForward(Base):
    """Layers created inside forward: the module has no parameters for the optimizer."""

    def __init__(self):
        LightningModule.__init__(self)
        self.example_input_array = torch.zeros(8, 32)

    def forward(self, x):
        return nn.Linear(32, 4)(nn.Linear(32, 32)(x))


class _NoGradStep(torch.optim.SGD):
    """An optimizer whose step runs the closure under no_grad (as the thread's third-party optimizer did)."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = closure() if closure is not None else None
        super().step()
        return loss


class NoGradOptimizer(Base):
    def configure_optimizers(self):
        return _NoGradStep(self.parameters(), lr=1e-3)


class UnpackThree(Base):
    """The dataloader yields (idx, targets, mask); training_step unpacks two."""

    def training_step(self, batch, batch_idx):
        idx, targets = batch
        return F.cross_entropy(self(idx), targets)

    def train_dataloader(self):
        n = 16
        data = TensorDataset(torch.randn(n, 32), torch.randint(0, 4, (n,)), torch.ones(n))
        return DataLoader(data, batch_size=8)


class ValidationUnpack(Base):
    """validation_step unpacks three values from a validation batch of two."""

    def validation_step(self, batch, batch_idx):
        x, _lengths, y = batch
        self.log("val_loss", F.cross_entropy(self(x), y))


class LogString(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", f"{loss}")
        return loss


class LogVector(Base):
    """Logs a per-class tensor (4 elements)."""

    def training_step(self, batch, batch_idx):
        x, y = batch
        losses = F.cross_entropy(self(x), y, reduction="none")
        self.log("per_sample", losses)
        return losses.mean()


class LogTwiceDifferently(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("loss", loss, on_step=True)
        self.log("loss", loss, on_step=False, on_epoch=True)
        return loss


class ShapeMismatch(Base):
    """The head expects 300 features; the batch has 2348."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(300, 4)
        self.example_input_array = torch.zeros(8, 2348)

    def train_dataloader(self):
        return _pairs(features=2348)


class BackwardInStep(Base):
    """loss.backward() in training_step under automatic optimization (Lightning backwards it again)."""

    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        loss.backward()
        return loss


class Float32InBf16(Base):
    """A float32 tensor made in forward, multiplied with the bf16 activations of a bf16-true job."""

    def forward(self, x):
        h = self.net(x)
        return h @ torch.eye(4)


class DeepSpeedTwoSchedulers(Base):
    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
        warm = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1)
        decay = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
        return [opt], [warm, decay]


class _HandRolledScheduler:
    """A scheduler that is not a torch LRScheduler (the thread's scheduler did not follow its API)."""

    def __init__(self, optimizer):
        self.optimizer = optimizer

    def step(self):
        for group in self.optimizer.param_groups:
            group["lr"] *= 0.99

    def state_dict(self):
        return {}


class CustomScheduler(Base):
    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        return [opt], [_HandRolledScheduler(opt)]


# ----------------------------------------------------------------------------------------- legal configurations


class PlateauLoggedMetric(Base):
    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        sched = {
            "scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt),
            "monitor": "train_loss",
            "interval": "step",
            "frequency": 10,
        }
        return [opt], [sched]


class ListsOptimizerScheduler(Base):
    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=1)]


class OneCycleEstimated(Base):
    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3, weight_decay=1e-2)
        total = self.trainer.estimated_stepping_batches
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2, total_steps=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step", "frequency": 1}}


class NamedStepScheduler(Base):
    def configure_optimizers(self):
        opt = torch.optim.Adam(self.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / 100))
        return [opt], [{"scheduler": sched, "name": "custom_scheduler", "interval": "step"}]


class DictWithLoss(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        return {"loss": loss, "log": {"train_loss": loss}}


class NoGradOptimizerGradEnabled(Base):
    def configure_optimizers(self):
        return _NoGradStep(self.parameters(), lr=1e-3)

    def training_step(self, batch, batch_idx):
        torch.set_grad_enabled(True)
        return super().training_step(batch, batch_idx)


class SyncDistEveryRank(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", loss, sync_dist=True, on_epoch=True)
        return loss


class SyncDistValidationOnly(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", loss, sync_dist=False)
        return loss

    def validation_step(self, batch, batch_idx):
        self.log("val_loss", self.loss(batch), sync_dist=True)


class LogOneElement(Base):
    def training_step(self, batch, batch_idx):
        loss = self.loss(batch)
        self.log("train_loss", loss.reshape(1))
        return loss


class OneCycleThreePhase(Base):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, steps_per_epoch=64, epochs=10, three_phase=True)
        return [opt], [{"scheduler": sched, "interval": "step"}]


class DeepSpeedOneScheduler(Base):
    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, step_size=10)]


class UnpackTwo(Base):
    """The fixed RWKV case: the loader yields (idx, targets)."""
