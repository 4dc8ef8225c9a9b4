"""``check --model ... --resume-from PATH``: the checkpoint's load into the model, rehearsed
(``tools/check/rehearsal/resume.py``). LP745 proven by a real 2-process gloo run: ``Trainer.fit(ckpt_path=...)`` of a
model whose layers are narrower than the checkpoint's raises Lightning's strict load error on both ranks; the
accepted neighbour (the model that saved it) resumes for real and is accepted by the check.

The models live here so that the fork server's jobs (``run_job("test_resume_load:...", ...)``) and the rehearsal run the
very same code; both import this module by its name, which no other test module may have (``tests/test_resume.py``
took its place in a whole-suite run).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule
from proof import Proof, report, reports, unproven
from torch import nn

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[2]
PRESET = "ddp_static_graph"


class Wide(LightningModule):
    """A classifier with a hidden layer of ``width``; its own train_dataloader yields (x, y)."""

    width = 32

    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(16, self.width)
        self.head = nn.Linear(self.width, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.hidden(x)))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> Any:
        generator = torch.Generator().manual_seed(0)
        data = [(torch.randn(16, generator=generator), torch.tensor(index % 4)) for index in range(16)]
        return torch.utils.data.DataLoader(data, batch_size=4)


class Narrow(Wide):
    """The same layers, half as wide: Wide's checkpoint does not load into it."""

    width = 16


# --------------------------------------------------------------------------------------------- the real runs


def _trainer(steps: int) -> Any:
    from lightning.pytorch import Trainer

    import lightning_presets

    return Trainer(strategy=lightning_presets.strategy(PRESET), accelerator="cpu", devices=2, max_steps=steps,
                   logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False)  # fmt: skip


def save(path: str) -> None:
    """A real run (the harness's rank): Wide trains one step and saves ``path``, then resumes from it for a second."""
    torch.manual_seed(0)
    trainer = _trainer(1)
    trainer.fit(Wide())
    trainer.save_checkpoint(path)
    _trainer(2).fit(Wide(), ckpt_path=path)
    print("RESULT", '{"resumed": true}', flush=True)


def resume(model_name: str, path: str) -> None:
    """A real run: ``model_name`` resumes from ``path`` on 2 CPU processes."""
    torch.manual_seed(0)
    try:
        _trainer(2).fit(globals()[model_name](), ckpt_path=path)
    except Exception as error:
        report(model_name, error)  # a PROOF line: what raised, and where (Lightning's and torch's code)
        raise
    print("RESULT", '{"resumed": true}', flush=True)


def _real(*args: str) -> Any:
    from harness import run_job

    return run_job(f"test_resume_load:{args[0]}", *args[1:], timeout=180,
                   path=(str(HERE), str(TESTS / "evidence"), str(TESTS)))  # fmt: skip


@pytest.fixture(scope="module")
def wide_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Wide's checkpoint, saved by a real 2-process run, which resumed from it too (the accepted neighbour)."""
    path = tmp_path_factory.mktemp("resume") / "wide.ckpt"
    job = _real("save", str(path))
    assert job.outcome == "trained", job.describe()
    assert job.reports() == [{"resumed": True}, {"resumed": True}], job.describe()
    assert path.is_file()
    return path


def _check(model_name: str, path: Path | str, monkeypatch: pytest.MonkeyPatch) -> Any:
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    monkeypatch.syspath_prepend(str(HERE))
    request = CheckRequest(arguments={"strategy": PRESET, "accelerator": "cpu", "devices": 2},
                           model=f"test_resume_load:{model_name}", resume_from=str(path))  # fmt: skip
    report = run_check(request)
    return [each.finding for each in report.reported], report


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.proves("LP745")
def test_lp745_a_checkpoint_of_another_model_fails_to_load_as_a_real_resume_does(
    proof: Proof, wide_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    job = _real("resume", "Narrow", str(wide_checkpoint))
    assert job.outcome == "raised", job.describe()
    errors = job.errors()
    assert set(errors) == {0, 1}, job.describe()
    assert all("size mismatch" in each["message"] for each in errors.values()), job.describe()
    proof.child(reports(job.stdout), "Narrow", "RuntimeError", "size mismatch for hidden.weight", code="LP745")
    found, _ = _check("Narrow", wide_checkpoint, monkeypatch)
    loads = [each for each in found if each.code == "LP745"]
    assert len(loads) == 1, found
    assert loads[0].severity == "error"
    assert "size mismatch for hidden.weight" in loads[0].message, loads[0].message
    assert not [each for each in found if each.severity == "error" and each.code != "LP745"], found
    assert not unproven(("LP745",), proof)


def test_the_checkpoint_the_model_saved_loads_and_is_accepted(
    wide_checkpoint: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The neighbour: Wide resumed from its own checkpoint in the real run (the fixture); the check accepts it, and
    says the load completed."""
    found, report = _check("Wide", wide_checkpoint, monkeypatch)
    assert not [each for each in found if each.severity == "error"], found
    assert not [each for each in found if each.code == "LP743"], found
    from lightning_presets.tools.check.rehearsal.resume import STAGE

    assert any(STAGE in note for note in report.request.notes), report.request.notes


def test_a_distributed_checkpoint_folder_is_said_not_rehearsed(tmp_path: Path) -> None:
    from lightning_presets.tools.check.rehearsal import resume

    with resume.announced(str(tmp_path)):
        assert os.environ[resume.RESUME_VARIABLE] == str(tmp_path)
        record = resume.rehearse_load(Wide, {}, {}, str(tmp_path))
    assert resume.RESUME_VARIABLE not in os.environ
    assert record.outcome == "not rehearsed"
    assert "distributed checkpoint" in record.detail
