"""Evidence for check --model's rehearsal (LP740-LP742): each failing model, run for real on 2 gloo processes with
Lightning's own DDP, fails the way the rehearsal reports (on every rank, at the same stage); the neighbour that fixes
all three (a monitor for its ReduceLROnPlateau, batches of what its steps unpack) trains on 2 processes and is accepted
by the check."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from proof import Proof, reports

from harness import run_job

HERE = Path(__file__).resolve().parent

MODELS = '''
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from lightning.pytorch import LightningModule


class Fixed(LightningModule):
    """The neighbour: every stage legal (a monitored plateau scheduler, pairs unpacked as pairs)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Linear(8, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "train_loss", "interval": "step"}}

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(16, 8), torch.randint(0, 2, (16,))), batch_size=4)

    def val_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 8), torch.randint(0, 2, (8,))), batch_size=4)


class PlateauNoMonitor(Fixed):
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt)}


class UnpackThree(Fixed):
    def train_dataloader(self):
        data = TensorDataset(torch.randn(16, 8), torch.randint(0, 2, (16,)), torch.ones(16))
        return DataLoader(data, batch_size=4)


class ValidationUnpack(Fixed):
    def validation_step(self, batch, batch_idx):
        x, lengths, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))
'''

JOB = """
import sys
import lightning.pytorch as pl
import rehearsal_cases
from proof import report

if __name__ == "__main__":
    name = sys.argv[1]
    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=2, max_steps=1, limit_val_batches=1,
                         num_sanity_val_steps=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    try:
        trainer.fit(getattr(rehearsal_cases, name)())
    except Exception as error:
        report(name, error)
        sys.exit(1)
    print("TRAINED", trainer.global_rank)
"""


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("rehearsal")
    (folder / "rehearsal_cases.py").write_text(textwrap.dedent(MODELS))
    (folder / "job.py").write_text(textwrap.dedent(JOB))
    return folder


def _real(folder: Path, name: str) -> tuple[str, list[dict[str, str]]]:
    done = run_job(folder / "job.py", name, path=(str(HERE), str(folder)), cwd=folder, timeout=300)
    return done.stdout, reports(done.stdout)


def _codes(folder: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    request = CheckRequest(arguments={"strategy": "ddp_static_graph", "accelerator": "cpu", "devices": 2},
                           model=f"rehearsal_cases:{name}")  # fmt: skip
    return [each.code for each in run_check(request).findings if each.severity == "error"]


@pytest.mark.distributed
@pytest.mark.proves("LP740", "LP741", "LP742")
def test_lp740_lp741_lp742_the_rehearsed_failures_fail_on_both_ranks(
    proof: Proof, cases: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The set-up (a ReduceLROnPlateau without a monitor), the first training step (``x, y = batch`` on a batch of
    three) and the first validation step (three unpacked from two) fail on both of 2 gloo ranks, in Lightning's and
    the user's code; the check reports each at its stage and accepts the neighbour, which trains on both ranks."""
    for name, code, kind, match in (
        ("PlateauNoMonitor", "LP740", "MisconfigurationException", r"must include a monitor"),
        ("UnpackThree", "LP741", "ValueError", r"too many values to unpack"),
        ("ValidationUnpack", "LP742", "ValueError", r"not enough values to unpack"),
    ):
        assert _codes(cases, name, monkeypatch) == [code], name
        output, found = _real(cases, name)
        assert "TRAINED" not in output, output
        assert len([each for each in found if each["scenario"] == name]) == 2, found  # both ranks
        proof.child(found, name, kind, match, code=code)
    assert _codes(cases, "Fixed", monkeypatch) == []
    output, _ = _real(cases, "Fixed")
    assert output.count("TRAINED") == 2, output
