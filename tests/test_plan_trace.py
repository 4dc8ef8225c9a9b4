"""``plan --model``: the traced plan against a real ``Trainer.fit`` measured at the allocator, the step as
Lightning runs it, untraceable models, the batch search, a user's factory run safely, and the progress display.

The real run is ``tests/scripts/plan_fit_run.py``: ``Trainer(strategy=PRESET, devices=2)`` on 2 gloo processes,
its memory measured independently of the planner and of torch's memory trackers (``torch.profiler``'s
allocation events for the peak, storage accounting for the model states, ``saved_tensors_hooks`` for the
activations). The full comparison (seven models, four presets) is ``benchmarks/bench_plan_accuracy.py``;
this is its sample in CI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import re
import sys
from typing import Any

import pytest
import torch
from torch import nn

from harness import run_job
from helpers import SCRIPTS, run
from lightning_presets.cli import _output, main
from lightning_presets.registry.catalog import strategy_catalog
from lightning_presets.tools.plan import layouts as memory
from lightning_presets.tools.plan import trace
from lightning_presets.tools.plan import worker as plan_worker
from lightning_presets.tools.plan.estimates import Estimate, PlanRequest, traced_estimate
from lightning_presets.tools.simulation import user_model, world

INIT_READS_VALUES = torch.__version__ >= (2, 8)
"""Whether torch's ``trunc_normal_`` reads a value from a tensor (it loops on ``.any()``): not on torch 2.7."""

TINY = "lightning_presets.tools.plan.reference_models:decoder_tiny"
VALIDATED = ("fsdp2", "fsdp2_offload_ckpt", "ddp_static_graph", "tp2d_hybrid")
TOLERANCE = 0.10
SAMPLE = ("hf_models:llama_lazy", ("fsdp2", "ddp_static_graph"))
"""The accuracy sample run in CI: a Llama built in ``configure_model``, under sharding and a replica."""


def _fit(model: str, preset: str) -> dict[str, Any]:
    """One real ``Trainer.fit`` (2 gloo processes, 2 steps), rank 0's memory."""
    done = run_job(SCRIPTS / "plan_fit_run.py", "--model", model, "--preset", preset, "--steps", "2",
                   "--precision", "32-true", timeout=600, cwd=SCRIPTS)  # fmt: skip
    lines = [line for line in done.stdout.splitlines() if line.startswith("FIT_MEMORY ")]
    assert done.returncode == 0, done.describe()
    assert lines, done.describe()
    result: dict[str, Any] = json.loads(lines[0].removeprefix("FIT_MEMORY "))
    return result


@pytest.fixture(scope="module")
def sample_plan(monkeypatch_module: pytest.MonkeyPatch) -> dict[str, Estimate]:
    monkeypatch_module.syspath_prepend(str(SCRIPTS))
    model, presets = SAMPLE
    request = PlanRequest(model=model, gpus_per_node=2, precision="32-true", presets=presets, kernels="cpu")
    estimates, _ = plan_worker.plan_in_process(request)
    return {each.preset: each for each in estimates}


@pytest.fixture(scope="module")
def monkeypatch_module() -> Any:
    with pytest.MonkeyPatch.context() as patch:
        yield patch


@pytest.mark.distributed
@pytest.mark.parametrize("preset", SAMPLE[1])
def test_planned_peak_and_categories_match_a_real_fit_at_the_allocator(
    sample_plan: dict[str, Estimate], preset: str
) -> None:
    real = _fit(SAMPLE[0], preset)
    estimate = sample_plan[preset]
    assert estimate.evidence == "traced"
    planned = {"parameters": estimate.parameters, "gradients": estimate.gradients, "optimizer": estimate.optimizer,
               "activations": estimate.activations, "peak": estimate.rank_peak}  # fmt: skip
    for category, figure in planned.items():
        assert real[category] > 0
        assert figure is not None
        assert abs(figure - real[category]) <= TOLERANCE * real[category], (category, figure, real[category])
    assert real["steps"][0][1] < real["peak"]  # the first step (no optimizer state, no old gradients) peaks lower


def test_configure_model_layers_are_counted_under_every_preset(sample_plan: dict[str, Estimate]) -> None:
    """The Llama of the sample has no parameter before ``configure_model``: FSDP1 and DeepSpeed count it too."""
    request = PlanRequest(model=SAMPLE[0], gpus_per_node=2, presets=("fsdp_grad_op", "deepspeed_zero2_offload"))
    estimates, parameters = plan_worker.plan_in_process(request)
    assert parameters == 3_164_416
    for each in estimates:
        assert each.evidence == "arithmetic + traced activations"
        assert each.parameters > 0, each
        assert each.cpu_bytes_per_node + each.gradients > 0, each
    replica = sample_plan["ddp_static_graph"]
    assert 4 * parameters <= replica.parameters < 4 * parameters + 1024  # fp32, whole (and the rotary buffer)


def test_offloaded_state_is_counted_in_cpu_memory() -> None:
    request = PlanRequest(model=TINY, gpus_per_node=2, precision="32-true", presets=("fsdp2_offload_ckpt",))
    (estimate,), _ = plan_worker.plan_in_process(request)
    assert (estimate.parameters, estimate.gradients, estimate.optimizer) == (0, 0, 0)  # none on the GPU
    assert estimate.offloaded_per_gpu == sum(estimate.offloaded) > 0
    assert estimate.cpu_bytes_per_node == 2 * estimate.offloaded_per_gpu  # two GPUs per node
    assert estimate.rank_peak is not None
    assert estimate.total_peak < estimate.rank_peak  # the GPU side leaves the offloaded state out


def test_sharding_divides_the_states_the_replica_holds() -> None:
    request = PlanRequest(model=TINY, gpus_per_node=2, precision="32-true", presets=("ddp_static_graph", "fsdp2"))
    estimates, _ = plan_worker.plan_in_process(request)
    replica, sharded = sorted(estimates, key=lambda each: each.preset)
    numel = 29_312  # decoder_tiny
    assert replica.parameters == replica.gradients == numel * 4  # fp32, whole
    assert replica.optimizer >= 2 * numel * 4  # AdamW: two moments (+ step counters)
    assert sharded.parameters == numel * 4 // 2  # 2 ranks, even dimensions: no padding


def _close(planned: float, real: float) -> bool:
    return abs(planned - real) <= TOLERANCE * real


# --- activations: the bytes a real forward saves for backward ------------------------------------------------


def _real_saved_bytes(model: Any, tokens: torch.Tensor, autocast: torch.dtype | None) -> int:
    """Distinct storages saved for backward in a real ``training_step`` under Lightning's autocast
    (``cache_enabled=False``), parameters excluded (told apart by address)."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    found: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            found[storage.data_ptr()] = storage.nbytes()
        return tensor

    precision = torch.autocast("cpu", dtype=autocast, cache_enabled=False) if autocast else contextlib.nullcontext()
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor), precision:
        model.training_step(tokens, 0)
    return sum(found.values())


@pytest.mark.parametrize(("precision", "checkpoint"), [("32-true", False), ("bf16-mixed", False), ("32-true", True)])
def test_traced_activations_equal_what_a_real_forward_saves(precision: str, checkpoint: bool) -> None:
    layout = memory.layout_of(strategy_catalog().presets["ddp_static_graph"])
    assert layout is not None
    layout = dataclasses.replace(layout, checkpoint=checkpoint)
    factory = user_model.load_factory(TINY)
    with world.fake_world(1):
        traced = trace.trace(factory, TINY, layout, precision=precision, optimize=False, kernels="cpu")
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
    with world.fake_world(1):
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
    fitting = [each for each in data["presets"] if each["fits"]]
    fastest = max(fitting, key=lambda each: float(f"{each['throughput']['tokens_per_s_per_gpu']:.3g}"))
    assert data["recommended"] == fastest["preset"] == fitting[0]["preset"]  # the fastest that fits, listed first
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


# --- the step Lightning runs ---------------------------------------------------------------------------------


class _Recording(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(64, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        SEEN.append((torch.is_autocast_enabled("cpu"), torch.is_autocast_cache_enabled()))
        out: torch.Tensor = self.linear(x)
        return out


SEEN: list[tuple[bool, bool]] = []
GRADIENTS_ALIVE: list[bool] = []


def recording_module() -> Any:
    """A LightningModule whose training_step keeps an extra fp32 copy of its logits, and records the autocast."""
    from lightning.pytorch import LightningModule

    class Recording(LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.inner = _Recording()
            self.example_input_array = torch.zeros(32, 64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            out: torch.Tensor = self.inner(x)
            return out

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            optimized = [p for group in self.optimizer.param_groups for p in group["params"]]  # FSDP2: the shards
            GRADIENTS_ALIVE.append(all(p.grad is not None for p in optimized))
            logits = self(batch).float()
            return torch.nn.functional.log_softmax(logits * 2.0, dim=-1).mean()  # saves more than a sum would

        def configure_optimizers(self) -> torch.optim.Optimizer:
            self.optimizer = torch.optim.AdamW(self.parameters(), lr=1e-3, foreach=False)
            return self.optimizer

    return Recording()


def plain_recording_module() -> nn.Module:
    """The same layer without a training_step: the plan steps on the sum of the outputs, and says so."""
    module = _Recording()
    module.example_input_array = torch.zeros(32, 64)  # type: ignore[assignment]
    return module


def test_the_step_is_training_step_under_lightnings_autocast_without_the_cast_cache() -> None:
    SEEN.clear()
    request = PlanRequest(model=f"{__name__}:recording_module", gpus_per_node=2, presets=("ddp_static_graph",))
    (estimate,), _ = plan_worker.plan_in_process(request)
    assert SEEN
    assert all(seen == (True, False) for seen in SEEN)  # bf16-mixed: autocast, cache_enabled=False
    assert any("Recording.training_step(example_input_array, 0)" in line for line in estimate.step)
    assert any("cache_enabled=False" in line for line in estimate.step)
    assert any("AdamW(lr=0.001" in line and "foreach=False" in line for line in estimate.step)  # its own settings
    plain = PlanRequest(model=f"{__name__}:plain_recording_module", gpus_per_node=2, presets=("ddp_static_graph",))
    (summed,), _ = plan_worker.plan_in_process(plain)
    assert any("sum of the outputs" in line and "not a LightningModule" in line for line in summed.step)
    assert estimate.activations is not None
    assert summed.activations is not None
    assert estimate.activations > summed.activations  # the module's own loss keeps its log-softmax


def test_the_previous_steps_gradients_are_alive_during_the_forward() -> None:
    """Lightning zeroes the gradients after the step function: the forward runs beside the old gradients (under
    FSDP2, which frees them with ``set_to_none``), and the plan's peak holds both."""
    GRADIENTS_ALIVE.clear()
    request = PlanRequest(model=f"{__name__}:recording_module", gpus_per_node=2, presets=("fsdp2",))
    (estimate,), _ = plan_worker.plan_in_process(request)
    assert GRADIENTS_ALIVE == [True]
    assert estimate.activations is not None
    assert estimate.total_peak >= estimate.parameters + estimate.gradients + estimate.optimizer + estimate.activations


def attention_with_dropout() -> Any:
    """A GPT-2-style attention with dropout 0.1, the case where CPU's kernel choice (math) differs from CUDA's."""
    from lightning.pytorch import LightningModule

    class Attention(LightningModule):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__()
            self.qkv = nn.Linear(64, 192)
            self.example_input_array = torch.zeros(4, 256, 64)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            q, k, v = (each.view(4, 256, 4, 16).transpose(1, 2) for each in self.qkv(batch).chunk(3, dim=-1))
            out = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=0.1, is_causal=True)
            return out.float().pow(2).mean()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    return Attention()


def test_attention_is_planned_for_cudas_kernel_and_says_so() -> None:
    def planned(kernels: str) -> Estimate:
        request = PlanRequest(model=f"{__name__}:attention_with_dropout", gpus_per_node=2, kernels=kernels,
                              presets=("ddp_static_graph",))  # fmt: skip
        (estimate,), _ = plan_worker.plan_in_process(request)
        return estimate

    cuda, cpu = planned("cuda"), planned("cpu")
    assert cuda.activations is not None
    assert cpu.activations is not None
    matrix = 4 * 4 * 256 * 256 * 2  # one bf16 attention matrix: batch × heads × length²
    assert cpu.activations - cuda.activations >= matrix  # the math path keeps attention matrices, flash does not
    assert any("FlashAttention-2" in line for line in cuda.step)
    assert not any("FlashAttention-2" in line for line in cpu.step)


def test_cuda_attention_runs_again_when_checkpointed_blocks_are_recomputed() -> None:
    request = PlanRequest(model="hf_models:llama", gpus_per_node=2, presets=("fsdp2_offload_ckpt",))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SCRIPTS))
        (estimate,), _ = plan_worker.plan_in_process(request)
    assert estimate.evidence == "traced", estimate.why


def compiled_module() -> nn.Module:
    module = torch.compile(plain_recording_module())
    module.example_input_array = torch.zeros(32, 64)  # type: ignore[assignment]
    return module  # type: ignore[return-value]


def test_a_compiled_module_is_an_eager_estimate() -> None:
    request = PlanRequest(model=f"{__name__}:compiled_module", gpus_per_node=2, presets=("ddp_static_graph",))
    (estimate,), _ = plan_worker.plan_in_process(request)
    assert estimate.evidence == "traced"
    assert any("torch.compile" in why for why in estimate.why)
    plan_text = PlanRequest(model=f"{__name__}:plain_recording_module", gpus_per_node=2, presets=("fsdp2",))
    (eager,), _ = plan_worker.plan_in_process(plan_text)
    assert not any("eager estimate" in line for line in eager.step)


def compiled_inside() -> nn.Module:
    module = plain_recording_module()
    module.linear = torch.compile(module.linear)  # type: ignore[assignment]
    return module


def test_a_module_compiled_inside_is_marked_eager_estimate() -> None:
    request = PlanRequest(model=f"{__name__}:compiled_inside", gpus_per_node=2, presets=("ddp_static_graph",))
    (estimate,), _ = plan_worker.plan_in_process(request)
    assert any(line.startswith("eager estimate: 1 torch.compile'd module") for line in estimate.step)


# --- what fake tensors cannot trace ---------------------------------------------------------------------------


class _Branching(nn.Module):
    def __init__(self, kind: str) -> None:
        super().__init__()
        self.linear, self.kind = nn.Linear(8, 8), kind
        self.example_input_array = torch.zeros(4, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h: torch.Tensor = self.linear(x)
        if self.kind == "branch":
            if h.mean() > 0:  # the user's data-dependent line
                h = h * 2
        elif self.kind == "nonzero":
            h = h[h > 0]  # a boolean mask: its size depends on the values
        return h


def branching() -> nn.Module:
    return _Branching("branch")


def masking() -> nn.Module:
    return _Branching("nonzero")


class _TruncNormal(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(64, 64))
        nn.init.trunc_normal_(self.weight, std=0.02)  # loops on .any() until no sample is out of range
        self.example_input_array = torch.zeros(4, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight


@pytest.mark.parametrize(("factory", "what", "line"), [
    ("branching", "reads a Python value from a tensor", "if h.mean() > 0:"),
    ("masking", "calls nonzero", "h = h[h > 0]"),
])  # fmt: skip
def test_an_untraceable_step_names_the_operation_and_the_line(
    factory: str, what: str, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    request = PlanRequest(model=f"{__name__}:{factory}", gpus_per_node=2, presets=("ddp_static_graph", "fsdp2"))
    with pytest.raises(plan_worker.PlanFailed) as failed:
        plan_worker.plan_in_process(request)
    message = str(failed.value)
    assert "cannot be traced" in message
    assert what in message
    assert re.search(r"test_plan_trace\.py:\d+: " + re.escape(line), message), message
    for command in (["plan", "--model", f"{__name__}:{factory}", "--gpus", "2"],
                    ["check", "--strategy", "fsdp2", "--accelerator", "cuda", "--devices", "2", "--gpus", "2",
                     "--gpu-memory", "80GiB", "--model", f"{__name__}:{factory}"]):  # fmt: skip
        with pytest.raises(SystemExit) as exited:
            main(command)
        assert exited.value.code == 2  # a usage error with that message: never a verdict from missing figures
        err = capsys.readouterr().err
        assert what in err
        assert "Traceback" not in err


def test_an_initialiser_that_reads_values_does_not_stop_the_plan() -> None:
    request = PlanRequest(model=f"{__name__}:_TruncNormal", gpus_per_node=2, presets=("ddp_static_graph",))
    (estimate,), parameters = plan_worker.plan_in_process(request)
    assert parameters == 64 * 64
    assert estimate.evidence == "traced"
    noted = any("answered with 0" in why and "test_plan_trace.py" in why for why in estimate.why)
    assert noted == INIT_READS_VALUES, estimate.why  # where torch's initialiser reads no value, nothing to note


@pytest.mark.parametrize("model", ["vit", "mixtral"])
def test_transformers_vision_and_mixture_of_experts_models_plan(model: str) -> None:
    """ViT initialises with trunc_normal_; Mixtral's experts call torch._grouped_mm with fp32 weights."""
    request = PlanRequest(model=f"hf_models:{model}", gpus_per_node=2, presets=("fsdp2",))
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(SCRIPTS))
        (estimate,), _ = plan_worker.plan_in_process(request)
    assert estimate.evidence == "traced", estimate.why
    assert estimate.activations
