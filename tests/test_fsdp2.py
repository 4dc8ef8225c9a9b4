"""``fsdp2`` and ``fsdp2_offload_ckpt``: their guards (LP210-LP214 plus the shared ModelParallel rules),
construction in the four namespaces, and real 2-process fits on CPU (gloo) with an unchanged model.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import warnings
from pathlib import Path
from typing import Any

import pytest

import lightning_presets
from harness import run_job
from helpers import NAMESPACE_IDS, NAMESPACES, QUIET, SCRIPTS, context
from lightning_presets import Context, Options, PresetConfigError, PresetWarning
from lightning_presets.core.versions import recorded
from lightning_presets.strategies.model_parallel import fsdp2
from lightning_presets.strategies.model_parallel import rules as mp
from lightning_presets.tools.simulation import SimulatedGPU
from models import FlatMLP, TinyTransformer

FSDP2 = "fsdp2"
OFFLOAD = "fsdp2_offload_ckpt"
BASE = context(
    FSDP2,
    {"data_parallel_size": "auto", "tensor_parallel_size": 1},
    accelerator="cpu",
    devices_per_node=2,
    precision="32-true",
    precision_plugin="Precision",
)


def ctx(**changes: Any) -> Context:
    option_changes = {key: changes.pop(key) for key in ("data_parallel_size", "tensor_parallel_size") if key in changes}
    return dataclasses.replace(BASE, options={**BASE.options, **option_changes}, **changes)


def options(preset: str = FSDP2, **values: Any) -> Options:
    return Options(preset=preset, target="trainer", values=values, overrides=values)


def build(namespace: tuple[str, str, str], strategy: Any = FSDP2, **kwargs: Any) -> Any:
    _, package, caller = namespace
    constructor = getattr(importlib.import_module(package), caller)
    built = constructor(strategy=strategy, **(QUIET if caller == "Trainer" else {}), **kwargs)
    return built.strategy if caller == "Trainer" else built._strategy


# ---------------------------------------------------------------------------------------------- rules


@pytest.mark.parametrize("tensor", [2, 8])
def test_lp210_warns_when_the_model_does_not_use_the_tensor_dimension(tensor: int) -> None:
    finding = fsdp2.tensor_dimension_used(ctx(data_parallel_size=1, tensor_parallel_size=tensor), FlatMLP())
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP210", "warning")  # it trains: the product is the world size
    assert f"tensor_parallel_size={tensor}" in finding.message
    assert "FlatMLP" in finding.message
    assert "tp2d_hybrid" in finding.hint


@pytest.mark.parametrize("tensor", [1, "auto"])
def test_lp210_accepts_no_tensor_parallelism(tensor: Any) -> None:
    assert fsdp2.tensor_dimension_used(ctx(tensor_parallel_size=tensor), FlatMLP()) is None


def test_lp210_accepts_a_model_that_applies_tensor_parallelism_itself() -> None:
    class Parallelized(FlatMLP):
        def configure_model(self) -> None:
            pass

    assert fsdp2.tensor_dimension_used(ctx(data_parallel_size=1, tensor_parallel_size=2), Parallelized()) is None


@pytest.mark.parametrize("value", [4, 1, 0])
def test_lp211_rejects_a_split_whose_product_is_not_the_world(value: Any) -> None:
    finding = fsdp2.data_parallel_is_world(ctx(data_parallel_size=value))
    assert finding is not None
    assert finding.code == "LP211"
    assert f"data_parallel_size={value} × tensor_parallel_size=1 = {value}" in finding.message
    assert "devices=2 × num_nodes=1" in finding.message
    assert "(2, 1), (1, 2)" in finding.hint


@pytest.mark.parametrize(("data", "tensor"), [("auto", 1), (2, 1), (1, 2)])
def test_lp211_accepts_a_split_whose_product_is_the_world(data: Any, tensor: Any) -> None:
    assert fsdp2.data_parallel_is_world(ctx(data_parallel_size=data, tensor_parallel_size=tensor)) is None


def test_lp212_warns_on_one_device_and_accepts_two() -> None:
    finding = fsdp2.fsdp2_has_peers(ctx(devices_per_node=1))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP212", "warning")
    assert "devices=1, num_nodes=1" in finding.message
    assert fsdp2.fsdp2_has_peers(ctx(devices_per_node=2)) is None


def test_lp213_warns_without_a_repeated_block_and_accepts_blocks() -> None:
    finding = fsdp2.fsdp2_found_blocks(ctx(), FlatMLP())
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP213", "warning")
    assert "body (Sequential), head (Linear)" in finding.message
    assert "nn.ModuleList" in finding.hint
    assert fsdp2.fsdp2_found_blocks(ctx(), TinyTransformer()) is None


def test_lp214_warns_offload_on_cpu_and_accepts_cuda() -> None:
    finding = fsdp2.offload_needs_cuda(ctx(preset=OFFLOAD))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP214", "warning")
    assert "accelerator='cpu'" in finding.message
    assert fsdp2.offload_needs_cuda(ctx(preset=OFFLOAD, accelerator="cuda")) is None


def test_presets_carry_the_shared_model_parallel_rules() -> None:
    plain = {each.code for each in lightning_presets.get_preset(FSDP2).rules}
    offload = {each.code for each in lightning_presets.get_preset(OFFLOAD).rules}
    assert {"LP205", "LP206", "LP210", "LP211", "LP212", "LP213"} <= plain
    assert offload == plain | {"LP214", "LP218"}
    assert "LP207" not in plain  # the presets bring their own parallelize_fn
    assert "LP208" not in plain  # and need no configure_model


# ---------------------------------------------------------------------------------------------- construction


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_data_parallel_is_the_whole_world_in_every_namespace(namespace: tuple[str, str, str]) -> None:
    strategy = build(namespace, accelerator="cpu", devices=2)
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (2, 1)


def test_data_parallel_spans_nodes_on_simulated_cuda(cuda8: SimulatedGPU) -> None:
    strategy = build(NAMESPACES[0], OFFLOAD, accelerator="cuda", devices=8, num_nodes=2)
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (16, 1)


@pytest.mark.parametrize("preset", [FSDP2, OFFLOAD])
def test_fabric_gets_the_presets_parallelize_fn(cuda8: SimulatedGPU, preset: str) -> None:
    strategy = build(NAMESPACES[1], preset, accelerator="cuda", devices=8)
    function = strategy._parallelize_fn
    assert isinstance(function, functools.partial)
    assert function.func is fsdp2.parallelize
    assert function.keywords == {"offload": preset == OFFLOAD, "checkpoint": preset == OFFLOAD}


def test_fabric_keeps_a_users_parallelize_fn() -> None:
    def mine(module: Any, mesh: Any) -> Any:
        return module

    strategy = lightning_presets.strategy(FSDP2, target="fabric", parallelize_fn=mine)
    assert strategy._parallelize_fn is mine


def test_lp211_at_construction() -> None:
    with pytest.raises(PresetConfigError) as error:
        build(NAMESPACES[0], lightning_presets.strategy(FSDP2, data_parallel_size=4), accelerator="cpu", devices=2)
    assert error.value.codes == ("LP211",)
    assert "`Trainer(strategy='fsdp2', devices=2, num_nodes=1)`" in str(error.value)


def test_a_tensor_parallel_split_is_built() -> None:
    """A (data, tensor) split whose product is the world size trains (issue 15: LP210 refused it); whether the model
    uses the tensor dimension is LP210's warning when the model is known."""
    strategy = lightning_presets.strategy(OFFLOAD, tensor_parallel_size=2, target="fabric")
    assert strategy._tensor_parallel_size == 2


@pytest.mark.parametrize("caller", ["Trainer", "Fabric"])
def test_lp205_precision_at_construction(cuda8: SimulatedGPU, caller: str) -> None:
    """The Trainer takes the string; Fabric checks strings itself, so a plugin instance goes through. 64-true, which
    Lightning's list for the strategy object leaves out, trains (tests/evidence), so it is accepted."""
    namespace = NAMESPACES[0] if caller == "Trainer" else NAMESPACES[1]
    if caller == "Trainer":
        half: dict[str, Any] = {"precision": "16-mixed"}
    else:
        from lightning.fabric.plugins.precision import MixedPrecision

        half = {"plugins": [MixedPrecision("16-mixed", "cuda")]}
    with pytest.raises(PresetConfigError) as error:
        build(namespace, accelerator="cuda", devices=2, **half)
    assert error.value.codes == ("LP205",)
    build(namespace, accelerator="cpu", devices=2, precision="bf16-mixed")
    if caller == "Trainer":  # (Fabric's own connector refuses the string 64-true for ModelParallelStrategy)
        build(namespace, accelerator="cpu", devices=2, precision="64-true")


def test_lp212_and_lp214_at_construction() -> None:
    with pytest.warns(PresetWarning) as record:
        build(NAMESPACES[0], OFFLOAD, accelerator="cpu", devices=1)
    assert sorted(each.message.finding.code for each in record.list if isinstance(each.message, PresetWarning)) == [
        "LP212",
        "LP214",
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        build(NAMESPACES[0], FSDP2, accelerator="cpu", devices=2)


def test_fabric_setup_module_runs_the_setup_rules_then_shards_the_data_parallel_mesh(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    strategy = lightning_presets.strategy(FSDP2, target="fabric")
    fabric_strategy = build(NAMESPACES[1], strategy, accelerator="cpu", devices=2)
    calls: list[tuple[Any, dict[str, Any]]] = []

    def record(model: Any, mesh: Any, **kwargs: Any) -> Any:
        calls.append((mesh, kwargs))
        return model

    monkeypatch.setattr(fsdp2, "shard_blocks_and_root", record)
    fabric_strategy._device_mesh = {"data_parallel": "the data-parallel mesh"}  # no process group here
    with pytest.warns(PresetWarning, match="LP213"):
        fabric_strategy.setup_module(FlatMLP())
    assert calls == [("the data-parallel mesh", {"offload": False, "checkpoint": False})]


def test_fabric_with_a_users_parallelize_fn_skips_the_presets_rules() -> None:
    seen: list[Any] = []

    def mine(module: Any, mesh: Any) -> Any:
        seen.append(mesh)
        return module

    fabric_strategy = build(
        NAMESPACES[1],
        lightning_presets.strategy(FSDP2, target="fabric", parallelize_fn=mine),
        accelerator="cpu",
        devices=2,
    )
    fabric_strategy._device_mesh = {"data_parallel": "mesh"}
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        fabric_strategy.setup_module(FlatMLP())
    assert seen == [{"data_parallel": "mesh"}]


def test_configure_model_stand_in_is_removed_and_the_class_untouched() -> None:
    model = FlatMLP()
    with fsdp2._configure_model_defined(model):
        assert model.configure_model is fsdp2._sharded_by_preset  # type: ignore[attr-defined]
    assert not hasattr(model, "configure_model")
    assert not fsdp2.is_parallelized(model)


def test_tested_with_records_versions_and_runtime_evidence() -> None:
    import lightning
    import torch

    for preset in (FSDP2, OFFLOAD):
        tested = lightning_presets.get_preset(preset).tested_with
        assert lightning.__version__ in recorded(tested, "lightning")
        assert torch.__version__.split("+")[0] in recorded(tested, "torch")
        assert "runtime" in tested["evidence"]
        assert "CPU (gloo), 2 processes" in tested["evidence"]
        assert "GPU" not in tested["evidence"].replace("simulated CUDA", "")


# ------------------------------------------------------------------- runtime: 2 processes, CPU, gloo


def run_script(name: str, *args: str, cwd: Path, launcher: str = "fork") -> list[dict[str, Any]]:
    """Run a script under tests/scripts/ on 2 ranks and return each rank's ``RESULT`` report, by rank."""
    job = run_job(SCRIPTS / name, *args, cwd=cwd, timeout=180, launcher=launcher)
    assert job.returncode == 0, job.describe()
    reports = job.reports()
    assert len(reports) == 2, job.describe()
    return sorted(reports, key=lambda report: report["rank"])


def assert_half_on_each_rank(reports: list[dict[str, Any]]) -> None:
    total = reports[0]["total_numel"]
    assert [report["rank"] for report in reports] == [0, 1]
    assert all(report["world_size"] == 2 and report["backend"] == "gloo" for report in reports)
    assert sum(report["local_numel"] for report in reports) == total
    for report in reports:
        assert abs(report["local_numel"] / total - 0.5) < 0.05, report
        assert report["dtensor_parameters"] == report["parameters"]
        assert report["fsdp_modules"][1:] == ["FSDPBlock", "FSDPBlock"]  # the root, then its two blocks
        assert report["local_devices"] == ["cpu"]
        assert all(math.isfinite(loss) for loss in report["losses"])


@pytest.fixture(scope="module")
def fsdp2_trainer_reports(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    # as users start it: Lightning's launcher re-runs the script for rank 1
    cwd = tmp_path_factory.mktemp("fsdp2")
    return run_script("fsdp2_fit.py", "--preset", FSDP2, "--api", "trainer", cwd=cwd, launcher="fresh")


@pytest.mark.distributed
def test_fsdp2_trainer_fit_shards_an_unchanged_model(fsdp2_trainer_reports: list[dict[str, Any]]) -> None:
    assert_half_on_each_rank(fsdp2_trainer_reports)
    for report in fsdp2_trainer_reports:
        assert report["fsdp_modules"][0] == "FSDPModule"  # the LightningModule (class `Module`) is the root
        assert report["root_offload_policy"] == "OffloadPolicy"  # no offload
        assert report["block_forwards"] == 2 * (4 + 2 + 1)  # 4 training, 2 fit-validation, 1 validate batch
        assert report["losses"][-1] < report["losses"][0]
        assert report["validate_loss"] == pytest.approx(report["val_loss"])  # a second setup, same weights
        assert report["configure_model_left"] is False


@pytest.mark.distributed
def test_fsdp2_trainer_fit_computes_the_losses_of_ddp(
    fsdp2_trainer_reports: list[dict[str, Any]], tmp_path: Path
) -> None:
    """The same model, data and seed under ddp_static_graph: sharding changes no number."""
    reference = run_script("ddp_fit.py", "--api", "trainer", cwd=tmp_path)
    for sharded, replicated in zip(fsdp2_trainer_reports, reference, strict=True):
        assert sharded["losses"] == pytest.approx(replicated["losses"], rel=1e-4)


@pytest.mark.distributed
def test_fsdp2_trainer_leaves_a_module_that_shards_itself_alone(tmp_path: Path) -> None:
    reports = run_script("fsdp2_fit.py", "--preset", FSDP2, "--api", "trainer", "--shards-itself", cwd=tmp_path)
    assert_half_on_each_rank(reports)
    for report in reports:
        assert report["fsdp_modules"][0] == "FSDPTinyTransformer"  # the user's root, not the LightningModule
        assert report["block_forwards"] == 2 * (4 + 2 + 1)


@pytest.mark.distributed
def test_fsdp2_offload_ckpt_trainer_fit_offloads_and_recomputes(
    fsdp2_trainer_reports: list[dict[str, Any]], tmp_path: Path
) -> None:
    """bf16-mixed and a training_step that calls ``self(...)``: the root is entered twice per step."""
    args = ("--preset", OFFLOAD, "--api", "trainer", "--call", "self", "--precision", "bf16-mixed")
    reports = run_script("fsdp2_fit.py", *args, cwd=tmp_path)
    assert_half_on_each_rank(reports)
    for report, fp32 in zip(reports, fsdp2_trainer_reports, strict=True):
        assert report["precision"] == "bf16-mixed"
        assert report["root_offload_policy"] == "CPUOffloadPolicy"
        assert report["block_forwards"] == 2 * (2 * 4 + 2 + 1)  # each training forward runs again in backward
        assert report["losses"][-1] < report["losses"][0]
        assert report["losses"] == pytest.approx(fp32["losses"], rel=2e-2)  # the same training, under autocast
        assert report["losses"] != fp32["losses"]


@pytest.mark.distributed
@pytest.mark.parametrize("preset", [FSDP2, OFFLOAD])
def test_fabric_with_the_presets_parallelize_fn(tmp_path: Path, preset: str) -> None:
    reports = run_script("fsdp2_fit.py", "--preset", preset, "--api", "fabric", cwd=tmp_path)
    assert_half_on_each_rank(reports)
    offload = preset == OFFLOAD
    for report in reports:
        assert report["fsdp_modules"][0] == "FSDPTinyTransformer"
        assert report["root_offload_policy"] == ("CPUOffloadPolicy" if offload else "OffloadPolicy")
        assert report["block_forwards"] == 2 * 4 * (2 if offload else 1)  # 2 blocks, 4 steps, recomputed


def test_lp216_guards_fsdp2_with_a_tensor_dimension() -> None:
    """fsdp2 takes tensor_parallel_size too: anomaly mode fails on its DTensors as it does on tp2d_hybrid's."""
    from lightning_presets.strategies.model_parallel import FSDP2 as PRESET

    assert "LP216" in {each.code for each in PRESET.rules}
    anomaly = {"detect_anomaly": True}
    refused = ctx(data_parallel_size=1, tensor_parallel_size=2, devices_per_node=2, arguments=anomaly)
    finding = mp.anomaly_detection_without_tensor_parallel(refused)
    assert finding is not None
    assert finding.code == "LP216"
    for accepted in (
        ctx(data_parallel_size=2, tensor_parallel_size=1, devices_per_node=2, arguments=anomaly),  # no tensor dim
        ctx(devices_per_node=2, arguments=anomaly),  # the preset's own: the data-parallel world only
        ctx(data_parallel_size=1, tensor_parallel_size=2, devices_per_node=2),  # no anomaly mode
        dataclasses.replace(refused, kind="fabric"),  # Fabric has no detect_anomaly
    ):
        assert mp.anomaly_detection_without_tensor_parallel(accepted) is None


# ------------------------------------------------- the norm rules' CPU neighbours and the preset's block sharding

GUARD_TRUTH = str(Path(__file__).resolve().parent / "evidence" / "scripts")
NORM_NEIGHBOURS = ("fsdp2/BatchNorm1d/-", "fsdp2/LayerNorm/sync", "fsdp2/LayerNorm/-", "fsdp2/GroupNorm/sync",
                   "ddp_static_graph/BatchNorm1d/-", "ddp_static_graph/LayerNorm/sync",
                   "ddp_static_graph/GroupNorm/sync")  # fmt: skip
"""Each CPU neighbour of LP217, LP219 and LP310 of more than one process (``tests/neighbours.py``), as
``strategy/norm layer/flag``."""


def _results(job: Any) -> list[dict[str, Any]]:
    import json

    return [json.loads(line.split("RESULT ", 1)[1]) for line in job.stdout.splitlines() if "RESULT {" in line]


@pytest.mark.distributed
def test_the_cpu_neighbours_of_the_norm_rules_train() -> None:
    """Every guard on, each neighbour trains its 3 steps on 2 processes (the step LP217/LP219/LP310 are about: the
    training forward through the norm layers, and DDP's wrap), its layers as built."""
    job = run_job("guard_truth:norm_layers", *NORM_NEIGHBOURS, path=(GUARD_TRUTH,), unset=("LIGHTNING_PRESETS_SKIP",),
                  timeout=240)  # fmt: skip
    assert job.outcome == "trained", job.describe()
    results = {(each["case"], each["rank"]): each for each in _results(job)}
    assert sorted(results) == sorted((case, rank) for case in NORM_NEIGHBOURS for rank in (0, 1))
    for (case, _), each in results.items():
        assert each["trained"] is True, each
        assert each["norms"] == [case.split("/")[1]], each


def test_sharded_blocks_of_a_sequential_of_sequentials_skip_the_stack() -> None:
    """Blocks that are nn.Sequentials held in an nn.Sequential: the stack is left to the root, the blocks are sharded;
    a block inside a block is sharded first and only the outer one is checkpointed."""
    from torch import nn

    blocks = [nn.Sequential(nn.Linear(4, 4), nn.ReLU()) for _ in range(3)]
    model = nn.Sequential(nn.Sequential(*blocks), nn.Linear(4, 1))
    assert [module for module, _ in fsdp2.block_units(model)] == blocks[::-1]
    nested = nn.ModuleList(
        [nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4), nn.ReLU())) for _ in range(2)]
    )
    units = fsdp2.block_units(nested)
    assert [(module, outermost) for module, outermost in units] == [
        (nested[1][1], False), (nested[1], True), (nested[0][1], False), (nested[0], True)
    ]  # fmt: skip
    assert fsdp2.block_units(nn.Linear(4, 4)) == []


@pytest.mark.distributed
@pytest.mark.parametrize("outer", ["sequential", "list"])
def test_fsdp2_trains_sequential_blocks_in_a_sequential_or_a_module_list(outer: str) -> None:
    """The preset used to shard the outer nn.Sequential first, then its blocks: torch's 'Cannot concatenate overlapping
    meshes' on both ranks. Now both containers train, the three blocks and the root sharded."""
    job = run_job("guard_truth:sequential_blocks", outer, path=(GUARD_TRUTH,), unset=("LIGHTNING_PRESETS_SKIP",),
                  timeout=180)  # fmt: skip
    assert job.outcome == "trained", job.describe()
    results = _results(job)
    assert len(results) == 2
    for each in results:
        assert each["sharded"] == 4, each  # 3 blocks and the root
        assert len(each["losses"]) == 3
        assert all(math.isfinite(loss) for loss in each["losses"])


@pytest.mark.parametrize("accelerator", ["cpu", "mps"])
def test_lp219_refuses_sync_batch_norm_off_cuda_with_or_without_the_flag(accelerator: str) -> None:
    from torch import nn

    model = nn.Sequential(nn.Linear(4, 4), nn.SyncBatchNorm(4), nn.Linear(4, 4), nn.SyncBatchNorm(4))
    for arguments in ({}, {"sync_batchnorm": True}):
        finding = mp.sync_batch_norm_on_gpus(ctx(accelerator=accelerator, arguments=arguments), model)
        assert finding is not None
        assert "the model's layers 1, 3 are nn.SyncBatchNorm" in finding.message


def test_lp219_accepts_cuda_and_models_without_sync_batch_norm() -> None:
    from torch import nn

    assert mp.sync_batch_norm_on_gpus(ctx(accelerator="cuda"), nn.Sequential(nn.SyncBatchNorm(4))) is None
    for layer in (nn.BatchNorm1d(4), nn.LayerNorm(4), nn.GroupNorm(2, 4)):
        assert mp.sync_batch_norm_on_gpus(ctx(), nn.Sequential(nn.Linear(4, 4), layer)) is None
    assert mp.sync_batch_norm_on_gpus in fsdp2.RULES
    assert mp.sync_batch_norm_on_gpus in mp.RULES
