"""``plan --model``: the traced plan against real runs, its activations against a real forward, the batch
search, a user's factory run safely, and the progress display.

The real runs are 2 gloo processes on CPU (``tests/scripts/plan_real_run.py``) that wrap the reference
decoder with the presets' own code and measure one training step independently of the planner: exact
tensor accounting for parameters, gradients and optimizer state, ``saved_tensors_hooks`` for the
activations, torch's tracker in real mode for the peak.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import subprocess
import sys
from typing import Any

import pytest
import torch
from torch import nn

from helpers import SCRIPTS, run
from lightning_presets.cli import _output, main
from lightning_presets.registry.catalog import strategy_catalog
from lightning_presets.tools.plan import layouts as memory
from lightning_presets.tools.plan import trace, user_model
from lightning_presets.tools.plan import worker as plan_worker
from lightning_presets.tools.plan.estimates import Estimate, PlanRequest, traced_estimate

TINY = "lightning_presets.tools.plan.reference_models:decoder_tiny"
VALIDATED = ("fsdp2", "fsdp2_offload_ckpt", "ddp_static_graph", "tp2d_hybrid")
CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "peak")
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def real_run() -> dict[str, dict[str, int]]:
    """One real training step per preset, measured on rank 0 of 2 gloo processes."""
    done = subprocess.run(
        [sys.executable, str(SCRIPTS / "plan_real_run.py"), "--model", TINY],
        capture_output=True, text=True, timeout=240, check=False,
    )  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert lines, done.stdout[-2000:]
    result: dict[str, dict[str, int]] = json.loads(lines[0].removeprefix("RESULT "))
    return result


@pytest.fixture(scope="module")
def planned() -> dict[str, tuple[Estimate, trace.Traced]]:
    """The plan of the same model for 2 GPUs, traced in this process: each preset's estimate and trace."""
    request = PlanRequest(model=TINY, gpus_per_node=2, precision="32-true", presets=VALIDATED)
    estimates, _ = plan_worker.plan_in_process(request)
    presets = strategy_catalog().presets
    factory = user_model.load_factory(TINY)
    traces = {}
    with trace.fake_world(2):
        for name in VALIDATED:
            layout = memory.layout_of(presets[name])
            assert layout is not None
            mesh = {"data_parallel": 1, "tensor_parallel": 2} if layout.tensor_parallel else None
            if layout.family == "model_parallel" and mesh is None:
                mesh = {"data_parallel": 2, "tensor_parallel": 1}
            traces[name] = trace.trace(factory, TINY, layout, precision="32-true", mesh_sizes=mesh)
    return {each.preset: (each, traces[each.preset]) for each in estimates}


def _close(planned: float, real: float) -> bool:
    return abs(planned - real) <= TOLERANCE * real


@pytest.mark.parametrize("category", CATEGORIES)
@pytest.mark.parametrize("preset", VALIDATED)
def test_traced_plan_matches_a_real_two_process_run(
    real_run: dict[str, dict[str, int]], planned: dict[str, tuple[Estimate, trace.Traced]], preset: str, category: str
) -> None:
    estimate, traced = planned[preset]
    real = real_run[preset][category]
    assert real > 0
    if category == "peak":
        # On CPU the offloaded state lives where everything else does: the whole rank's peak is what compares.
        figure = traced.peak_all if traced.offloaded else estimate.total_peak
    elif category == "activations":
        figure = estimate.activations or 0
    elif traced.offloaded:  # kept in CPU memory: reported per GPU as offloaded bytes, not on the GPU
        assert getattr(estimate, category) == 0
        figure = getattr(traced, category)
    else:
        figure = getattr(estimate, category)
    assert _close(figure, real), f"{preset} {category}: planned {figure}, real {real}"
    assert estimate.evidence == "traced"


def test_offloaded_state_is_counted_in_cpu_memory(planned: dict[str, tuple[Estimate, trace.Traced]]) -> None:
    estimate, traced = planned["fsdp2_offload_ckpt"]
    assert estimate.offloaded_per_gpu == traced.parameters + traced.gradients + traced.optimizer > 0
    assert estimate.cpu_bytes_per_node == 2 * estimate.offloaded_per_gpu  # two GPUs per node
    assert estimate.total_peak == traced.peak < traced.peak_all  # the device peak leaves the CPU side out


def test_sharding_divides_the_states_the_replica_holds(planned: dict[str, tuple[Estimate, trace.Traced]]) -> None:
    replica, _ = planned["ddp_static_graph"]
    sharded, _ = planned["fsdp2"]
    numel = 29_312  # decoder_tiny
    assert replica.parameters == replica.gradients == numel * 4  # fp32, whole
    assert replica.optimizer >= 2 * numel * 4  # AdamW: two moments (+ step counters)
    assert sharded.parameters == numel * 4 // 2  # 2 ranks, even dimensions: no padding


# --- activations: the bytes a real forward saves for backward ------------------------------------------------


def _real_saved_bytes(model: nn.Module, tokens: torch.Tensor, autocast: torch.dtype | None) -> int:
    """Distinct storages saved for backward in a real forward, parameters excluded (told apart by address)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    found: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            found[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        with torch.autocast("cpu", dtype=autocast) if autocast else contextlib.nullcontext():
            output = model(tokens)
        output.float().sum()
    return sum(found.values())


@pytest.mark.parametrize(("precision", "checkpoint"), [("32-true", False), ("bf16-mixed", False), ("32-true", True)])
def test_traced_activations_equal_what_a_real_forward_saves(precision: str, checkpoint: bool) -> None:
    layout = memory.layout_of(strategy_catalog().presets["ddp_static_graph"])
    assert layout is not None
    layout = dataclasses.replace(layout, checkpoint=checkpoint)
    factory = user_model.load_factory(TINY)
    with trace.fake_world(1):
        traced = trace.trace(factory, TINY, layout, precision=precision, optimize=False)
    torch.manual_seed(0)
    model = factory()
    if checkpoint:
        from torch.distributed._composable.checkpoint_activation import checkpoint as checkpoint_module

        for block in model.model.layers:
            checkpoint_module(block)
    real = _real_saved_bytes(model, model.example_input_array, torch.bfloat16 if precision == "bf16-mixed" else None)
    assert real > 0
    assert _close(traced.activations, real), (traced.activations, real)


def test_checkpointing_and_a_smaller_batch_save_fewer_activations() -> None:
    layout = memory.layout_of(strategy_catalog().presets["ddp_static_graph"])
    assert layout is not None
    factory = user_model.load_factory(TINY)
    with trace.fake_world(1):
        full = trace.trace(factory, TINY, layout, precision="32-true", optimize=False)
        half = trace.trace(factory, TINY, layout, precision="32-true", optimize=False, batch_size=2)
        recomputed = trace.trace(factory, TINY, dataclasses.replace(layout, checkpoint=True), precision="32-true",
                                 optimize=False)  # fmt: skip
    assert (full.batch, half.batch) == (4, 2)
    assert half.activations < full.activations
    assert recomputed.activations < full.activations / 2


# --- estimates from traces and formulas ---------------------------------------------------------------------


def _facts() -> trace.ModelFacts:
    return trace.ModelFacts(numel=1000, largest_layer=300, block_params=200, root_params=600, blocks=("Block",))


def _traced(**figures: Any) -> trace.Traced:
    values = {"parameters": 4000, "gradients": 4000, "optimizer": 8000, "activations": 500, "peak": 20000,
              "peak_all": 20000, "transient_peak": 900, "offloaded": False, "batch": 4, **figures}  # fmt: skip
    return trace.Traced(facts=_facts(), **values)


def test_an_untraceable_strategy_adds_traced_activations_to_its_formula() -> None:
    layout = memory.layout_of(strategy_catalog().presets["fsdp_grad_op"])
    assert layout is not None
    request = PlanRequest(model=TINY, gpus_per_node=4, precision="32-true")
    estimate = traced_estimate(layout, request, _traced(), [], None)
    assert estimate.evidence == "arithmetic + traced activations"
    # SHARD_GRAD_OP, fp32: 4Ψ/N + 4Ψ gathered, 4Ψ/N gradients, 8Ψ/N Adam; plus the trace's transient peak
    assert (estimate.parameters, estimate.gradients, estimate.optimizer) == (1000 + 4000, 1000, 2000)
    assert estimate.activations == 500
    assert estimate.total_peak == 5000 + 1000 + 2000 + 900


def test_a_traced_strategy_takes_every_figure_from_its_trace() -> None:
    layout = memory.layout_of(strategy_catalog().presets["fsdp2"])
    assert layout is not None
    request = PlanRequest(model=TINY, gpus_per_node=4, gpu_memory=19_000, headroom=0)
    estimate = traced_estimate(layout, request, _traced(), [], None)
    assert (estimate.parameters, estimate.total_peak, estimate.evidence) == (4000, 20000, "traced")
    assert not estimate.fits  # 20000 > 19000
    assert any("peak 19.5 KiB per GPU > 18.6 KiB usable" in why for why in estimate.why)


# --- the largest batch --------------------------------------------------------------------------------------


@pytest.mark.parametrize("start", [1, 4, 64])
@pytest.mark.parametrize(("fixed", "per_sample", "usable", "expected"),
                         [(100, 10, 1000, 90), (100, 10, 105, None), (0, 3, 3000, 1000), (50, 7, 57, 1)])  # fmt: skip
def test_search_batch_finds_the_largest_batch_that_fits(
    start: int, fixed: int, per_sample: int, usable: int, expected: int | None
) -> None:
    probes: list[int] = []

    def peak(batch: int) -> float:
        probes.append(batch)
        return fixed + per_sample * batch

    assert plan_worker.search_batch(peak, usable, start) == expected
    assert len(probes) <= 6  # the line through two traces lands on it


def test_search_batch_bisects_when_memory_is_not_affine() -> None:
    def peak(batch: int) -> float:
        return batch**2

    assert plan_worker.search_batch(peak, 10_000, 3) == 100


def test_max_batch_by_traced_runs(capsys: pytest.CaptureFixture[str]) -> None:
    base = ("plan", "--model", TINY, "--gpus", "2", "--gpu-memory", "2MiB", "--json", "--preset", "ddp_static_graph")
    code, out = run(capsys, *base, "--preset", "fsdp2", "--max-batch")
    data = json.loads(out)
    assert code == 0
    by_name = {each["preset"]: each for each in data["presets"]}
    assert by_name["fsdp2"]["max_micro_batch"] > by_name["ddp_static_graph"]["max_micro_batch"] >= 4
    largest = by_name["ddp_static_graph"]["max_micro_batch"]
    for batch, fits in ((largest, True), (largest + 1, False)):  # the answer, checked by two more traced plans
        request = PlanRequest(model=TINY, gpus_per_node=2, gpu_memory=2 * 2**20, presets=("ddp_static_graph",),
                              batch_size=batch)  # fmt: skip
        (estimate,), _ = plan_worker.plan_in_process(request)
        assert (estimate.batch, estimate.fits) == (batch, fits)


# --- the user's factory, run safely --------------------------------------------------------------------------


def raises() -> nn.Module:
    raise RuntimeError("no checkpoint at /data/weights.pt")


def no_example_input() -> nn.Module:
    return nn.Linear(4, 4)


INSTANCE = nn.Linear(4, 4)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("builtins:input", "read from stdin"),
        ("sys:exit", "called sys.exit(None)"),
        (f"{__name__}:raises", "raised RuntimeError: no checkpoint at /data/weights.pt"),
        (f"{__name__}:no_example_input", "has no example_input_array"),
        (f"{__name__}:INSTANCE", "is a module instance"),
        (f"{__name__}:missing", "has no attribute 'missing'"),
    ],
)
def test_a_factory_that_fails_gives_a_message(spec: str, message: str) -> None:
    request = PlanRequest(model=spec, gpus_per_node=2, presets=("ddp_static_graph",))
    with pytest.raises(plan_worker.PlanFailed, match=re.escape(message)):
        plan_worker.plan_in_process(request)


@pytest.mark.parametrize(("spec", "message"), [("os:abort", "ended with SIGABRT"),
                                               (f"{__name__}:raises", "raised RuntimeError")])  # fmt: skip
def test_a_factory_that_fails_is_a_usage_error_of_the_cli(
    spec: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """In the child process: an abort of the interpreter is contained, and reported like any other failure."""
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--model", spec, "--gpus", "2", "--preset", "ddp_static_graph"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err


def test_a_plan_that_takes_too_long_is_stopped(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--model", TINY, "--gpus", "2", "--timeout", "1"])
    assert exited.value.code == 2
    assert "took longer than 1 s and was stopped" in capsys.readouterr().err


def test_plan_json_of_a_traced_model(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "plan", "--model", TINY, "--gpus", "2", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["model_parameters"] == 29_312
    by_name = {each["preset"]: each for each in data["presets"]}
    for each in data["presets"]:
        assert set(each["per_gpu_bytes"]) == {"parameters", "gradients", "optimizer", "activations", "total_peak"}
        untraced = each["applicable"] is False  # not traced: no activations
        assert all(isinstance(value, int) or (untraced and key == "activations" and value is None)
                   for key, value in each["per_gpu_bytes"].items()), each  # fmt: skip
        assert isinstance(each["fits"], bool)
    assert {name for name, each in by_name.items() if each["evidence"] == "traced"} == set(VALIDATED) | {
        "ddp_bf16_compress"
    }
    assert {name for name, each in by_name.items() if each["evidence"] == "arithmetic + traced activations"} == {
        "fsdp_grad_op", "fsdp_offload_ckpt", "deepspeed_zero2_offload", "deepspeed_zero3_offload_ckpt",
    }  # fmt: skip
    assert by_name["fsdp_hybrid_shard"]["applicable"] is False  # one node: a single replica, full sharding
    assert "DeepSpeed estimate_zero2" in by_name["deepspeed_zero2_offload"]["formula"]
    assert data["recommended"] == "ddp_static_graph"
    assert "--model" in data["check"]


# --- progress --------------------------------------------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_shows_on_a_terminal_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    with _output.progress(True, "loading the model") as progress:
        assert progress is None  # piped
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    with _output.progress(False, "loading the model") as progress:
        assert progress is None  # --json
    with _output.progress(True, "loading the model") as progress:
        assert progress is not None
        progress("tracing fsdp2", 1, 3)
    assert "tracing fsdp2" in terminal.getvalue()


def test_plan_reports_progress_while_tracing() -> None:
    calls: list[tuple[str, int, int]] = []
    request = PlanRequest(model=TINY, gpus_per_node=2, presets=("fsdp2", "ddp_static_graph", "ddp_bf16_compress"))
    plan_worker.plan_in_process(request, lambda what, done, total: calls.append((what, done, total)))
    traced = [call for call in calls if call[0].startswith("tracing")]
    assert traced[-1][1] == traced[-1][2] == 2  # the two DDP presets share one trace
    assert [done for _, done, _ in traced] == sorted(done for _, done, _ in traced)


# --- check --model ----------------------------------------------------------------------------------------------


def _check(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["check", *argv, "--json"]) in (0, 1)
    data: dict[str, Any] = json.loads(capsys.readouterr().out)
    return data


def test_check_model_without_gpu_memory_or_for_a_lightning_strategy_is_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    job = ("--accelerator", "cuda", "--gpus", "2", "--devices", "2", "--model", TINY)
    report = _check(capsys, "--strategy", "fsdp2", *job)
    assert report["valid"]
    assert [finding["code"] for finding in report["findings"]] == []
    assert any("no --gpu-memory" in note for note in report["notes"])
    report = _check(capsys, "--strategy", "ddp", *job, "--gpu-memory", "1KiB")  # Lightning's own: not planned
    assert not [finding for finding in report["findings"] if finding["code"].startswith("LP73")]
    assert any("not DDPStrategy" in note for note in report["notes"])
    assert report["request"]["model"] == TINY


def no_configure_model() -> Any:
    from lightning.pytorch import LightningModule

    from lightning_presets.tools.plan.reference_models import Decoder

    class Plain(LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy
        def __init__(self) -> None:
            super().__init__()
            self.model = Decoder(64, 32, 4, 2)
            self.example_input_array = torch.zeros(4, 16, dtype=torch.long)

        def forward(self, tokens: torch.Tensor) -> Any:
            return self.model(tokens)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters())

    return Plain()


def test_tensor_parallel_needs_a_configure_model() -> None:
    request = PlanRequest(model=f"{__name__}:no_configure_model", gpus_per_node=2, presets=("tp2d_hybrid", "fsdp2"))
    estimates, _ = plan_worker.plan_in_process(request)
    by_name = {each.preset: each for each in estimates}
    assert not by_name["tp2d_hybrid"].applicable
    assert any("LP208" in why for why in by_name["tp2d_hybrid"].why)
    assert by_name["fsdp2"].fits  # the preset shards it itself
