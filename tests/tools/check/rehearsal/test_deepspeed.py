"""DeepSpeed presets rehearsed through DeepSpeed's own engine on CPU (``tools/check/rehearsal/deepspeed.py``), and
their evidence raised to runtime: a real 2-process gloo run through DeepSpeed 0.19.8's engine (its CPU accelerator)
with each preset's config trains, and the config LP417 names is refused by the engine on every rank.

One harness job (``tests/scripts/ds_engine.py``) serves the runtime tests (the ranks import DeepSpeed once: most of its
seconds)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule
from proof import Proof, reports, unproven
from torch import nn

HERE = Path(__file__).resolve().parent
TESTS = HERE.parents[2]


deepspeed = pytest.importorskip("deepspeed", reason="DeepSpeed is not installed")


@pytest.fixture(autouse=True, scope="module")
def _rehearsal_world() -> None:
    from lightning_presets.tools.check.rehearsal.setup import world_available

    if not world_available():
        pytest.skip("this torch cannot make the rehearsal's process group (the rehearsal says so: not rehearsed)")


class Model(LightningModule):
    def __init__(self, optimizers: int = 1) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
        self.example_input_array = (torch.randn(4, 8), torch.tensor([0, 1, 2, 3]))
        self.optimizers_made = optimizers

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("loss", loss)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


class BadStep(Model):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, _ = batch
        return self(x[:, :4]).sum()  # 4 features into a layer of 8


@pytest.fixture(scope="module")
def engine_job() -> Any:
    from harness import run_job

    return run_job("ds_engine:presets", path=(str(TESTS / "scripts"), str(TESTS / "evidence")), timeout=300)


def _rehearsed(model: Any, strategy: str, precision: str = "bf16-mixed") -> list[Any]:
    from lightning_presets.tools.check.rehearsal.setup import SetupJob, rehearse_setup

    return rehearse_setup(model, SetupJob(strategy, {}, 4, 1), {"precision": precision})


@pytest.mark.parametrize("strategy", ["deepspeed_zero2_offload", "deepspeed_zero3_offload_ckpt"])
def test_rehearsal_runs_deepspeeds_engine_with_the_presets_config(strategy: str) -> None:
    records = _rehearsed(Model(), strategy)
    assert [each.outcome for each in records] == ["not rehearsed"] + ["completed"] * 4, records
    assert "CUDA" in records[0].detail
    assert ("ZeRO-3" if "zero3" in strategy else "ZeRO-2") in records[3].name
    assert "rank 0 of 4" in records[3].name


def test_a_step_that_raises_in_the_engine_is_lp751() -> None:
    records = _rehearsed(BadStep(), "deepspeed_zero2_offload")
    assert records[-1].outcome == "raised"
    assert records[-1].code == "LP751"
    assert "test_deepspeed.py" in records[-1].line  # the innermost frame of the user's: forward


def test_the_presets_configs_train_on_two_processes_through_deepspeeds_engine(engine_job: Any) -> None:
    """Runtime evidence of the DeepSpeed presets on CPU: each preset's config (ZeRO-2 with the optimizer offloaded,
    ZeRO-3 with parameters and optimizer offloaded, zero_force_ds_cpu_optimizer false) trains 2 steps with torch's
    AdamW on 2 gloo ranks; ZeRO-3 leaves each rank half of the parameters."""
    results = {(each["preset"], each["rank"]): each for each in engine_job.reports()}
    assert set(results) == {(name, rank) for name in ("deepspeed_zero2_offload", "deepspeed_zero3_offload_ckpt")
                            for rank in (0, 1)}, engine_job.describe()  # fmt: skip
    for (name, _), each in results.items():
        assert each["world"] == 2
        assert each["inner"] == "AdamW"  # the preset lets torch's optimizer step the offloaded state (LP416's case)
        assert each["offload_optimizer"]
        assert all(loss == loss for loss in each["losses"])  # no NaN
        if name == "deepspeed_zero3_offload_ckpt":
            assert each["stage"] == 3
            assert each["offload_param"]
            assert each["local_numel"] * 2 >= each["numel"] > each["local_numel"]
        else:
            assert each["stage"] == 2
            assert each["local_numel"] == each["numel"]


@pytest.mark.proves("LP417")
def test_lp417_deepspeeds_engine_refuses_torch_adamw_with_offload_on_every_rank(proof: Proof, engine_job: Any) -> None:
    found = [each for each in reports(engine_job.stdout) if each["scenario"] == "lp417"]
    assert len(found) == 2, engine_job.describe()
    proof.child(found, "lp417", "ZeRORuntimeException", "zero_force_ds_cpu_optimizer", code="LP417")
    assert not unproven(("LP417",), proof)
