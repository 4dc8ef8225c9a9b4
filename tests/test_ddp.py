"""``ddp_static_graph`` and ``ddp_bf16_compress``: their guards (LP301-LP306), construction in the four
namespaces, the comm hook on both sides, and a real 2-process ``ddp_static_graph`` fit on CPU (gloo).

``ddp_bf16_compress`` needs CUDA and NCCL: it is built on simulated CUDA only; its hook registration on
the Fabric side runs on a stand-in for the DDP wrapper.
"""

from __future__ import annotations

import contextlib
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
from helpers import NAMESPACE_IDS, NAMESPACES, QUIET, SCRIPTS
from lightning_presets import PresetConfigError, PresetWarning
from lightning_presets.core.versions import recorded
from lightning_presets.tools.simulation import SimulatedGPU

STATIC = "ddp_static_graph"
BF16 = "ddp_bf16_compress"


def build(namespace: tuple[str, str, str], strategy: Any = STATIC, **kwargs: Any) -> Any:
    _, package, caller = namespace
    constructor = getattr(importlib.import_module(package), caller)
    built = constructor(strategy=strategy, **(QUIET if caller == "Trainer" else {}), **kwargs)
    return built.strategy if caller == "Trainer" else built._strategy


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
