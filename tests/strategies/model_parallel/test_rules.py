"""``lightning_presets.strategies.model_parallel`` (tp2d_hybrid, fsdp2, fsdp2_offload_ckpt): each error rule's executed
proof (``proves``), its accepted neighbours (run, and each rule widened, by ``neighbours.neighbour_tests``), and the
rules' tests.

Each refused configuration, run on CPU with its guard switched off, fails in Lightning or torch after the process
group exists (one gloo process suffices; a fake 2-rank group for the DTensor checks; 2 gloo processes for LP219's
reviewer's job).
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

import pytest
import torch
from jobs import QUIET, Normed, ShardsItself, Steps, SyncNormed, fit, trainer
from lightning.pytorch import Trainer
from proof import Proof, reports

import lightning_presets
from harness import run_job
from neighbours import (
    _TRAINED,
    MPS,
    ONE_MESH,
    TWO_MESHES,
    Neighbour,
    _bn,
    _gn,
    _ln,
    _t,
    adder,
    n,
    neighbour_tests,
    trained,
)

pytestmark = pytest.mark.usefixtures("process_group")
EVIDENCE_SCRIPTS = Path(__file__).resolve().parents[2] / "evidence" / "scripts"

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_tp = 'lightning_presets.strategy("tp2d_hybrid", {})'
_add(
    "LP201",
    *(
        n(_t(_tp.format(f"data_parallel_size={d}, tensor_parallel_size={t}"), "cuda", "", 4), f"{d} × {t} = 4 devices")
        for d, t in ((1, 4), (2, 2), (4, 1))
    ),
    n(_t(_tp.format('data_parallel_size="auto", tensor_parallel_size="auto"'), "cuda", "", 4), "'auto': (1, 4)"),
    n(
        _t(_tp.format("data_parallel_size=2, tensor_parallel_size=4"), "cuda", ", num_nodes=2", 4),
        "2 × 4 = 4 × 2 nodes",
    ),
)
_add(
    "LP202",
    n(_t(_tp.format("tensor_parallel_size=8")), "tensor_parallel_size=8, data 'auto' = 1 node"),
    n(_t(_tp.format("data_parallel_size=8, tensor_parallel_size=1")), "1 is the smallest positive size"),
    n(_t(_tp.format("data_parallel_size=4, tensor_parallel_size=2")), "4 × 2 = 8"),
    n(_t(_tp.format('data_parallel_size="auto", tensor_parallel_size="auto"')), "'auto' for both"),
)
_add(
    "LP205",
    *(
        n(_t('"tp2d_hybrid"', "cuda", f", precision={precision!r}"), f"ModelParallelStrategy takes {precision}")
        for precision in ("bf16-mixed", "32-true", "bf16-true", "16-true")
    ),
    n(
        _t('"tp2d_hybrid"', "cpu", ', precision="64-true"', 2),
        "64-true by name: the review's false rejection (LP205 refused it); it trains, "
        "tests/test_neighbours.py::test_64_true_trains_with_tp2d_hybrid_on_two_processes",
    ),
)
_add(
    "LP206",
    n(_t('"tp2d_hybrid"', "cpu", "", 2), "CPU: ModelParallelStrategy runs on gloo", MPS),
    n(_t('"tp2d_hybrid"'), "CUDA devices", MPS),
    n(_t('"tp2d_hybrid"', "cpu", "", 1), "one CPU process", MPS),
    n(_t('"fsdp2"', "cpu", "", 2), "fsdp2 on CPU", MPS),
)
_PARALLELIZE = "def parallelize(module, device_mesh):\n    return module\n"
_add(
    "LP207",
    n(
        _PARALLELIZE + 'Fabric(strategy=lightning_presets.strategy("tp2d_hybrid", target="fabric", '
        'parallelize_fn=parallelize), accelerator="cpu", devices=2)',
        "Fabric with a parallelize_fn",
    ),
    n(
        _PARALLELIZE + 'Fabric(strategy=lightning_presets.strategy("tp2d_hybrid", target="fabric", '
        'parallelize_fn=parallelize), accelerator="cuda", devices=8)',
        "the same on CUDA",
    ),
    n(
        'Fabric(strategy=lightning_presets.strategy("tp2d_hybrid", target="fabric", '
        'parallelize_fn=lambda module, mesh: module), accelerator="cpu", devices=2)',
        "a lambda as parallelize_fn",
    ),
    n(_t('"tp2d_hybrid"', "cpu", "", 2), "the Trainer by name: the model's configure_model parallelizes"),
)
CONFIGURED = (
    "from lightning.pytorch import LightningModule\n\n"
    "class Model(LightningModule):\n    def configure_model(self):\n        pass\n\n"
)
_add(
    "LP208",
    n(CONFIGURED + _t('"tp2d_hybrid"') + ".fit(Model())", "configure_model overridden"),
    n(CONFIGURED + _t('"tp2d_hybrid"', "cpu", "", 2) + ".fit(Model())", "the same on CPU"),
    n(
        CONFIGURED.replace("class Model(LightningModule)", "class Base(LightningModule)")
        + "class Model(Base):\n    def __init__(self):\n        super().__init__()\n"
        + "        self.layer = nn.Linear(8, 8)\n\n"
        + _t('"tp2d_hybrid"')
        + ".fit(Model())",
        "configure_model inherited from the user's base class",
    ),
)
_tp_clip = '"tp2d_hybrid"'
_add(
    "LP215",
    n(
        TWO_MESHES.format(freeze="", extra="")
        + _t(_tp_clip, "cuda", ', gradient_clip_val=1.0, gradient_clip_algorithm="value"')
        + ".fit(Model())",
        "two meshes, clipping by value",
    ),
    n(ONE_MESH + _t(_tp_clip, "cuda", ", gradient_clip_val=1.0") + ".fit(Model())", "every parameter on one mesh"),
    n(TWO_MESHES.format(freeze="", extra="") + _t(_tp_clip) + ".fit(Model())", "two meshes, no clipping"),
    n(
        TWO_MESHES.format(
            freeze="",
            extra="    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, "
            "gradient_clip_algorithm=None):\n        pass   # per mesh, with .full_tensor()\n",
        )
        + _t(_tp_clip, "cuda", ", gradient_clip_val=1.0")
        + ".fit(Model())",
        "two meshes, clipped by the module's own configure_gradient_clipping",
    ),
    n(
        TWO_MESHES.format(freeze="self.up.requires_grad_(False)\n        ", extra="")
        + _t(_tp_clip, "cuda", ", gradient_clip_val=1.0")
        + ".fit(Model())",
        "the tensor-parallel layer frozen: the review's false rejection (LP215 counted frozen parameters); "
        "clip_grad_norm_ stacks only the gradients that exist, tests/test_neighbours.py::"
        "test_clipping_by_norm_trains_with_a_frozen_tensor_parallel_layer_on_two_processes",
    ),
)
_add(
    "LP216",
    n(_t(_tp.format("data_parallel_size=8, tensor_parallel_size=1"), "cuda", ", detect_anomaly=True"), "tensor size 1"),
    n(_t('"tp2d_hybrid"', "cuda", ", detect_anomaly=False"), "detect_anomaly off"),
    n(_t('"tp2d_hybrid"', "cuda", ", detect_anomaly=True", 1), "one device: tensor_parallel_size 'auto' = 1"),
    n(
        _t(_tp.format("data_parallel_size=2, tensor_parallel_size=1"), "cpu", ", detect_anomaly=True", 2),
        "CPU, tensor 1",
    ),
    n(_t('"fsdp2"', "cpu", ", detect_anomaly=True", 2), "fsdp2: its tensor_parallel_size is 1"),
)
_sync = "model = nn.Sequential(nn.Linear(8, 8), nn.SyncBatchNorm(8))\n"
_add(
    "LP217",
    n(_ln + _t('"fsdp2"', "cpu", ", sync_batchnorm=True", 2) + ".fit(model)", "no batch norm" + _TRAINED),
    n(_bn + _t('"fsdp2"', "cpu", "", 2) + ".fit(model)", "batch norm without sync_batchnorm" + _TRAINED),
    n(_ln + _t('"fsdp2"', "cpu", "", 2) + ".fit(model)", "LayerNorm, as the hint says" + _TRAINED),
    n(_gn + _t('"fsdp2"', "cpu", ", sync_batchnorm=True", 2) + ".fit(model)", "GroupNorm, as the hint says" + _TRAINED),
    n(
        _bn + _t('"fsdp2"', "cpu", ", sync_batchnorm=True", 1) + ".fit(model)",
        "one device: BatchNorm1d over the one rank's batch is what SyncBatchNorm computes in a world of one (the "
        "review's false rejection, accepted since LP217 decides after configure_model on the layers of a job of more "
        "than one process; test_lp217_model_parallel_ignores_sync_batchnorm below fits "
        "it)",
    ),
)
_add(
    "LP219",
    n(_bn + _t('"fsdp2"', "cpu", "", 2) + ".fit(model)", "plain batch norm on CPU" + _TRAINED),
    n(_gn + _t('"fsdp2"', "cpu", ", sync_batchnorm=True", 2) + ".fit(model)", "GroupNorm, as the hint says" + _TRAINED),
    n(
        _bn + _t('"fsdp2"', "cpu", ", sync_batchnorm=True", 1) + ".fit(model)",
        "sync_batchnorm on one device: ModelParallelStrategy converts nothing, the layers stay BatchNorm1d and train "
        "(test_lp217_model_parallel_ignores_sync_batchnorm below fits it)",
    ),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- the review's false rejections, run for real: 2 processes on CPU (gloo) through the fork server --------------
# A fresh job per test (about a second once the server is up): the proof that the neighbour the rule used to refuse
# trains, with every guard on.


def test_64_true_trains_with_tp2d_hybrid_on_two_processes() -> None:
    """LP205's neighbour: precision='64-true' by name, every parameter a float64 DTensor of the 1×2 mesh."""
    report = trained("train_tp2d_64_true")
    assert report["dtypes"] == ["torch.float64"]
    assert report["dtensors"] == report["parameters"] > 0
    assert report["losses"][-1] < report["losses"][0]


def test_clipping_by_norm_trains_with_a_frozen_tensor_parallel_layer_on_two_processes() -> None:
    """LP215's neighbour: parameters on two meshes, the tensor-parallel ones frozen, gradient_clip_val by norm."""
    report = trained("train_tp2d_frozen_tensor_parallel_clipped")
    assert report["meshes"] == ["('data_parallel',)", "('tensor_parallel',)"]
    assert report["frozen"] == 2
    assert report["losses"][-1] < report["losses"][0]


# --- executed proofs ----------------------------------------------------------------------------------------------


@pytest.mark.proves("LP201")
def test_lp201_sizes_that_miss_the_world_fail_in_every_process(proof: Proof) -> None:
    def strategy() -> object:
        return lightning_presets.strategy("tp2d_hybrid", data_parallel_size=2, tensor_parallel_size=1)

    proof.refused("LP201", lambda: trainer(strategy()))
    with proof.guard_off("LP201"), proof.raises(RuntimeError, r"multiplied should equal the world size \(1\)"):
        fit(strategy(), ShardsItself())


@pytest.mark.proves("LP202")
def test_lp202_a_zero_size_fails_when_the_mesh_is_built(proof: Proof) -> None:
    def strategy() -> object:
        return lightning_presets.strategy("tp2d_hybrid", tensor_parallel_size=0)

    proof.refused("LP202", strategy)
    # LP201 also sees 1 × 0 != 1: both off, Lightning gets the size as given.
    with proof.guard_off("LP202", "LP201"), proof.raises(RuntimeError, r"tensor_parallel_size=0"):
        fit(strategy(), ShardsItself())


@pytest.mark.proves("LP205")
def test_lp205_lightning_refuses_the_precision(proof: Proof) -> None:
    """Lightning's connector refuses 16-mixed on CUDA for a ModelParallelStrategy object (the preset's own class); for
    a strategy *name* the Trainer skips that check. (On CPU Lightning turns 16-mixed into bf16-mixed, which is fine.)"""
    from lightning_presets.tools.simulation import simulated_cuda

    with simulated_cuda(8):
        proof.refused("LP205", lambda: trainer("tp2d_hybrid", accelerator="cuda", devices=8, precision="16-mixed"))
        with proof.raises(ValueError, r"ModelParallelStrategy` does not support .*precision='16-mixed'", code="LP205"):
            trainer(lightning_presets.strategy("tp2d_hybrid"), accelerator="cuda", devices=8, precision="16-mixed")


@pytest.mark.parametrize("precision", ["64-true", "32-true", "bf16-mixed", "16-mixed"])
def test_lp205_accepts_what_trains_on_cpu(precision: str) -> None:
    """LP205's accepted neighbours, trained: 64-true (which Lightning's list for the object leaves out), and 16-mixed,
    which Lightning turns into bf16-mixed on CPU."""
    module = fit("fsdp2", precision=precision)
    assert len(module.losses) == 2
    assert all(loss == loss for loss in module.losses)


@pytest.mark.proves("LP206")
def test_lp206_lightning_refuses_a_parallel_strategy_on_mps(proof: Proof) -> None:
    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("mps"):  # Lightning believes in one Apple MPS device
        proof.refused("LP206", lambda: trainer("tp2d_hybrid", accelerator="mps"))
        with proof.raises(ValueError, r"not supported on the MPS accelerator", code="LP206"):
            trainer(lightning_presets.strategy("tp2d_hybrid"), accelerator="mps")


@pytest.mark.proves("LP207")
def test_lp207_fabrics_model_parallel_strategy_requires_a_parallelize_fn(proof: Proof) -> None:
    """Lightning's signature, bound as a strategy name binds it (with no arguments)."""
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import ModelParallelStrategy

    proof.refused("LP207", lambda: Fabric(strategy="tp2d_hybrid", accelerator="cpu", devices=2))
    with proof.raises(TypeError, r"missing a required argument: 'parallelize_fn'", code="LP207"):
        inspect.signature(ModelParallelStrategy).bind()


@pytest.mark.proves("LP208")
def test_lp208_a_module_without_configure_model_fails_after_launch(proof: Proof) -> None:
    proof.refused("LP208", lambda: fit("tp2d_hybrid", Steps()))
    with proof.guard_off("LP208"), proof.raises(TypeError, r"required to override the `configure_model\(\)` hook"):
        fit("tp2d_hybrid", Steps())


@pytest.mark.proves("LP217")
def test_lp217_model_parallel_ignores_sync_batchnorm(proof: Proof) -> None:
    """fsdp2 with sync_batchnorm=True: after Lightning's setup the batch norm is still plain BatchNorm1d (shown on one
    process: ModelParallelStrategy's setup converts nothing whatever the world size; on two, each rank would then
    normalise over its own half of the batch)."""
    from torch.utils.data import DataLoader, TensorDataset

    def build() -> Trainer:
        trainer = Trainer(strategy="fsdp2", accelerator="cpu", devices=2, sync_batchnorm=True, max_steps=1, **QUIET)
        trainer.strategy._lp_check_setup(Normed())
        return trainer

    proof.refused("LP217", build)
    with proof.guard_off("LP217"):
        module = Normed()
        Trainer(strategy="fsdp2", accelerator="cpu", devices=1, sync_batchnorm=True, max_steps=1, **QUIET).fit(
            module, DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
        )
        kinds = sorted({type(layer).__name__ for layer in module.modules() if "BatchNorm" in type(layer).__name__})
        proof.wrong("batch-norm layers after setup with sync_batchnorm=True", ["SyncBatchNorm"], kinds)


@pytest.mark.proves("LP219")
def test_lp219_sync_batch_norm_off_cuda_fails_in_the_first_training_step(proof: Proof, process_group: None) -> None:
    """fsdp2 on CPU with SyncBatchNorm layers: refused on the complete model before sharding; with the guard off the
    first training step raises in torch's SyncBatchNorm (one process here: ModelParallelStrategy forms a process
    group whatever the world size, and that is all SyncBatchNorm asks before refusing a CPU input; the 2-process run
    fails the same way, tests/evidence/scripts/guard_truth.py norm_layers)."""
    from torch.utils.data import DataLoader, TensorDataset

    def build() -> Trainer:
        trainer = Trainer(strategy="fsdp2", accelerator="cpu", devices=2, max_steps=1, **QUIET)
        trainer.strategy._lp_check_setup(SyncNormed())
        return trainer

    proof.refused("LP219", build)
    with proof.guard_off("LP219"), proof.raises(ValueError, "SyncBatchNorm expected input tensor to be on GPU"):
        Trainer(strategy="fsdp2", accelerator="cpu", devices=1, max_steps=1, **QUIET).fit(
            SyncNormed(), DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
        )


@pytest.mark.distributed
@pytest.mark.proves("LP219")
def test_lp219_sync_batch_norm_off_cuda_fails_on_two_processes(proof: Proof) -> None:
    """The reviewer's job: fsdp2 on 2 CPU processes, SyncBatchNorm layers and sync_batchnorm=True, guard off."""

    def build() -> Trainer:
        trainer = Trainer(strategy="fsdp2", accelerator="cpu", devices=2, sync_batchnorm=True, **QUIET)
        trainer.strategy._lp_check_setup(SyncNormed())
        return trainer

    proof.refused("LP219", build)
    done = run_job("guard_truth:norm_layers", "fsdp2/SyncBatchNorm/sync", env={"LIGHTNING_PRESETS_SKIP": "LP219"},
                   path=(str(EVIDENCE_SCRIPTS),), timeout=180)  # fmt: skip
    assert done.outcome == "raised", done.describe()
    proof.child(reports(done.stdout), "norm_layers", "ValueError", "SyncBatchNorm expected input tensor to be on GPU",
                code="LP219")  # fmt: skip


@pytest.fixture
def fake_world() -> Any:
    """A process group of two fake ranks in this process: DTensors are built and dispatched, nothing is sent."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _two_meshes() -> torch.nn.Module:
    """What tp2d_hybrid's configure_model makes of a model: a tensor-parallel layer on the 2-D mesh, the rest sharded
    on the data-parallel mesh only."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("data_parallel", "tensor_parallel"))
    model = torch.nn.Module()
    model.tp = torch.nn.Parameter(distribute_tensor(torch.randn(4, 4), mesh, [Replicate(), Shard(0)]))
    model.dp = torch.nn.Parameter(distribute_tensor(torch.randn(4), mesh["data_parallel"], [Shard(0)]))
    for parameter in model.parameters():
        parameter.grad = parameter.detach().clone()
    return model


@pytest.mark.proves("LP215")
def test_lp215_clipping_by_norm_stacks_norms_of_two_meshes(proof: Proof, fake_world: None) -> None:
    model = _two_meshes()

    def build() -> Trainer:
        trainer = Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, gradient_clip_val=1.0, **QUIET)
        trainer.strategy._lp_check_setup(model)
        return trainer

    proof.refused("LP215", build)
    with proof.raises(RuntimeError, "must have the same mesh", code="LP215"):
        torch.nn.utils.clip_grad_norm_(list(model.parameters()), 1.0)  # what the precision plugin calls to clip


@pytest.mark.proves("LP216")
def test_lp216_anomaly_mode_has_no_dtensor_kernel(proof: Proof, fake_world: None) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    proof.refused(
        "LP216", lambda: Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, detect_anomaly=True, **QUIET)
    )
    sharded = distribute_tensor(torch.randn(4, 4), init_device_mesh("cpu", (2,)), [Shard(0)])
    with proof.raises(NotImplementedError, "_is_any_true.default does not have a sharding strategy", code="LP216"):
        torch.ops.aten._is_any_true(sharded.isnan())  # anomaly mode's NaN check on every gradient
