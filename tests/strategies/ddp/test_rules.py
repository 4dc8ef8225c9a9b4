"""``lightning_presets.strategies.ddp`` (ddp_static_graph, ddp_bf16_compress): each error rule's executed proof
(``proves``: on CPU, one gloo process, or 2 for the static graph's backward), its accepted neighbours (run, and each
rule widened, by ``neighbours.neighbour_tests``), and the rules' tests.
"""

from __future__ import annotations

import dataclasses
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from jobs import QUIET, Normed, Steps, SyncNormed, fit
from lightning.pytorch import Trainer
from proof import Proof, reports
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook, fp16_compress_hook

import lightning_presets
from harness import run_job
from helpers import context
from lightning_presets import Context, Options, PresetWarning
from lightning_presets.strategies.ddp import rules as ddp
from neighbours import _TRAINED, CPU, CPU_ONLY_TORCH, Neighbour, _bn, _gn, _ln, _t, adder, n, neighbour_tests, trained

pytestmark = pytest.mark.usefixtures("process_group")
EVIDENCE = Path(__file__).resolve().parents[2] / "evidence"
BF16 = "ddp_bf16_compress"

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP303",
    n(_t('"ddp_bf16_compress"'), "bf16 compression on CUDA: the Trainer registers the hook"),
    n(
        'Fabric(strategy="ddp_bf16_compress", accelerator="cuda", devices=8)',
        "Fabric on CUDA (a CUDA build of torch with NCCL)",
    ),
    n(_t('"ddp_bf16_compress"', "cuda", "", 2), "two CUDA devices"),
    n(
        _t('lightning_presets.strategy("ddp_bf16_compress", ddp_comm_hook=None)', "cpu", "", 2),
        "the hook removed (LP307's warning): plain DDP on CPU",
        CPU_ONLY_TORCH,
    ),
    n(
        _t('"ddp_bf16_compress"', "cpu", "", 2),
        "the Trainer on CPU: the review's false rejection (an option silently ignored: Lightning's DDPStrategy "
        "registers comm hooks on CUDA only and trains plain DDP, tests/strategies/ddp/test_rules.py; the severity "
        "policy makes that a warning)",
        CPU,
    ),
)
_add(
    "LP308",
    n('Fabric(strategy="ddp_static_graph", accelerator="cpu", devices=2)', "Fabric: the loop owns no_sync"),
    n(_t('"ddp_static_graph"', "cpu", ", accumulate_grad_batches=1", 2), "static graph, no accumulation"),
    n(
        _t(
            'lightning_presets.strategy("ddp_static_graph", static_graph=False)',
            "cpu",
            ", accumulate_grad_batches=2",
            2,
        ),
        "the preset with static_graph=False (LP302's warning)",
    ),
    n(_t('"ddp_bf16_compress"', "cuda", ", accumulate_grad_batches=4"), "another DDP preset without static graph"),
    n(
        "from lightning.pytorch.callbacks import GradientAccumulationScheduler\n"
        + _t('"ddp_static_graph"', "cpu", ", callbacks=[GradientAccumulationScheduler({1: 2})]", 2),
        "accumulating from the second epoch: the first backward synchronised (trained on 2 CPU processes: "
        "tests/test_ddp.py::test_static_graph_accumulating_after_a_synchronised_epoch_trains)",
    ),
)
_LOCAL_SGD = (
    "from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_localSGD\n"
    'strategy = lightning_presets.strategy("{preset}", ddp_comm_state=post_localSGD.PostLocalSGDState(None, None, 8), '
    "ddp_comm_hook=post_localSGD.post_localSGD_hook{more})\n"
)
_add(
    "LP309",
    n(
        _LOCAL_SGD.format(preset="ddp_static_graph", more=", model_averaging_period=4") + _t("strategy", "cuda"),
        "post-localSGD with a period of 4",
    ),
    n(
        _LOCAL_SGD.format(preset="ddp_static_graph", more=", model_averaging_period=1") + _t("strategy", "cuda"),
        "the smallest period",
    ),
    n(
        _LOCAL_SGD.format(preset="ddp_bf16_compress", more=", model_averaging_period=4") + _t("strategy", "cuda"),
        "the other DDP preset, its hook replaced by post-localSGD",
    ),
    n(
        "from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD\n"
        'strategy = lightning_presets.strategy("ddp_static_graph", ddp_comm_state=powerSGD.PowerSGDState(None), '
        "ddp_comm_hook=powerSGD.powerSGD_hook)\n" + _t("strategy", "cuda"),
        "another communication state: no model averaging",
    ),
)
_add(
    "LP310",
    n(_bn + _t('"ddp_static_graph"', "cuda", ", sync_batchnorm=True") + ".fit(model)", "SyncBatchNorm on CUDA"),
    n(_bn + _t('"ddp_static_graph"', "cpu", "", 2) + ".fit(model)", "batch norm on CPU, no sync_batchnorm" + _TRAINED),
    n(_ln + _t('"ddp_static_graph"', "cpu", ", sync_batchnorm=True", 2) + ".fit(model)", "no batch norm" + _TRAINED),
    n(_gn + _t('"ddp_static_graph"', "cpu", ", sync_batchnorm=True", 2) + ".fit(model)", "GroupNorm" + _TRAINED),
    n(_bn + _t('"ddp_bf16_compress"', "cuda", ", sync_batchnorm=True") + ".fit(model)", "the other DDP preset, CUDA"),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- the rules' tests: each rule function on a context (helpers.context) --------------------------------------

STATIC = "ddp_static_graph"


BASE = context(
    BF16, {"ddp_comm_hook": "bf16_compress_hook"}
)  # the preset's hook: the rule reads only whether it has one


def ctx(**changes: Any) -> Context:
    return dataclasses.replace(BASE, **changes)


def options(preset: str = STATIC, **values: Any) -> Options:
    return Options(preset=preset, target="trainer", values=values, overrides=values)


@pytest.mark.parametrize("value", [True, False, None])
def test_static_graph_accepts_find_unused_parameters(value: Any) -> None:
    """torch documents that with static_graph=True the flag does not matter (the former LP301 refused True)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        strategy = lightning_presets.strategy(STATIC, find_unused_parameters=value)
    assert strategy._ddp_kwargs["static_graph"] is True
    assert "LP301" not in {each.code for each in lightning_presets.get_preset(STATIC).rules}


@pytest.mark.parametrize("key", ["static_graph", "gradient_as_bucket_view"])
def test_lp302_rejects_turning_off_what_the_preset_is(key: str) -> None:
    finding = ddp.static_graph_kept(options(**{"static_graph": True, "gradient_as_bucket_view": True, key: False}))
    assert finding is not None
    assert finding.code == "LP302"
    assert f"{key}=False" in finding.message
    assert "strategy='ddp'" in finding.hint


def test_lp302_accepts_the_presets_flags() -> None:
    assert ddp.static_graph_kept(options(static_graph=True, gradient_as_bucket_view=True)) is None


@pytest.mark.parametrize("accelerator", ["cpu", "mps"])
def test_lp311_warns_that_the_trainer_leaves_compression_out_off_cuda(accelerator: str) -> None:
    """Off CUDA the Trainer trains plain DDP (tests/strategies/ddp/test_rules.py shows it): a warning, not LP303."""
    assert ddp.bf16_compress_supported(ctx(accelerator=accelerator, devices_per_node=2)) is None
    finding = ddp.bf16_compress_applied(ctx(accelerator=accelerator, devices_per_node=2))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP311", "warning")
    assert f"accelerator={accelerator!r}" in finding.message
    assert "ddp_static_graph" in finding.hint


def test_lp303_rejects_compression_on_a_cpu_only_torch_with_fabric() -> None:
    cpu_only = ctx(accelerator="cpu", devices_per_node=2, kind="fabric", torch_build={"cuda": None, "nccl": None})
    finding = ddp.bf16_compress_supported(cpu_only)
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP303", "error")
    assert "CPU-only" in finding.message
    cuda_build = dataclasses.replace(cpu_only, torch_build={"cuda": "12.8", "nccl": (2, 27, 3)})
    assert ddp.bf16_compress_supported(cuda_build) is None  # Fabric registers it on a CUDA build, any backend
    assert ddp.bf16_compress_applied(cpu_only) is None


def test_lp303_accepts_cuda() -> None:
    assert ddp.bf16_compress_supported(ctx(accelerator="cuda")) is None
    assert ddp.bf16_compress_applied(ctx(accelerator="cuda")) is None


def test_lp303_is_quiet_on_cpu_once_the_hook_is_removed() -> None:
    assert ddp.bf16_compress_supported(ctx(accelerator="cpu", options={"ddp_comm_hook": None})) is None


@pytest.mark.parametrize("backend", ["gloo", "mpi"])
def test_lp304_warns_about_a_backend_other_than_nccl(backend: str) -> None:
    finding = ddp.bf16_compress_reduced_by_nccl(options(BF16, process_group_backend=backend))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP304", "warning")
    assert f"process_group_backend={backend!r}" in finding.message
    assert "process_group_backend='nccl'" in finding.hint


@pytest.mark.parametrize("backend", ["nccl", None, "cpu:gloo,cuda:nccl", "cuda:nccl, cpu:gloo"])
def test_lp304_accepts_nccl_for_cuda_tensors(backend: str | None) -> None:
    assert ddp.bf16_compress_reduced_by_nccl(options(BF16, process_group_backend=backend)) is None


def test_lp304_names_a_device_map_without_nccl_for_cuda() -> None:
    finding = ddp.bf16_compress_reduced_by_nccl(options(BF16, process_group_backend="cpu:gloo"))
    assert finding is not None
    assert "reduced by no backend at all" in finding.message


def test_lp305_warns_on_one_process_and_accepts_two() -> None:
    finding = ddp.ddp_has_peers(ctx(devices_per_node=1))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP305", "warning")
    assert "devices=1, num_nodes=1" in finding.message
    assert ddp.ddp_has_peers(ctx(devices_per_node=1, num_nodes=2)) is None


@pytest.mark.parametrize("precision", ["bf16-true", "16-true"])
def test_lp306_warns_when_gradients_are_already_low_precision(precision: str) -> None:
    finding = ddp.bf16_compress_has_fp32_grads(ctx(precision=precision))
    assert finding is not None
    assert (finding.code, finding.severity) == ("LP306", "warning")
    assert f"precision={precision!r}" in finding.message
    assert ("mantissa" in finding.message) == (precision == "16-true")


@pytest.mark.parametrize("precision", ["bf16-mixed", "32-true", "16-mixed"])
def test_lp306_accepts_fp32_gradients(precision: str) -> None:
    assert ddp.bf16_compress_has_fp32_grads(ctx(precision=precision)) is None


def test_lp307_rejects_removing_the_hook() -> None:
    finding = ddp.compression_hook_kept(options(BF16, ddp_comm_hook=None))
    assert finding is not None
    assert finding.code == "LP307"
    assert "ddp_comm_hook=None" in finding.message
    assert "ddp_static_graph" in finding.hint


@pytest.mark.parametrize("hook", [bf16_compress_hook, fp16_compress_hook])
def test_lp307_accepts_a_compression_hook(hook: Any) -> None:
    assert ddp.compression_hook_kept(options(BF16, ddp_comm_hook=hook)) is None


def _normed(layer: nn.Module) -> nn.Module:
    return nn.Sequential(nn.Linear(4, 4), layer, nn.Linear(4, 1))


@pytest.mark.parametrize("accelerator", ["cpu", "mps"])
def test_lp310_refuses_the_models_own_sync_batch_norm_off_cuda_without_the_flag(accelerator: str) -> None:
    finding = ddp.sync_batchnorm_on_gpus(ctx(accelerator=accelerator), _normed(nn.SyncBatchNorm(4)))
    assert finding is not None
    assert "the model's layer 1 is nn.SyncBatchNorm already" in finding.message
    assert "sync_batchnorm" not in finding.hint  # no flag to drop


def test_lp310_accepts_sync_batch_norm_on_cuda_and_plain_batch_norm_without_the_flag() -> None:
    assert ddp.sync_batchnorm_on_gpus(ctx(accelerator="cuda"), _normed(nn.SyncBatchNorm(4))) is None
    assert ddp.sync_batchnorm_on_gpus(ctx(accelerator="cpu"), _normed(nn.BatchNorm1d(4))) is None
    flagged = ctx(accelerator="cpu", arguments={"sync_batchnorm": True})
    assert ddp.sync_batchnorm_on_gpus(flagged, _normed(nn.LayerNorm(4))) is None
    assert ddp.sync_batchnorm_on_gpus(flagged, _normed(nn.BatchNorm1d(4))) is not None


# --- the review's false rejections, run for real: 2 processes on CPU (gloo) through the fork server --------------
# A fresh job per test (about a second once the server is up): the proof that the neighbour the rule used to refuse
# trains, with every guard on.


def test_ddp_bf16_compress_trains_plain_ddp_on_cpu_on_two_processes() -> None:
    """LP303's neighbour: the Trainer on CPU trains (the hook is left out), the ranks' weights identical after."""
    assert trained("train_ddp_bf16_compress_on_cpu")["same_weights"] is True


# --- executed proofs ----------------------------------------------------------------------------------------------


class RecordsHooks(Steps):
    """Reads the comm hooks of the DDP wrapper while it exists (Lightning unwraps the model at teardown)."""

    hooks: list[str]

    def on_train_start(self) -> None:
        wrapper: Any = self.trainer.strategy.model
        self.hooks = [getattr(hook, "__name__", repr(hook)) for hook, _ in wrapper._comm_hooks]


@pytest.mark.proves("LP303")
def test_lp303_bf16_compression_off_cuda_is_ignored_or_refused(proof: Proof) -> None:
    from lightning.fabric import Fabric

    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("cpu_only_torch"):
        proof.refused("LP303", lambda: Fabric(strategy=BF16, accelerator="cpu", devices=1))
    with proof.guard_off("LP303", "LP311"):
        module = fit(BF16, RecordsHooks())  # the Trainer off CUDA: LP311's warning, no error
        assert len(module.losses) == 2  # it trains, as plain DDP
        assert "bf16_compress_hook" not in module.hooks
        if torch.version.cuda is None:  # a CPU build of torch refuses the hook itself (Fabric registers it)
            fabric = Fabric(strategy=BF16, accelerator="cpu", devices=1)
            fabric.launch()
            with proof.raises(TypeError, r"BF16 all reduce communication hook required CUDA 11\+ and NCCL 2\.10\+"):
                fabric.setup(torch.nn.Linear(4, 4))


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
    done = run_job(script, env={"LIGHTNING_PRESETS_SKIP": "LP308"}, path=(str(EVIDENCE),), cwd=tmp_path, timeout=600)
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
    done = run_job(script, *args, path=(str(EVIDENCE),), cwd=tmp_path, unset=("LIGHTNING_PRESETS_SKIP",), timeout=300)
    refusals = [json.loads(line.split("REFUSED ", 1)[1]) for line in done.stdout.splitlines() if "REFUSED " in line]
    proof.refused_in_children("LP308", refusals, ranks=2)
    done = run_job(
        script, *args, env={"LIGHTNING_PRESETS_SKIP": "LP308"}, path=(str(EVIDENCE),), cwd=tmp_path, timeout=300
    )
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
                   path=(str(EVIDENCE / "scripts"),), timeout=180)  # fmt: skip
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
    done = run_job(script, *args, path=(str(EVIDENCE),), cwd=tmp_path, unset=("LIGHTNING_PRESETS_SKIP",), timeout=300)
    assert done.stdout.count("TRAINED") == 2, done.describe()


def test_lp308_neighbour_plain_ddp_accumulates() -> None:
    """The rule's fixes build without a finding: strategy='ddp', and the preset with static_graph=False (LP302 says
    the name no longer fits, a warning)."""
    Trainer(strategy="ddp", accelerator="cpu", devices=2, accumulate_grad_batches=2, **QUIET)
    with pytest.warns(lightning_presets.PresetWarning, match="LP302"):
        strategy = lightning_presets.strategy("ddp_static_graph", static_graph=False)
    Trainer(strategy=strategy, accelerator="cpu", devices=2, accumulate_grad_batches=2, **QUIET)


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
