"""The strategy's set-up rehearsed on the job's real sizes (``tools/check/rehearsal/setup.py``): DDP's wrapper with
the preset's options, FSDP2's ``fully_shard``, tensor parallelism through the user's ``configure_model`` on the
preset's mesh, FSDP1 with torch's own wrapper, then the optimizers and one step, as rank ``r`` of ``W`` in one CPU
process; LP750 and LP751 proven by real 2-process gloo runs of the same models that fail the same way.

The models live here so that the fork server's jobs (``run_job("test_setup:fit", ...)``) and the
rehearsal run the very same code.
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


@pytest.fixture(autouse=True, scope="module")
def _rehearsal_world() -> None:
    from lightning_presets.tools.check.rehearsal.setup import world_available

    if not world_available():
        pytest.skip("this torch cannot make the rehearsal's process group (the rehearsal says so: not rehearsed)")


class Block(nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


class Plain(LightningModule):
    """Two repeated blocks and a head; its own train_dataloader yields (x, y)."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("loss", loss, sync_dist=True)
        return loss

    def configure_optimizers(self) -> Any:
        return torch.optim.AdamW(self.parameters(), lr=1e-2)

    def train_dataloader(self) -> Any:
        generator = torch.Generator().manual_seed(0)
        data = [(torch.randn(16, generator=generator), torch.tensor(index % 4)) for index in range(16)]
        return torch.utils.data.DataLoader(data, batch_size=4)


class TensorParallel(Plain):
    """Megatron-style pairs in configure_model, on the preset's tensor-parallel dimension."""

    dimension = "tensor_parallel"

    def configure_model(self) -> None:
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        mesh = self.device_mesh[self.dimension]
        for block in self.blocks:
            parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})


class WrongMeshName(TensorParallel):
    """configure_model asks the mesh for a dimension the preset's mesh does not name."""

    dimension = "tp"


class ReadsSharedWeight(Plain):
    """The forward reads a block's weight outside that block (a tied projection): under FSDP2 it is a DTensor shard
    there, outside the unit that gathers it. (Through ``torch.einsum``, whose Python frame is torch's: the dispatcher
    raises from C++, and the proof names the library frame that raised.)"""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        x = torch.einsum("bi,oi->bo", x, self.blocks[0].down.weight[:, :16])
        return self.head(x)


# --------------------------------------------------------------------------------------------- the real runs


def fit(model_name: str, strategy: str) -> None:
    """A real run (the harness's rank): the preset on 2 CPU processes (gloo), one step of ``model_name``."""
    from lightning.pytorch import Trainer

    import lightning_presets

    torch.manual_seed(0)
    model = globals()[model_name]()
    trainer = Trainer(strategy=lightning_presets.strategy(strategy), accelerator="cpu", devices=2, max_steps=1,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)  # fmt: skip
    try:
        trainer.fit(model)
    except Exception as error:
        report(model_name, error)  # a PROOF line: what raised, and where (torch's code, not this repository's)
        raise
    print("RESULT", '{"trained": true}', flush=True)


def _real(model_name: str, strategy: str) -> Any:
    from harness import run_job

    return run_job("test_setup:fit", model_name, strategy, timeout=180,
                   path=(str(HERE), str(TESTS / "evidence"), str(TESTS)),
                   env={"LIGHTNING_PRESETS_SKIP": os.environ.get("LIGHTNING_PRESETS_SKIP", "")})  # fmt: skip


def _rehearsed(model: Any, strategy: str, devices: int = 4, num_nodes: int = 1, rank: int = 0) -> list[Any]:
    from lightning_presets.tools.check.rehearsal.setup import SetupJob, rehearse_setup

    return rehearse_setup(model, SetupJob(strategy, {}, devices, num_nodes), {"precision": "32-true"}, rank=rank)


def _outcomes(records: list[Any]) -> list[str]:
    return [record.outcome for record in records]


# --------------------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("strategy", ["ddp_static_graph", "ddp_bf16_compress", "fsdp2"])
def test_wrapping_optimizers_and_step_complete_on_the_real_world_size(strategy: str) -> None:
    records = _rehearsed(Plain(), strategy, devices=8)
    assert _outcomes(records) == ["completed"] * 5, records
    assert "rank 0 of 8" in records[0].name
    if strategy == "ddp_static_graph":
        assert "static_graph=True" in records[2].name
        assert "gradient_as_bucket_view=True" in records[2].name
    if strategy == "ddp_bf16_compress":
        assert "bf16_compress_hook" in records[2].name  # DDP's backward ran the preset's hook on a real future
    if strategy == "fsdp2":
        assert "data_parallel=8" in records[0].name


def test_tensor_parallel_through_configure_model_on_the_preset_mesh() -> None:
    """tp2d_hybrid on 2 nodes of 4: the user's parallelize plan on DeviceMesh(data_parallel=2, tensor_parallel=4),
    AdamW over the DTensor shards, one step; the last rank of the second node too."""
    for rank in (0, 7):
        records = _rehearsed(TensorParallel(), "tp2d_hybrid", devices=4, num_nodes=2, rank=rank)
        assert _outcomes(records) == ["completed"] * 5, records
        assert "data_parallel=2, tensor_parallel=4" in records[0].name
        assert f"rank {rank} of 8" in records[0].name


def test_the_child_gets_the_model_back_untouched() -> None:
    from lightning_presets.tools.check.rehearsal.setup import JOB_VARIABLE, SetupJob, strategy_stages

    model = Plain()
    before = [type(p) for p in model.parameters()]
    os.environ[JOB_VARIABLE] = SetupJob("fsdp2", {}, 2, 1).as_json()
    try:
        records = strategy_stages(model, {}, "model_parallel", 2, 0)
    finally:
        del os.environ[JOB_VARIABLE]
    assert _outcomes(records) == ["completed"] * 5
    assert [type(p) for p in model.parameters()] == before  # sharded a copy, not the model fit gets
    assert not torch.distributed.is_initialized()


def test_without_the_job_it_says_so() -> None:
    from lightning_presets.tools.check.rehearsal.setup import strategy_stages

    records = strategy_stages(Plain(), {}, "ddp", 2, 0)
    assert _outcomes(records) == ["not rehearsed"]


@pytest.mark.proves("LP750")
def test_lp750_configure_model_on_the_preset_mesh_raises_as_a_real_run_does(proof: Proof) -> None:
    job = _real("WrongMeshName", "tp2d_hybrid")
    assert job.outcome == "raised", job.describe()
    errors = job.errors()
    assert set(errors) == {0, 1}, job.describe()
    assert all(each["type"] == "KeyError" for each in errors.values()), job.describe()
    proof.child(reports(job.stdout), "WrongMeshName", "KeyError", "Invalid mesh_dim_names", code="LP750")
    records = _rehearsed(WrongMeshName(), "tp2d_hybrid", devices=2)
    assert _outcomes(records) == ["completed", "raised"], records
    raised = records[1]
    assert raised.code == "LP750"
    assert raised.exception.startswith("KeyError")
    assert "'tp'" in raised.exception
    assert "test_setup.py" in raised.line
    assert "configure_model" in raised.line
    assert "'tp'" in errors[0]["message"]
    assert not unproven(("LP750",), proof)


@pytest.mark.proves("LP751")
def test_lp751_a_step_that_reads_a_sharded_weight_raises_as_a_real_run_does(proof: Proof) -> None:
    job = _real("ReadsSharedWeight", "fsdp2")
    assert job.outcome == "raised", job.describe()
    errors = job.errors()
    assert set(errors) == {0, 1}, job.describe()
    assert all("DTensor" in each["message"] for each in errors.values()), job.describe()
    proof.child(reports(job.stdout), "ReadsSharedWeight", "RuntimeError", "mixed torch.Tensor and DTensor",
                code="LP751")  # fmt: skip
    records = _rehearsed(ReadsSharedWeight(), "fsdp2", devices=2)
    assert _outcomes(records) == ["completed"] * 4 + ["raised"], records
    assert records[-1].code == "LP751"
    assert "DTensor" in records[-1].exception
    assert "in forward" in records[-1].line
    assert not unproven(("LP751",), proof)


def test_neighbours_train_for_real_and_in_the_rehearsal() -> None:
    """The accepted neighbours of LP750/LP751: the right mesh name, and the weight read inside its block."""
    for model_name, strategy in (("TensorParallel", "tp2d_hybrid"), ("Plain", "fsdp2")):
        job = _real(model_name, strategy)
        assert job.outcome == "trained", job.describe()
        assert _outcomes(_rehearsed(globals()[model_name](), strategy, devices=2)) == ["completed"] * 5


def test_the_unwrapped_model_is_not_blamed() -> None:
    """ReadsSharedWeight trains under DDP (the weight is a plain tensor there): no finding."""
    assert _outcomes(_rehearsed(ReadsSharedWeight(), "ddp_static_graph")) == ["completed"] * 5


def test_fsdp1_says_where_lightning_stops_and_runs_torch_fsdp() -> None:
    records = _rehearsed(Plain(), "fsdp_grad_op")
    assert records[0].outcome == "not rehearsed"
    assert "requires a GPU accelerator" in records[0].detail
    assert _outcomes(records[1:]) == ["completed"] * 5, records
    assert "SHARD_GRAD_OP" in records[3].name
    offload = _rehearsed(Plain(), "fsdp_offload_ckpt")
    assert offload[-1].outcome == "raised"
    assert offload[-1].code == ""  # pin_memory needs an accelerator: the rehearsal's limit, no code
    assert "the rehearsal's limit" in offload[-1].detail


def test_findings_of_the_records() -> None:
    from lightning_presets.tools.check.rehearsal.findings import Rehearsal, findings

    records = tuple(_rehearsed(WrongMeshName(), "tp2d_hybrid", devices=2))
    found = findings(Rehearsal(records=records), "m:WrongMeshName", "check")
    assert [each.code for each in found] == ["LP750"]
    assert "test_setup.py" in found[0].message
    limit = tuple(_rehearsed(Plain(), "fsdp_offload_ckpt"))
    assert [each.code for each in findings(Rehearsal(records=limit), "m:Plain", "check")] == ["LP743"]


def test_a_torch_that_cannot_make_the_world_is_said_not_blamed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where this torch's Python process-group API differs (the world cannot be made), the set-up is not rehearsed,
    said so, and the child's own fake process group is put back as it was."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    from lightning_presets.tools.check.rehearsal import mirror

    def refuse() -> type:
        raise TypeError("no Python process groups here")

    monkeypatch.setattr(mirror, "_mirror_group_class", refuse)
    torch.distributed.init_process_group("fake", store=FakeStore(), rank=3, world_size=4)
    try:
        records = _rehearsed(Plain(), "fsdp2", devices=4, rank=3)
        assert torch.distributed.get_rank() == 3
        assert torch.distributed.get_world_size() == 4
    finally:
        torch.distributed.destroy_process_group()
    assert _outcomes(records) == ["not rehearsed"]
    assert "cannot make the rehearsal's process group" in records[0].detail


class DataElsewhere(Plain):
    """Its data lives where the job runs."""

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(torch.load("/nonexistent/where/the/job/runs.pt"), batch_size=4)


def test_data_not_on_this_machine_is_not_blamed_on_the_set_up() -> None:
    """The wrapping and optimizers ran; the step's data is not here: said as not rehearsed (the child's own fit says
    it once, LP743), never LP751."""
    records = _rehearsed(DataElsewhere(), "fsdp2")
    assert _outcomes(records) == ["completed"] * 4 + ["not rehearsed"], records
    assert records[-1].code == ""
    assert "data" in records[-1].detail


class NoData(Plain):
    def train_dataloader(self) -> Any:  # the job's data comes from a LightningDataModule
        raise NotImplementedError


class Pairs(__import__("lightning.pytorch", fromlist=["LightningDataModule"]).LightningDataModule):  # type: ignore[misc]
    def setup(self, stage: str) -> None:
        self.data = [(torch.randn(16), torch.tensor(index % 4)) for index in range(8)]

    def train_dataloader(self) -> Any:
        return torch.utils.data.DataLoader(self.data, batch_size=4)


def test_the_batches_come_from_the_datamodule_when_given() -> None:
    """``check --datamodule``: the child hands the data module to the plug-in; fit takes its loaders."""
    from lightning_presets.tools.check.rehearsal.setup import SetupJob, rehearse_setup

    records = rehearse_setup(NoData(), SetupJob("fsdp2", {}, 2, 1), {}, datamodule=Pairs())
    assert _outcomes(records) == ["completed"] * 5, records
    assert "Pairs.train_dataloader()" in records[-1].name
    fsdp1 = rehearse_setup(NoData(), SetupJob("fsdp_grad_op", {}, 2, 1), {}, datamodule=Pairs())
    assert _outcomes(fsdp1) == ["not rehearsed"] + ["completed"] * 5, fsdp1


def fsdp1_train() -> None:
    """A real run (the harness's rank): torch's FSDP1 on the CPU (``device_id=cpu``, gloo) with the FSDP1 presets'
    sharding strategies, the repeated blocks as the wrap policy, ``use_orig_params=True``: two steps each."""
    import json

    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    torch.distributed.init_process_group("gloo")
    rank = torch.distributed.get_rank()
    for sharding in ("FULL_SHARD", "SHARD_GRAD_OP"):
        torch.manual_seed(0)
        model = Plain()
        total = sum(p.numel() for p in model.parameters())
        wrapped = FullyShardedDataParallel(model, sharding_strategy=ShardingStrategy[sharding],
                                           auto_wrap_policy=ModuleWrapPolicy({Block}), device_id=torch.device("cpu"),
                                           use_orig_params=True)  # fmt: skip
        local = sum(p.numel() for p in wrapped.parameters())  # use_orig_params: views of this rank's shard
        optimizer = torch.optim.AdamW(wrapped.parameters(), lr=1e-2)
        losses = []
        for x, y in list(model.train_dataloader())[:2]:
            loss = nn.functional.cross_entropy(wrapped(x + rank), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(float(loss))
        print("RESULT", json.dumps({"sharding": sharding, "rank": rank, "local": local, "total": total,
                                    "losses": losses}), flush=True)  # fmt: skip
    torch.distributed.destroy_process_group()


def test_fsdp1_trains_on_two_cpu_processes_with_torchs_wrapper() -> None:
    """What the FSDP1 rehearsal relies on, for real: torch's FSDP1 on 2 gloo processes with device_id=cpu trains
    with the presets' FULL_SHARD and SHARD_GRAD_OP, each rank holding half of the flat parameters."""
    from harness import run_job

    job = run_job("test_setup:fsdp1_train", path=(str(HERE), str(TESTS / "evidence"), str(TESTS)), timeout=180)
    assert job.outcome == "trained", job.describe()
    results = job.reports()
    assert sorted((each["sharding"], each["rank"]) for each in results) == [
        ("FULL_SHARD", 0), ("FULL_SHARD", 1), ("SHARD_GRAD_OP", 0), ("SHARD_GRAD_OP", 1)]  # fmt: skip
    for each in results:
        assert each["local"] * 2 >= each["total"] > each["local"]
        assert all(loss == loss for loss in each["losses"])
