"""Evidence for check --model's rehearsal (LP740-LP742): each failing model, run for real on 2 gloo processes with
Lightning's own DDP, fails the way the rehearsal reports (on every rank, at the same stage); the neighbour that fixes
all three (a monitor for its ReduceLROnPlateau, batches of what its steps unpack) trains on 2 processes and is accepted
by the check. LP744 (ranks that enter different collectives): each refused model fails a real 2-rank gloo run (a
timeout, a closed connection, gloo's size check), and its neighbours train."""

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


RANK_MODELS = """
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from lightning.pytorch import LightningModule


class Base(LightningModule):
    # self.log(..., sync_dist=True) on every rank, in training and validation
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, sync_dist=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y), sync_dist=True)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)

    val_dataloader = train_dataloader


class RankZeroSyncLog(Base):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if self.global_rank == 0:
            self.log("rank0_loss", loss, sync_dist=True)
        return loss


class RankZeroGather(Base):
    def on_train_epoch_end(self):
        if self.trainer.is_global_zero:
            self.all_gather(torch.ones(3))


class ShapeByRank(Base):
    def on_train_epoch_end(self):
        self.all_gather(torch.ones(2 + self.global_rank))


class RankZeroPrint(Base):
    # rank-0-only print and plain log (no sync), rank_zero_only logging: no collective
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        if self.global_rank == 0:
            print("rank 0 says", float(loss))
            self.log("plain", loss)
        self.log("rank_zero", loss, rank_zero_only=True)
        return loss


class GatherEqual(Base):
    # all_gather of per-rank tensors of equal shape, and a collective every rank enters
    def on_train_epoch_end(self):
        gathered = self.all_gather(torch.full((3,), float(self.global_rank)))
        total = torch.ones(2)
        dist.all_reduce(total)
        if self.trainer.is_global_zero:
            print("gathered", tuple(gathered.shape))
"""

RANK_JOB = """
import sys
from datetime import timedelta
import lightning.pytorch as pl
from lightning.pytorch.strategies import DDPStrategy
import ranks_cases
from proof import report

if __name__ == "__main__":
    for name in sys.argv[1].split(","):
        trainer = pl.Trainer(strategy=DDPStrategy(process_group_backend="gloo", timeout=timedelta(seconds=5)),
                             accelerator="cpu", devices=2, max_epochs=1, limit_train_batches=1, limit_val_batches=1,
                             logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)
        try:
            trainer.fit(getattr(ranks_cases, name)())
        except Exception as error:
            report(name, error)
            sys.exit(1)
        print("TRAINED", name, trainer.global_rank, flush=True)
"""


@pytest.fixture(scope="module")
def rank_cases(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("ranks")
    (folder / "ranks_cases.py").write_text(textwrap.dedent(RANK_MODELS))
    (folder / "job.py").write_text(textwrap.dedent(RANK_JOB))
    return folder


def _rank_codes(folder: Path, name: str, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """The errors ``check --json`` reports for a plain DDP job of 2 CPU ranks with ``--model ranks_cases:NAME``."""
    import contextlib
    import io
    import json

    from lightning_presets.cli import main

    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["check", "--strategy", "ddp", "--accelerator", "cpu", "--devices", "2", "--model", f"ranks_cases:{name}",
              "--json"])  # fmt: skip
    found = json.loads(out.getvalue())["findings"]
    return [(each["code"], each["message"]) for each in found if each["severity"] == "error"]


@pytest.mark.distributed
@pytest.mark.proves("LP744")
def test_lp744_a_collective_the_ranks_enter_differently_fails_a_real_run(
    proof: Proof, rank_cases: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On 2 real gloo ranks (Lightning's DDP, a 5 s process-group timeout): a ``self.log(..., sync_dist=True)`` on
    rank 0 only times out in gloo (rank 0's extra all-reduce pairs with its peer's next collective until one waits
    alone); an ``all_gather`` in a rank-0-only ``on_train_epoch_end`` waits until its peer, done, closes the
    connection; an ``all_gather`` of rank-dependent shapes aborts rank 0 in gloo (a size mismatch). The check names
    each before launch (LP744, with the collective, the ranks and the user's line); the neighbours, which enter the
    same collectives alike on every rank or none (``rank_zero_only`` logging, a rank-0 print and plain log), train
    on both ranks and are accepted."""
    closed = r"Connection (reset|closed) by peer"  # a rank that waits while its peer, done or failed, has exited
    for name, match in (("RankZeroSyncLog", rf"Timed out waiting 5000ms|{closed}"),
                        ("RankZeroGather", rf"{closed}|Timed out waiting 5000ms")):  # fmt: skip
        said = _rank_codes(rank_cases, name, monkeypatch)
        assert [code for code, _ in said] == ["LP744"], said
        assert "ranks_cases.py:" in said[0][1], said
        output, found = _real(rank_cases, name)
        assert f"TRAINED {name} 0" not in output, output
        proof.child(found, name, "RuntimeError", match, code="LP744")
        if name == "RankZeroSyncLog":  # the hang: a rank waits out the process group's timeout
            assert any("Timed out waiting 5000ms" in each["message"] for each in found), found
    said = _rank_codes(rank_cases, "ShapeByRank", monkeypatch)
    assert [code for code, _ in said] == ["LP744"], said
    assert "different shapes" in said[0][1], said
    job = run_job(rank_cases / "job.py", "ShapeByRank", path=(str(HERE), str(rank_cases)), cwd=rank_cases, timeout=120)
    aborted = [each for each in job.ranks if each.status == "died" and "data size doesn't match" in each.output]
    assert aborted, job.describe()  # gloo's own size check aborts the rank that receives the other's shape
    proof.wrong(f"rank {aborted[0].rank} of an all_gather of rank-dependent shapes on 2 gloo ranks", "trained",
                f"died by signal {aborted[0].signal} (gloo: received data size doesn't match)",
                code="LP744")  # fmt: skip
    neighbours = ("Base", "RankZeroPrint", "GatherEqual")
    for name in neighbours:
        assert _rank_codes(rank_cases, name, monkeypatch) == [], name
    job = run_job(rank_cases / "job.py", ",".join(neighbours), path=(str(HERE), str(rank_cases)), cwd=rank_cases,
                  timeout=120)  # fmt: skip
    assert job.outcome == "trained", job.describe()
    assert all(f"TRAINED {name} {rank}" in job.stdout for name in neighbours for rank in (0, 1)), job.stdout
