"""check --model on a model above the real-tensor limit (issue 35 items 1 and 6): the rehearsal runs the step plan
traces (``tools.check.rehearsal.fake``, through ``tools.simulation``) under fake tensors in torch's fake process group;
the user's exception is LP740/LP741 with their line, what fake tensors cannot run is LP743 (a warning), the stages
completed are said. The limit is lowered here (the models are tiny: each rehearsal is one forked child)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from lightning_presets.tools.check import rehearsal
from lightning_presets.tools.check.rehearsal import child

MODELS = """
import torch
from torch import nn
from torch.nn import functional as F
from lightning.pytorch import LightningModule


class Legal(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.example_input_array = (torch.zeros(2, 4), torch.zeros(2, dtype=torch.long))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class UnpackThree(Legal):
    def training_step(self, batch, batch_idx):
        x, y, z = batch  # the batch has two tensors
        return F.cross_entropy(self.net(x), y)


class BadOptimizer(Legal):
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=-1.0)


class WithLoader(UnpackThree):
    def train_dataloader(self):
        data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.zeros(8, dtype=torch.long), torch.ones(8))
        return torch.utils.data.DataLoader(data, batch_size=2)


class ReadsAValue(Legal):
    def training_step(self, batch, batch_idx):
        x, y = batch
        if x.sum().item() > 0:  # a value: fake tensors have none
            x = x * 2
        return F.cross_entropy(self.net(x), y)
"""


@pytest.fixture
def large(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The models' module importable, and the real-tensor limit below their size."""
    (tmp_path / "rehearsal_large_t.py").write_text(textwrap.dedent(MODELS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv(child.MAX_PARAMETERS_VARIABLE, "5")  # a forked or a fresh child reads it
    return tmp_path


def _codes(result: rehearsal.Rehearsal, spec: str) -> list[tuple[str, str]]:
    return [(each.code, each.severity) for each in rehearsal.findings(result, spec, "Trainer()")]


def test_a_large_models_failing_step_is_lp741_under_fake_tensors_and_a_legal_one_passes(large: Path) -> None:
    spec = "rehearsal_large_t:UnpackThree"
    refused = rehearsal.rehearse(spec, {}, "ddp", world_size=2)
    assert refused.stage == "first training step", refused
    assert refused.exception.startswith("ValueError: not enough values to unpack"), refused
    assert "rehearsal_large_t.py:" in refused.line, refused.line
    assert refused.line.endswith("in training_step"), refused.line
    assert refused.completed == ("set-up",), refused
    assert any("under fake tensors" in note for note in refused.notes), refused.notes
    assert _codes(refused, spec) == [("LP741", "error")]
    (finding,) = rehearsal.findings(refused, spec, "Trainer()")
    assert "plan's training step under fake tensors" in finding.message, finding.message
    legal = rehearsal.rehearse("rehearsal_large_t:Legal", {"precision": "bf16-mixed"}, "ddp", world_size=2)
    assert legal.completed == ("set-up", "first training step"), legal
    assert not legal.limitation, legal
    assert legal.stage is None, legal
    assert legal.steps[-1] == "optimizer step (under fake tensors)", legal.steps
    assert legal.ranks == (0, 1), legal
    assert _codes(legal, "rehearsal_large_t:Legal") == []


def test_a_large_models_failing_set_up_is_lp740_and_what_fake_tensors_cannot_run_is_lp743(large: Path) -> None:
    spec = "rehearsal_large_t:BadOptimizer"
    refused = rehearsal.rehearse(spec, {}, None)
    assert refused.stage == "set-up", refused
    assert refused.completed == (), refused
    assert "Invalid learning rate" in refused.exception, refused
    assert "rehearsal_large_t.py:" in refused.line, refused
    assert refused.line.endswith("in configure_optimizers"), refused
    assert _codes(refused, spec) == [("LP740", "error")]
    spec = "rehearsal_large_t:ReadsAValue"
    limited = rehearsal.rehearse(spec, {}, None)
    assert limited.stage is None, limited
    assert "fake tensors" in limited.limitation, limited.limitation
    assert "item" in limited.limitation, limited.limitation
    assert "rehearsal_large_t.py" in limited.limitation, limited.limitation
    assert limited.completed == ("set-up",), limited
    assert _codes(limited, spec) == [("LP743", "warning")]
    loaded = rehearsal.rehearse("rehearsal_large_t:WithLoader", {}, None)  # its loader's batch has three tensors
    assert loaded.completed == ("set-up", "first training step"), loaded
    assert "first batch from WithLoader.train_dataloader()" in loaded.notes, loaded.notes
