"""A Fabric job rehearsed on the job's real sizes (``tools/check/rehearsal/fabric.py``): the user's set-up function
given the preset's Fabric on CPU as rank 0 of W, ``fabric.setup`` (DDP's wrapper, FSDP2's ``fully_shard``),
``setup_dataloaders`` and one step with ``fabric.backward``; ``check --mode fabric --model MODULE:FUNCTION``."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader


@pytest.fixture(autouse=True, scope="module")
def _rehearsal_world() -> None:
    from lightning_presets.tools.check.rehearsal.setup import world_available

    if not world_available():
        pytest.skip("this torch cannot make the rehearsal's process group (the rehearsal says so: not rehearsed)")


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(16, 32)
        self.down = nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def classify(model: nn.Module, batch: Any) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x), y)


def job(fabric: Any) -> Any:
    """A Fabric set-up function: the model, its optimizer, a DataLoader of (x, y) and the step's loss."""
    model = Net()
    data = [(torch.randn(16), torch.tensor(index % 4)) for index in range(8)]
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), DataLoader(data, batch_size=4), classify


def reads_a_shard(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    out = model(batch)
    return torch.einsum("bi,oi->bo", out, model.blocks[0].down.weight[:4, :4]).sum()  # type: ignore[index]


def job_reading_a_shard(fabric: Any) -> Any:
    model = Net()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), torch.randn(4, 16), reads_a_shard


def _rehearsed(function: Any, strategy: str, devices: int = 4) -> list[Any]:
    from lightning_presets.tools.check.rehearsal.fabric import rehearse_fabric_in_process
    from lightning_presets.tools.check.rehearsal.setup import SetupJob

    return rehearse_fabric_in_process(function, SetupJob(strategy, {}, devices, 1), "32-true")


@pytest.mark.parametrize("strategy", ["ddp_static_graph", "fsdp2"])
def test_setup_dataloaders_and_one_step_complete(strategy: str) -> None:
    records = _rehearsed(job, strategy, devices=8)
    assert [each.outcome for each in records] == ["completed"] * 5, records
    assert "rank 0 of 8" in records[0].name
    assert ("DDPStrategy" if strategy.startswith("ddp") else "ModelParallelStrategy") in records[2].name


def test_a_step_through_the_sharded_model_raises_lp751() -> None:
    records = _rehearsed(job_reading_a_shard, "fsdp2")
    assert [each.outcome for each in records] == ["completed"] * 4 + ["raised"], records
    assert records[-1].code == "LP751"
    assert "DTensor" in records[-1].exception
    assert "reads_a_shard" in records[-1].line
    assert _rehearsed(job_reading_a_shard, "ddp_static_graph")[-1].outcome == "completed"  # plain tensors there


def test_fsdp1_and_deepspeed_fabric_jobs_say_they_stop() -> None:
    for strategy in ("fsdp_grad_op", "deepspeed_zero2_offload"):
        records = _rehearsed(job, strategy)
        assert [each.outcome for each in records] == ["not rehearsed"], records
        assert "accelerator='cpu'" in records[0].detail


def test_a_set_up_function_is_told_apart_from_a_model_factory() -> None:
    from lightning_presets.tools.check.rehearsal.fabric import takes_a_fabric

    assert takes_a_fabric(job)
    assert not takes_a_fabric(Net)
    assert not takes_a_fabric(lambda: Net())


def test_check_mode_fabric_rehearses_the_function_in_a_child() -> None:
    from lightning_presets.tools.check.engine import check_job
    from lightning_presets.tools.check.request import CheckRequest

    def rehearse(spec: str) -> Any:
        return check_job(CheckRequest(mode="fabric", model=spec, gpus=8, arguments={
            "strategy": "fsdp2", "accelerator": "cuda", "devices": 8}))  # fmt: skip

    legal = rehearse("test_fabric:job")
    note = next(each for each in legal.request.notes if each.startswith("Fabric job rehearsed"))
    if "autograd" in note and "fork" in note:
        pytest.skip("this torch refuses autograd in a child forked after autograd ran (the rehearsal says so)")
    assert "fabric.setup(model, optimizer) with ModelParallelStrategy" in note, note
    assert "stopped" not in note, note
    assert not [each for each in legal.findings if each.code.startswith("LP75")]
    failing = rehearse("test_fabric:job_reading_a_shard")
    assert [each.code for each in failing.findings if each.code.startswith("LP75")] == ["LP751"]
