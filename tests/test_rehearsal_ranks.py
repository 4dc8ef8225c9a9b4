"""Ranks that would disagree, named before launch (issue 35 item 3): ``check --model`` rehearses rank 0 and the ranks
whose code can differ (the last, the second node's first), each as that rank, records each one's collectives and
names a collective some ranks enter and others do not, or enter with other shapes (LP744). The real 2-process runs
that fail without the check, and the neighbours that train, are in ``tests/evidence/test_fails_rehearsal.py`` (the
``proves`` plugin's folder); here: the comparison itself, the ranks chosen, several nodes, object collectives, and
what ``check`` and its JSON say."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lightning_presets.tools.check import rehearsal
from lightning_presets.tools.check.rehearsal.collectives import disagreements

MODELS = """
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from lightning.pytorch import LightningModule


class Base(LightningModule):
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
        return DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=4)

    val_dataloader = train_dataloader


class RankZeroSyncLog(Base):
    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if self.global_rank == 0:
            self.log("rank0_loss", loss, sync_dist=True)
        return loss


class LocalZeroReduce(Base):
    # each node's local rank 0 reduces: ranks 0 and 8 of 2 x 8 do, rank 15 does not
    def on_train_epoch_end(self):
        if self.local_rank == 0:
            dist.all_reduce(torch.ones(2))


class LastRankRaises(Base):
    def training_step(self, batch, batch_idx):
        if self.global_rank == self.trainer.world_size - 1:
            raise ValueError("only the last rank has no labels")
        return super().training_step(batch, batch_idx)


class ObjectsEverywhere(Base):
    # object collectives on every rank: answered with the rank's own objects, no garbage on rank 1
    def on_train_epoch_end(self):
        names = [None] * self.trainer.world_size
        dist.all_gather_object(names, f"rank{self.global_rank}")
        shared = [{"seed": 7}]
        dist.broadcast_object_list(shared, src=0)
        assert shared[0]["seed"] == 7 and all(isinstance(each, str) for each in names)
        self.all_gather(torch.ones(3))
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "ranks_models_t.py").write_text(textwrap.dedent(MODELS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def _rehearsed(name: str, world_size: int = 2, num_nodes: int = 1) -> list[tuple[str, str]]:
    result = rehearsal.rehearse(f"ranks_models_t:{name}", {}, "ddp", timeout_s=120, world_size=world_size,
                                num_nodes=num_nodes)  # fmt: skip
    assert result.stage is None, result
    assert not result.limitation, result
    assert result.ranks == rehearsal.ranks_to_rehearse(world_size, num_nodes), result
    return [(each.code, each.message) for each in rehearsal.findings(result, f"ranks_models_t:{name}", "Trainer()")]


def _call(kind: str, shape: list[int], line: str = "", hook: str = "") -> dict[str, Any]:
    return {"kind": kind, "group": 2, "shapes": [shape], "dtypes": ["float32"], "line": line, "hook": hook}


def test_the_ranks_rehearsed_are_rank_zero_the_last_and_the_second_nodes_first() -> None:
    assert rehearsal.ranks_to_rehearse(1) == (0,)
    assert rehearsal.ranks_to_rehearse(8) == (0, 7)
    assert rehearsal.ranks_to_rehearse(16, 2) == (0, 8, 15)
    assert rehearsal.ranks_to_rehearse(2, 2) == (0, 1)


def test_the_comparison_names_the_block_one_rank_enters_alone_and_accepts_equal_collectives() -> None:
    common = [_call("barrier", []), _call("all_reduce", [])]
    extra = [_call("all_reduce", [], "m.py:9 in training_step", "training_step")]
    assert disagreements({0: common + extra + common, 1: common + common}) == [
        "rank 0 enters all_reduce(float32[]) at m.py:9 in training_step (hook training_step), which rank 1 does not "
        "enter: a collective some ranks enter and others do not (the others wait in it until the timeout, or pair it "
        "with a later one)"
    ]
    # the same collectives from other lines (a rank-dependent branch that reduces alike) agree
    assert disagreements({0: [_call("all_reduce", [4], "m.py:3")], 1: [_call("all_reduce", [4], "m.py:5")]}) == []
    shapes = disagreements({0: [_call("all_gather", [2], "m.py:3")], 3: [_call("all_gather", [5], "m.py:3")],
                            7: [_call("all_gather", [2], "m.py:3")]})  # fmt: skip
    assert len(shapes) == 1, shapes
    assert "rank 0 enters all_gather(float32[2]) at m.py:3 and rank 3 enters all_gather(float32[5])" in shapes[0]
    # an all_gather whose output lists agree may gather uneven inputs (NCCL does); all_to_all's splits may differ
    uneven = {0: [{**_call("all_gather", [2]), "shapes": [[2], [3], [2]], "dtypes": ["float32"] * 3},
                  _call("all_to_all_single", [4])],
              1: [{**_call("all_gather", [3]), "shapes": [[2], [3], [3]], "dtypes": ["float32"] * 3},
                  _call("all_to_all_single", [6])]}  # fmt: skip
    assert disagreements(uneven) == []
    alike = disagreements({0: common + extra, 1: common, 2: common})  # ranks that depart alike: one sentence
    assert len(alike) == 1, alike
    assert "which ranks 1, 2 do not enter" in alike[0], alike


def test_each_rank_runs_as_itself_on_several_nodes(models: Path) -> None:
    """2 nodes x 8: ranks 0, 8 and 15 rehearsed; ``local_rank`` 0 on each node reduces, so rank 15 does not enter the
    collective ranks 0 and 8 enter; object collectives on every rank are answered and agree."""
    found = _rehearsed("LocalZeroReduce", world_size=16, num_nodes=2)
    assert [code for code, _ in found] == ["LP744"], found
    assert "which rank 15 does not enter" in found[0][1], found
    assert "ranks_models_t.py:" in found[0][1], found
    assert "in on_train_epoch_end (hook on_train_epoch_end)" in found[0][1], found
    assert _rehearsed("ObjectsEverywhere") == []


def test_a_failure_of_one_rank_only_is_said_with_its_rank(models: Path) -> None:
    """Rank 0 trains, the last rank raises: the training step's error names the rank and that the others wait."""
    result = rehearsal.rehearse("ranks_models_t:LastRankRaises", {}, "ddp", timeout_s=120, world_size=4)
    assert (result.stage, result.rank) == ("first training step", 3), result
    (found,) = rehearsal.findings(result, "ranks_models_t:LastRankRaises", "Trainer()")
    assert found.code == "LP741", found
    assert "only the last rank has no labels at ranks_models_t.py:" in found.message, found
    assert "on rank 3" in found.message, found
    assert "only rank 3" in found.hint, found


def test_check_json_names_the_disagreement_and_lists_the_stages(
    models: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``check --model ... --json``: LP744 is an error (exit 1); the notes list the ranks rehearsed, the stages
    completed and what was not rehearsed."""
    from lightning_presets.cli import main

    argv = ["check", "--strategy", "ddp", "--accelerator", "cpu", "--devices", "2", "--model",
            "ranks_models_t:RankZeroSyncLog", "--json"]  # fmt: skip
    assert main(argv) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(each["code"], each["severity"]) for each in report["findings"]] == [("LP744", "error")], report
    said = next(note for note in report["notes"] if note.startswith("rehearsal ("))
    assert "ranks 0, 1 of 2" in said, said
    for stage in ("fit-start", "configure_optimizers", "sanity validation step", "training step", "backward",
                  "optimizer step", "epoch-end hooks", "checkpoint save"):  # fmt: skip
        assert stage in said, (stage, said)
    assert "not rehearsed:" in said, said
    assert "NCCL itself" in said, said
    assert "CUDA kernels" in said, said


DATA = """
import torch
from torch.utils.data import DataLoader, TensorDataset
from lightning.pytorch import LightningDataModule
from ranks_models_t import Base


class NoLoaders(Base):
    train_dataloader = val_dataloader = None


class Pairs(LightningDataModule):
    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,))), batch_size=4)

    val_dataloader = train_dataloader


class Triples(LightningDataModule):
    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)), torch.ones(8)), batch_size=4)
"""


def test_datamodule_gives_the_first_batches(models: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--datamodule MODULE:FACTORY``: its loaders feed the rehearsal (the model has none); a batch its step cannot
    unpack is the training step's error; without --model it is a usage error."""
    from lightning_presets.cli import main

    (models / "ranks_data_t.py").write_text(textwrap.dedent(DATA))
    job = ["check", "--strategy", "ddp", "--accelerator", "cpu", "--devices", "2", "--json"]
    assert main([*job, "--model", "ranks_data_t:NoLoaders", "--datamodule", "ranks_data_t:Pairs"]) == 0
    report = json.loads(capsys.readouterr().out)
    said = next(note for note in report["notes"] if note.startswith("rehearsal ("))
    assert "first batch from Pairs.train_dataloader()" in said, said
    assert "sanity validation step" in said, said
    assert report["request"]["datamodule"] == "ranks_data_t:Pairs", report["request"]
    assert main([*job, "--model", "ranks_data_t:NoLoaders", "--datamodule", "ranks_data_t:Triples"]) == 1
    found = json.loads(capsys.readouterr().out)["findings"]
    assert [(each["code"], each["severity"]) for each in found] == [("LP741", "error")], found
    assert "too many values to unpack" in found[0]["message"], found
    with pytest.raises(SystemExit) as usage:
        main([*job, "--datamodule", "ranks_data_t:Pairs"])
    assert usage.value.code == 2
    assert "give --model MODULE:FACTORY too" in capsys.readouterr().err
