"""A Fabric job rehearsed on the job's real sizes (``tools/check/rehearsal/fabric.py``): the user's set-up function
given the preset's Fabric on CPU as rank 0 of W, ``fabric.setup`` (DDP's wrapper, FSDP2's ``fully_shard``; FSDP1's
and DeepSpeed's in torch's FSDP and DeepSpeed's engine, where Lightning refuses a CPU), ``setup_dataloaders`` and one
step with ``fabric.backward``; ``check --mode fabric --model MODULE:FUNCTION``."""

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


SEEN: list[dict[str, Any]] = []
"""What the recording step saw: the wrapper it was handed, its sharding (FSDP) or ZeRO stage (DeepSpeed), the
optimizer steps taken before it."""


class CountedAdamW(torch.optim.AdamW):
    steps = 0
    dtypes: set[str] = set()  # noqa: RUF012 (what the steps saw)

    def step(self, closure: Any = None) -> Any:
        CountedAdamW.steps += 1
        CountedAdamW.dtypes |= {str(each.dtype) for group in self.param_groups for each in group["params"]}
        return super().step(closure)


def recording(model: Any, batch: Any) -> torch.Tensor:
    stage = getattr(model, "zero_optimization_stage", None)
    SEEN.append({"wrapper": type(model).__name__, "sharding": str(getattr(model, "sharding_strategy", "")),
                 "zero": stage() if callable(stage) else None, "checkpointed": sum(
                     "CheckpointWrapper" in type(each).__name__ for each in model.modules())})  # fmt: skip
    return classify(model, batch)


def recorded_job(fabric: Any) -> Any:
    model = Net()
    data = [(torch.randn(16), torch.tensor(index % 4)) for index in range(8)]
    return model, CountedAdamW(model.parameters(), lr=1e-3), DataLoader(data, batch_size=4), recording


class MixedBlock(Block):
    """A block holding a float64 parameter beside float32 ones: it trains unwrapped and under DDP; FSDP1 flattens a
    unit's parameters into one tensor of one dtype and refuses it."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(16, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) * self.scale.float()


def job_with_mixed_dtypes(fabric: Any) -> Any:
    model = Net()
    model.blocks = nn.ModuleList([MixedBlock(), MixedBlock()])
    data = [(torch.randn(16), torch.tensor(index % 4)) for index in range(8)]
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3), DataLoader(data, batch_size=4), classify


def _recorded(strategy: str, nodes: int = 1, precision: str = "32-true") -> tuple[list[Any], list[dict[str, Any]]]:
    from lightning_presets.tools.check.rehearsal.fabric import rehearse_fabric_in_process
    from lightning_presets.tools.check.rehearsal.setup import SetupJob

    SEEN.clear()
    CountedAdamW.steps, CountedAdamW.dtypes = 0, set()
    records = rehearse_fabric_in_process(recorded_job, SetupJob(strategy, {}, 4, nodes), precision)
    return records, [{**each, "steps": CountedAdamW.steps, "dtypes": CountedAdamW.dtypes} for each in SEEN]


_FABRIC_STAGES = ["fabric.launch(): process group as rank 0 of", "the user's set-up function",
                  "fabric.setup_dataloaders and the first batch"]  # fmt: skip


@pytest.mark.parametrize(("strategy", "nodes", "sharding", "precision", "dtype"), [
    ("fsdp_grad_op", 1, "SHARD_GRAD_OP", "bf16-true", "torch.bfloat16"),  # Fabric's precision converts the model
    ("fsdp_hybrid_shard", 2, "HYBRID_SHARD", "bf16-mixed", "torch.float32"),  # FSDP's MixedPrecision keeps fp32
])  # fmt: skip
def test_a_fabric_fsdp1_job_is_wrapped_by_torch_fsdp_with_the_presets_options(
    strategy: str, nodes: int, sharding: str, precision: str, dtype: str
) -> None:
    records, seen = _recorded(strategy, nodes, precision)
    assert [each.outcome for each in records] == ["not rehearsed"] + ["completed"] * 5, records
    assert "FSDP is only available on GPU" in records[0].detail  # Lightning's own words, quoted
    assert [each.name[: len(name)] for each, name in zip(records[1:4], _FABRIC_STAGES, strict=True)] == _FABRIC_STAGES
    assert f"rank 0 of {4 * nodes}" in records[1].name
    assert f"sharding_strategy={sharding}" in records[4].name
    assert "(Block)" in records[4].name
    assert records[5].name.startswith("first step through the FSDP root")
    # the step ran through torch's FSDP root with the preset's sharding, then the function's own optimizer stepped
    assert seen == [{"wrapper": "FullyShardedDataParallel", "sharding": f"ShardingStrategy.{sharding}", "zero": None,
                     "checkpointed": 0, "steps": 1, "dtypes": {dtype}}], seen  # fmt: skip


def test_a_fabric_fsdp1_offload_job_stops_at_the_offloaded_shard_as_the_rehearsals_limit() -> None:
    records, seen = _recorded("fsdp_offload_ckpt")
    assert [each.outcome for each in records] == ["not rehearsed"] + ["completed"] * 4 + ["raised"], records
    assert "cpu_offload=True" in records[4].name
    assert "activation checkpointing of 2 blocks" in records[4].name
    assert records[-1].code == ""
    assert "the rehearsal's limit" in records[-1].detail
    # the step function got the FULL_SHARD root with its 2 blocks checkpointed; FSDP's pre-forward stopped it
    assert seen == [{"wrapper": "FullyShardedDataParallel", "sharding": "ShardingStrategy.FULL_SHARD", "zero": None,
                     "checkpointed": 2, "steps": 0, "dtypes": set()}], seen  # fmt: skip


def test_a_fabric_deepspeed_job_runs_deepspeeds_engine_with_the_presets_config() -> None:
    pytest.importorskip("deepspeed")
    for strategy, stage in (("deepspeed_zero2_offload", 2), ("deepspeed_zero3_offload_ckpt", 3)):
        records, seen = _recorded(strategy)
        assert [each.outcome for each in records] == ["not rehearsed"] + ["completed"] * 6, records
        assert "only supported on CUDA GPUs" in records[0].detail
        assert [
            each.name[: len(name)] for each, name in zip(records[1:4], _FABRIC_STAGES, strict=True)
        ] == _FABRIC_STAGES
        assert f"ZeRO-{stage}, optimizer offloaded" in records[4].name
        assert records[5].name.startswith(f"deepspeed.initialize (ZeRO-{stage}")
        assert records[6].name.startswith("first step through DeepSpeed's engine")
        # the loss came through the engine of the preset's ZeRO stage, whose optimizer stepped the function's
        assert seen == [{"wrapper": "DeepSpeedEngine", "sharding": "", "zero": stage, "checkpointed": 0,
                         "steps": 1, "dtypes": {"torch.float32"}}], seen  # fmt: skip


def test_a_model_fsdp1_cannot_wrap_or_step_is_a_finding() -> None:
    mixed = _rehearsed(job_with_mixed_dtypes, "fsdp_grad_op")
    assert [each.outcome for each in mixed] == ["not rehearsed"] + ["completed"] * 3 + ["raised"], mixed
    assert mixed[-1].code == "LP750"
    assert "uniform dtype" in mixed[-1].exception
    assert "FullyShardedDataParallel" in mixed[-1].name
    assert _rehearsed(job_with_mixed_dtypes, "ddp_static_graph")[-1].outcome == "completed"  # it trains under DDP
    from lightning_presets.tools.check.rehearsal.fabric import rehearse_fabric_in_process
    from lightning_presets.tools.check.rehearsal.setup import SetupJob

    hybrid = rehearse_fabric_in_process(job_reading_a_shard, SetupJob("fsdp_hybrid_shard", {}, 4, 2), "32-true")
    assert hybrid[-1].code == "LP751", hybrid  # HYBRID_SHARD reshards the blocks after their forward
    assert "reads_a_shard" in hybrid[-1].line


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

    legal = rehearse(f"{__name__}:job")  # the name pytest imported this module by
    note = next(each for each in legal.request.notes if each.startswith("Fabric job rehearsed"))
    if "autograd" in note and "fork" in note:
        pytest.skip("this torch refuses autograd in a child forked after autograd ran (the rehearsal says so)")
    assert "fabric.setup(model, optimizer) with ModelParallelStrategy" in note, note
    assert "stopped" not in note, note
    assert not [each for each in legal.findings if each.code.startswith("LP75")]
    failing = rehearse(f"{__name__}:job_reading_a_shard")
    assert [each.code for each in failing.findings if each.code.startswith("LP75")] == ["LP751"]
