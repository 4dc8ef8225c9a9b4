"""``ddp_static_graph`` and ``ddp_bf16_compress``: their guards (LP301-LP306), construction in the four
namespaces, the comm hook on both sides, and a real 2-process ``ddp_static_graph`` fit on CPU (gloo).

``ddp_bf16_compress`` needs CUDA and NCCL: it is built on simulated CUDA only; its hook registration on
the Fabric side runs on a stand-in for the DDP wrapper.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import math
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook, fp16_compress_hook

import lightning_presets
from harness import run_job
from helpers import NAMESPACE_IDS, NAMESPACES, QUIET, SCRIPTS, context
from lightning_presets import Context, Options, PresetConfigError, PresetWarning
from lightning_presets.core.versions import recorded
from lightning_presets.strategies import ddp
from lightning_presets.tools.simulation import SimulatedGPU

STATIC = "ddp_static_graph"
BF16 = "ddp_bf16_compress"
BASE = context(
    BF16, {"ddp_comm_hook": "bf16_compress_hook"}
)  # the preset's hook: the rule reads only whether it has one


def ctx(**changes: Any) -> Context:
    return dataclasses.replace(BASE, **changes)


def options(preset: str = STATIC, **values: Any) -> Options:
    return Options(preset=preset, target="trainer", values=values, overrides=values)


def build(namespace: tuple[str, str, str], strategy: Any = STATIC, **kwargs: Any) -> Any:
    _, package, caller = namespace
    constructor = getattr(importlib.import_module(package), caller)
    built = constructor(strategy=strategy, **(QUIET if caller == "Trainer" else {}), **kwargs)
    return built.strategy if caller == "Trainer" else built._strategy


# ---------------------------------------------------------------------------------------------- rules


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


# ---------------------------------------------------------------------------------------------- construction


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_static_graph_constructs_in_every_namespace(namespace: tuple[str, str, str]) -> None:
    strategy = build(namespace, accelerator="cpu", devices=2)
    assert strategy._ddp_kwargs == {"static_graph": True, "gradient_as_bucket_view": True}


@pytest.mark.parametrize("caller", ["Trainer", "Fabric"])
def test_lp302_when_the_strategy_is_built(caller: str) -> None:
    target = caller.lower()
    with pytest.warns(PresetWarning) as caught:
        lightning_presets.strategy(STATIC, target=target, find_unused_parameters=True, gradient_as_bucket_view=False)
    assert [w.message.finding.code for w in caught if isinstance(w.message, PresetWarning)] == ["LP302"]
    strategy = lightning_presets.strategy(STATIC, target=target, find_unused_parameters=False, bucket_cap_mb=50)
    assert strategy._ddp_kwargs["bucket_cap_mb"] == 50


def test_lp305_at_construction() -> None:
    with pytest.warns(PresetWarning, match="LP305"):
        build(NAMESPACES[0], accelerator="cpu", devices=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        build(NAMESPACES[0], accelerator="cpu", devices=2)


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_bf16_compress_constructs_on_simulated_cuda(cuda8: SimulatedGPU, namespace: tuple[str, str, str]) -> None:
    strategy = build(namespace, BF16, accelerator="cuda", devices=8)
    if namespace[2] == "Trainer":
        assert strategy._ddp_comm_hook is bf16_compress_hook
    else:  # Fabric's DDPStrategy has no hook argument: the preset registers it after wrapping
        assert "ddp_comm_hook" not in strategy._ddp_kwargs
        assert strategy._lp_options["ddp_comm_hook"] is bf16_compress_hook


@pytest.mark.parametrize("namespace", NAMESPACES, ids=NAMESPACE_IDS)
def test_lp303_at_construction_in_every_namespace(namespace: tuple[str, str, str]) -> None:
    import torch

    if namespace[2] == "Trainer":  # trains plain DDP: LP311's warning
        with pytest.warns(PresetWarning, match=r"LP311.*Trainer\(strategy='ddp_bf16_compress', accelerator='cpu'\)"):
            build(namespace, BF16, accelerator="cpu", devices=2)
        return
    if torch.version.cuda is not None:  # the rule's accepted case: see below
        build(namespace, BF16, accelerator="cpu", devices=2)  # Fabric registers the hook on a CUDA build of torch
        return
    with pytest.raises(PresetConfigError) as error:
        build(namespace, BF16, accelerator="cpu", devices=2)
    assert error.value.codes == ("LP303",)
    assert "`" + namespace[2] + "(strategy='ddp_bf16_compress', accelerator='cpu')`" in str(error.value)


def test_lp304_and_lp307_when_the_strategy_is_built(cuda8: SimulatedGPU) -> None:
    with pytest.warns(PresetWarning) as caught:
        lightning_presets.strategy(BF16, process_group_backend="gloo", ddp_comm_hook=None)
    assert [w.message.finding.code for w in caught if isinstance(w.message, PresetWarning)] == ["LP307", "LP304"]
    strategy = build(
        NAMESPACES[0], lightning_presets.strategy(BF16, process_group_backend="nccl"), accelerator="cuda", devices=8
    )
    assert strategy.process_group_backend == "nccl"


def test_lp306_at_construction(cuda8: SimulatedGPU) -> None:
    with pytest.warns(PresetWarning, match="LP306"):
        build(NAMESPACES[0], BF16, accelerator="cuda", devices=8, precision="bf16-true")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        build(NAMESPACES[0], BF16, accelerator="cuda", devices=8, precision="bf16-mixed")


class _RecordingDDP(nn.Module):
    """Stands in for torch's DistributedDataParallel on the Fabric side: records the hook registered on it."""

    def __init__(self, module: nn.Module, **kwargs: Any) -> None:
        super().__init__()
        self.module = module
        self.kwargs = kwargs
        self.hooks: list[tuple[Any, Any]] = []

    def register_comm_hook(self, state: Any, hook: Any) -> None:
        self.hooks.append((state, hook))


@pytest.mark.parametrize("hook", [None, fp16_compress_hook])
def test_fabric_registers_the_comm_hook_after_wrapping(cuda8: SimulatedGPU, hook: Any) -> None:
    overrides = {} if hook is None else {"ddp_comm_hook": hook}
    strategy = build(
        NAMESPACES[1], lightning_presets.strategy(BF16, target="fabric", **overrides), accelerator="cuda", devices=8
    )
    with (  # the CUDA stream Lightning opens around the wrap is simulated too
        mock.patch("lightning.fabric.strategies.ddp.DistributedDataParallel", _RecordingDDP),
        mock.patch("torch.cuda.Stream"),
        mock.patch("torch.cuda.stream", return_value=contextlib.nullcontext()),
    ):
        wrapped = strategy.setup_module(nn.Linear(2, 2))
    assert isinstance(wrapped, _RecordingDDP)
    assert "ddp_comm_hook" not in wrapped.kwargs
    assert wrapped.hooks == [(None, hook or bf16_compress_hook)]


def test_tested_with_records_versions_and_evidence() -> None:
    import lightning
    import torch

    for preset in (STATIC, BF16):
        tested = lightning_presets.get_preset(preset).tested_with
        assert lightning.__version__ in recorded(tested, "lightning")
        assert torch.__version__.split("+")[0] in recorded(tested, "torch")
    assert "runtime" in lightning_presets.get_preset(STATIC).tested_with["evidence"]
    assert "runtime" not in lightning_presets.get_preset(BF16).tested_with["evidence"]


# ------------------------------------------------------------------- runtime: 2 processes, CPU, gloo


@pytest.mark.distributed
@pytest.mark.parametrize("api", ["trainer", "fabric"])
def test_static_graph_fit_on_two_processes(tmp_path: Path, api: str) -> None:
    # the Trainer's run starts as users start it (Lightning's launcher re-runs the script for rank 1); Fabric's
    # ranks are forked by the harness
    launcher = "fresh" if api == "trainer" else "fork"
    job = run_job(SCRIPTS / "ddp_fit.py", "--api", api, cwd=tmp_path, timeout=180, launcher=launcher)
    assert job.returncode == 0, job.describe()
    reports = sorted(job.reports(), key=lambda report: report["rank"])
    assert [report["rank"] for report in reports] == [0, 1]
    for report in reports:
        assert report["world_size"] == 2
        assert report["backend"] == "gloo"
        assert report["wrapper"] == "DistributedDataParallel"
        assert report["static_graph"] is True
        assert report["gradient_as_bucket_view"] is True
        assert report["find_unused_parameters"] is False
        assert report["api"] == api
        assert all(math.isfinite(loss) for loss in report["losses"])
        assert report["losses"][-1] < report["losses"][0]
    assert reports[0]["losses"] != reports[1]["losses"]  # each rank saw its own batches
    assert reports[0]["weights_checksum"] == reports[1]["weights_checksum"]  # yet the weights stayed identical


# ------------------------------------------------ LP308: accumulation once the static graph has synchronised

GUARD_TRUTH = str(Path(__file__).resolve().parent / "evidence" / "scripts")


def _results(job: Any) -> list[dict[str, Any]]:
    import json

    return sorted((json.loads(line.split("RESULT ", 1)[1]) for line in job.stdout.splitlines() if "RESULT {" in line),
                  key=lambda each: each["rank"])  # fmt: skip


def _scheduled(schedule: dict[int, int]) -> Any:
    from lightning.pytorch import Trainer
    from lightning.pytorch.callbacks import GradientAccumulationScheduler

    return Trainer(strategy=STATIC, accelerator="cpu", devices=2, callbacks=[GradientAccumulationScheduler(schedule)],
                   **QUIET)  # fmt: skip


@pytest.mark.parametrize("schedule", [{0: 2}, {0: 4, 2: 8}])
def test_lp308_reads_a_gradient_accumulation_schedule_that_accumulates_from_the_first_epoch(
    schedule: dict[int, int],
) -> None:
    with pytest.raises(PresetConfigError, match=r"LP308.*GradientAccumulationScheduler\(\{0: \d"):
        _scheduled(schedule)


@pytest.mark.parametrize("schedule", [{1: 2}, {0: 1, 3: 4}])
def test_lp308_accepts_a_schedule_whose_first_epoch_synchronises(schedule: dict[int, int]) -> None:
    _scheduled(schedule)


@pytest.mark.distributed
def test_static_graph_accumulating_after_a_synchronised_epoch_trains() -> None:
    """LP308's neighbour: GradientAccumulationScheduler({1: 2}) synchronises every batch of epoch 0, then accumulates;
    every guard on, both ranks train 3 epochs of 4 batches (accumulating 2 at the end) to the same weights."""
    job = run_job("guard_truth:static_graph_schedule", "1:2", path=(GUARD_TRUTH,), unset=("LIGHTNING_PRESETS_SKIP",),
                  timeout=180)  # fmt: skip
    assert job.outcome == "trained", job.describe()
    first, second = _results(job)
    assert first["accumulated"] == second["accumulated"] == 2
    assert len(first["losses"]) == 12
    assert first["weights"] == second["weights"]


@pytest.mark.distributed
def test_static_graph_trains_fabrics_gradient_accumulation_recipe_as_plain_ddp() -> None:
    """LP308's neighbour on Fabric: the documented recipe (``is_accumulating = iteration % N != 0``: iteration 0
    synchronises, then every other backward skips it) with ddp_static_graph, every guard on: the weights equal plain
    DDP's on both ranks (the guarded no_sync refuses only a skip before the first synchronised backward)."""
    job = run_job("guard_truth:fabric_accumulation_recipe", path=(GUARD_TRUTH,), unset=("LIGHTNING_PRESETS_SKIP",),
                  timeout=180)  # fmt: skip
    assert job.outcome == "trained", job.describe()
    first, second = _results(job)
    assert first["weights"]["ddp_static_graph"] == first["weights"]["ddp"] == second["weights"]["ddp_static_graph"]


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
