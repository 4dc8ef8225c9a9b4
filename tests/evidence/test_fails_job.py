"""Evidence for the whole-job rules (Trainer arguments, the optimizer, DeepSpeed's config, the launcher): each failing
configuration, refused by its guard, then run with the guard switched off, fails in Lightning's, torch's or
DeepSpeed's own code.

The CPU family (DDP) runs for real on 2 gloo processes; for the CUDA-only families the Lightning or DeepSpeed function
that raises runs on CPU with the configuration's values.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
from jobs import Normed, SyncNormed
from lightning.pytorch import LightningModule, Trainer
from proof import Proof, reports

import lightning_presets
from harness import run_job
from lightning_presets.tools.simulation import SimulatedGPU

HERE = Path(__file__).resolve().parent
QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")

_ACCUMULATE = """
import sys
import torch, lightning.pytorch as pl
from torch.utils.data import DataLoader, TensorDataset
from proof import report

class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, batch_idx):
        return self.layer(batch[0]).pow(2).mean()
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)

if __name__ == "__main__":
    trainer = pl.Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, max_steps=2,
                         accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    try:
        trainer.fit(Tiny(), DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4))
    except RuntimeError as error:
        report("lp308_static_graph_accumulation", error)
        sys.exit(1)
    print("TRAINED", trainer.global_rank)
"""


@pytest.mark.distributed
@pytest.mark.proves("LP308")
def test_lp308_static_graph_with_accumulation_fails_in_backward(proof: Proof, tmp_path: Path) -> None:
    """2 gloo processes: with the guard off, both ranks die in backward (torch's reducer)."""
    proof.refused(
        "LP308", lambda: Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, accumulate_grad_batches=2)
    )
    script = tmp_path / "accumulate.py"
    script.write_text(textwrap.dedent(_ACCUMULATE))
    done = run_job(script, env={"LIGHTNING_PRESETS_SKIP": "LP308"}, path=(str(HERE),), cwd=tmp_path, timeout=600)
    assert "TRAINED" not in done.stdout, done.describe()
    proof.child(reports(done.stdout), "lp308_static_graph_accumulation", "RuntimeError",
                "expect_autograd_hooks_ INTERNAL ASSERT FAILED", code="LP308")  # fmt: skip


_FABRIC_ACCUMULATE = """
import json, sys
import torch
from lightning.fabric import Fabric
import lightning_presets
from proof import report

if __name__ == "__main__":
    strategy, option, every = sys.argv[1], sys.argv[2], sys.argv[3]
    if option == "static_graph=False":
        strategy = lightning_presets.strategy(strategy, static_graph=False, target="fabric")
    fabric = Fabric(strategy=strategy, accelerator="cpu", devices=2)
    fabric.launch()
    model, optimizer = fabric.setup(torch.nn.Linear(4, 1), torch.optim.SGD(torch.nn.Linear(4, 1).parameters()))
    try:
        for step in range(4):
            accumulating = every == "accumulate" and step % 2 == 0
            if every == "plain":  # no no_backward_sync at all
                fabric.backward(model(torch.randn(4, 4)).pow(2).mean())
                continue
            with fabric.no_backward_sync(model, enabled=accumulating):
                fabric.backward(model(torch.randn(4, 4)).pow(2).mean())
        print("TRAINED", fabric.global_rank)
    except lightning_presets.PresetConfigError as error:
        print("REFUSED", json.dumps(error.codes))
        sys.exit(1)
    except RuntimeError as error:
        report("lp308_fabric_no_backward_sync", error)
        sys.exit(1)
"""


@pytest.mark.distributed
@pytest.mark.proves("LP308")
def test_lp308_fabric_no_backward_sync_with_static_graph_fails_in_backward(proof: Proof, tmp_path: Path) -> None:
    """Fabric has no accumulation argument: ``fabric.no_backward_sync(model, enabled=True)`` under the static graph is
    refused at that call on both ranks; with the guard off, both ranks die in that backward (torch's reducer)."""
    import json

    script = tmp_path / "fabric_accumulate.py"
    script.write_text(textwrap.dedent(_FABRIC_ACCUMULATE))
    args = ("ddp_static_graph", "-", "accumulate")
    done = run_job(script, *args, path=(str(HERE),), cwd=tmp_path, unset=("LIGHTNING_PRESETS_SKIP",), timeout=300)
    refusals = [json.loads(line.split("REFUSED ", 1)[1]) for line in done.stdout.splitlines() if "REFUSED " in line]
    proof.refused_in_children("LP308", refusals, ranks=2)
    done = run_job(script, *args, env={"LIGHTNING_PRESETS_SKIP": "LP308"}, path=(str(HERE),), cwd=tmp_path, timeout=300)
    assert "TRAINED" not in done.stdout, done.describe()
    proof.child(reports(done.stdout), "lp308_fabric_no_backward_sync", "RuntimeError",
                "expect_autograd_hooks_ INTERNAL ASSERT FAILED", code="LP308")  # fmt: skip


@pytest.mark.distributed
@pytest.mark.proves("LP308")
def test_lp308_a_schedule_that_accumulates_from_the_first_epoch_fails_in_backward(proof: Proof) -> None:
    """``GradientAccumulationScheduler({0: 2})`` (no accumulate_grad_batches): refused when the Trainer is built; with
    the guard off, both ranks die in their first backward (torch's reducer), as with accumulate_grad_batches=2. The
    schedule that synchronises its first epoch ({1: 2}) trains (tests/test_ddp.py)."""
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    scheduler = GradientAccumulationScheduler({0: 2})
    proof.refused("LP308", lambda: Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2,
                                           callbacks=[scheduler], **QUIET))  # fmt: skip
    done = run_job("guard_truth:static_graph_schedule", "0:2", env={"LIGHTNING_PRESETS_SKIP": "LP308"},
                   path=(str(HERE / "scripts"),), timeout=180)  # fmt: skip
    assert done.outcome == "raised", done.describe()
    proof.child(reports(done.stdout), "lp308_scheduler", "RuntimeError",
                "expect_autograd_hooks_ INTERNAL ASSERT FAILED", code="LP308")  # fmt: skip


@pytest.mark.distributed
@pytest.mark.parametrize(
    "args",
    [
        ("ddp_static_graph", "-", "sync"),
        ("ddp", "-", "accumulate"),
        ("ddp_static_graph", "static_graph=False", "accumulate"),
        ("ddp_static_graph", "-", "plain"),
    ],
    ids=["static-graph-syncing-every-step", "plain-ddp-accumulating", "preset-without-static-graph", "no-context"],
)
def test_lp308_fabric_neighbours_train(args: tuple[str, str, str], tmp_path: Path) -> None:
    """The rule's legal side on Fabric: no_backward_sync(enabled=False) every step under the static graph, and
    accumulation without it (plain DDP, the preset with static_graph=False), and no no_backward_sync at all, train on
    both ranks."""
    script = tmp_path / "fabric_accumulate.py"
    script.write_text(textwrap.dedent(_FABRIC_ACCUMULATE))
    done = run_job(script, *args, path=(str(HERE),), cwd=tmp_path, unset=("LIGHTNING_PRESETS_SKIP",), timeout=300)
    assert done.stdout.count("TRAINED") == 2, done.describe()


def test_lp308_neighbour_plain_ddp_accumulates() -> None:
    """The rule's fixes build without a finding: strategy='ddp', and the preset with static_graph=False (LP302 says
    the name no longer fits, a warning)."""
    Trainer(strategy="ddp", accelerator="cpu", devices=2, accumulate_grad_batches=2, **QUIET)
    with pytest.warns(lightning_presets.PresetWarning, match="LP302"):
        strategy = lightning_presets.strategy("ddp_static_graph", static_graph=False)
    Trainer(strategy=strategy, accelerator="cpu", devices=2, accumulate_grad_batches=2, **QUIET)


@pytest.mark.proves("LP118")
def test_lp118_fsdp_precision_refuses_clipping_by_norm(proof: Proof, cuda8: SimulatedGPU) -> None:
    """The precision plugin the FSDP preset runs with refuses the Trainer's default clipping at the optimizer step."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.utilities import GradClipAlgorithmType

    def build() -> Trainer:
        trainer = Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gradient_clip_val=1.0, **QUIET)
        trainer.strategy._lp_check_model(LightningModule())
        return trainer

    proof.refused("LP118", build)
    layer = torch.nn.Linear(4, 1)
    layer(torch.ones(1, 4)).sum().backward()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    with proof.guard_off("LP118"):
        trainer = build()
        with proof.raises(MisconfigurationException, r"gradient_clip_algorithm='norm'.* not supported"):
            trainer.precision_plugin.clip_gradients(optimizer, 1.0, GradClipAlgorithmType.NORM)
    trainer.precision_plugin.clip_gradients(optimizer, 1.0, GradClipAlgorithmType.VALUE)  # the fix: by value


@pytest.mark.proves("LP309")
def test_lp309_post_local_sgd_needs_an_averaging_period(proof: Proof) -> None:
    from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_local_sgd

    def build() -> Any:
        state = post_local_sgd.PostLocalSGDState(process_group=None, subgroup=None, start_localSGD_iter=8)
        return lightning_presets.strategy("ddp_static_graph", ddp_comm_state=state,
                                          ddp_comm_hook=post_local_sgd.post_localSGD_hook)  # fmt: skip

    proof.refused("LP309", build)
    with proof.guard_off("LP309"):
        strategy = build()
        strategy.optimizers = []
        with proof.raises(ValueError, "model averaging period is not provided"):
            strategy._enable_model_averaging()  # what setup_optimizers calls when `fit` starts


@pytest.mark.proves("LP509")
def test_lp509_xla_fsdp_refuses_an_unknown_state_dict_type(proof: Proof, tmp_path: Path) -> None:
    from lightning_presets.tools.simulation.stand_ins import standing_in

    def build() -> Any:
        return lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", state_dict_type="consolidated")

    with standing_in("torch_xla"):
        sys.modules["torch_xla.distributed.fsdp"].XlaFullyShardedDataParallel = type("XlaFSDP", (torch.nn.Module,), {})
        proof.refused("LP509", build)
        with proof.guard_off("LP509"):
            strategy = build()
            strategy.broadcast = lambda obj, src=0: obj
            with proof.raises(ValueError, "Unknown state_dict_type: consolidated"):
                strategy.load_checkpoint(tmp_path, state={"model": torch.nn.Linear(2, 2)})


@pytest.fixture(autouse=True)
def _no_leftover_world() -> Any:
    """A real ``fit`` in this process leaves Lightning's default process group (its store listening on MASTER_PORT)
    and the variables it wrote (MASTER_PORT, LOCAL_RANK, ...) behind; the next test starts without them (a child
    launched later would otherwise inherit a MASTER_PORT this process still holds)."""
    import torch.distributed as dist

    saved = dict(os.environ)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(saved)


@pytest.mark.proves("LP310")
def test_lp310_ddp_refuses_sync_batchnorm_on_cpu(proof: Proof, tmp_path: Path) -> None:
    import torch.distributed as dist

    def build() -> Trainer:
        trainer = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, sync_batchnorm=True, **QUIET)
        trainer.strategy._lp_check_model(Normed())
        return trainer

    proof.refused("LP310", build)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        converted = torch.nn.SyncBatchNorm.convert_sync_batchnorm(Normed())  # what Lightning's layer sync does
        with proof.raises(ValueError, "SyncBatchNorm layers only work with GPU modules", code="LP310"):
            torch.nn.parallel.DistributedDataParallel(converted)  # what DDPStrategy wraps the model in
    finally:
        dist.destroy_process_group()


@pytest.mark.proves("LP310")
def test_lp310_the_models_own_sync_batch_norm_fails_when_ddp_wraps_it_on_cpu(proof: Proof, tmp_path: Path) -> None:
    """No sync_batchnorm flag: the model's own SyncBatchNorm layers are what torch's DDP refuses on CPU."""
    import torch.distributed as dist

    def build() -> Trainer:
        trainer = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, **QUIET)
        trainer.strategy._lp_check_model(SyncNormed())
        return trainer

    proof.refused("LP310", build)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        with proof.raises(ValueError, "SyncBatchNorm layers only work with GPU modules", code="LP310"):
            torch.nn.parallel.DistributedDataParallel(SyncNormed())  # what DDPStrategy wraps the model in
    finally:
        dist.destroy_process_group()
