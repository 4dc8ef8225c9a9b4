"""``plan --model`` of a deep model: 3 and 4 of its blocks traced, every figure extrapolated (``tools/plan/depth.py``),
judged against the full trace of the same model, and the structures it refuses (then the full model is traced)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch import nn

from lightning_presets.tools.plan import depth
from lightning_presets.tools.plan import worker as plan_worker
from lightning_presets.tools.plan.estimates import Estimate, PlanRequest
from lightning_presets.tools.plan.reference_models import Block, LlamaModule

LAYERS = 8
MEMORY = ("parameters", "gradients", "optimizer", "activations", "total_peak", "rank_peak", "cpu_bytes_per_node")


def deep_llama() -> LlamaModule:
    """A Llama of 8 layers of width 64 (8 heads, 8 key-value: tensor parallel over 8), 2 rows of 16 tokens."""
    return LlamaModule(vocab=128, dim=64, heads=8, kv_heads=8, hidden=96, layers=LAYERS, sequence=16, batch=2)


class _Uneven(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embedding = nn.Embedding(64, 32)
        self.layers = nn.ModuleList(Block(32, 4) for _ in range(12))
        self.layers[5].up = nn.Linear(32, 64)  # one block's MLP differs
        self.layers[5].down = nn.Linear(64, 32)
        self.example_input_array = torch.zeros(2, 8, dtype=torch.long)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for layer in self.layers:
            x = layer(x)
        return x


def uneven() -> nn.Module:
    return _Uneven()


def _plans(monkeypatch: pytest.MonkeyPatch, spec: str, **request: object) -> tuple[list[Estimate], list[Estimate]]:
    """(extrapolated, fully traced) plans of one request: the second as ``plan --full-trace`` asks for it."""
    plan = PlanRequest(model=spec, gpus_per_node=8, gpu_type="H100-SXM", **request)  # type: ignore[arg-type]
    monkeypatch.setattr(depth, "EXTRAPOLATE_FROM", LAYERS)
    extrapolated, _ = plan_worker.plan_in_process(plan)
    full, _ = plan_worker.plan_in_process(dataclasses.replace(plan, full_trace=True))
    return extrapolated, full


def _off(value: float | None, reference: float | None) -> float:
    if value == reference:
        return 0.0
    return abs((value or 0) - (reference or 0)) / max(abs(reference or 0), 1)


def test_extrapolated_plan_matches_the_full_trace_of_every_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    extrapolated, full = _plans(monkeypatch, f"{__name__}:deep_llama")
    assert [each.preset for each in extrapolated] == [each.preset for each in full]
    checked = 0
    for short, whole in zip(extrapolated, full, strict=True):
        assert whole.evidence in ("traced", "arithmetic + traced activations", "arithmetic"), whole.evidence
        if whole.evidence == "arithmetic":  # not applicable here (one node): nothing traced either way
            continue
        low, high = depth.TRACED_BLOCKS
        assert short.evidence == f"{whole.evidence}, {low} and {high} of {LAYERS} blocks extrapolated"
        if "traced" in whole.evidence:  # the full trace says why it did not extrapolate
            assert any("every block traced (not extrapolated: --full-trace)" in line for line in whole.why), whole.why
        for name in MEMORY:
            assert _off(getattr(short, name), getattr(whole, name)) <= 0.01, (short.preset, name)
        assert short.throughput is not None
        assert whole.throughput is not None
        assert _off(short.throughput.step_time_s, whole.throughput.step_time_s) <= 0.02, short.preset
        assert _off(short.throughput.flops_per_step, whole.throughput.flops_per_step) <= 0.01, short.preset
        assert _off(short.throughput.comm_bytes_per_step, whole.throughput.comm_bytes_per_step) <= 0.01, short.preset
        assert (short.fits, short.gpu_fits) == (whole.fits, whole.gpu_fits)
        checked += 1
    assert checked >= 8  # DDP (2), FSDP1 (2), FSDP2 (2), tensor parallel, DeepSpeed (2): all but hybrid sharding


def test_blocks_that_differ_are_traced_in_full(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(depth, "EXTRAPOLATE_FROM", 4)
    request = PlanRequest(model=f"{__name__}:uneven", gpus_per_node=2, presets=("ddp_static_graph",))
    (estimate,), _ = plan_worker.plan_in_process(request)
    assert estimate.evidence == "traced"
    assert any("every block traced (not extrapolated: the 12 Block blocks of layers differ" in line
               for line in estimate.why), estimate.why  # fmt: skip


def _llama(layers: int) -> LlamaModule:
    return LlamaModule(vocab=64, dim=32, heads=4, kv_heads=4, hidden=48, layers=layers, sequence=8, batch=1)


def test_repeated_stack_finds_the_layers_and_refuses_what_cannot_be_extrapolated() -> None:
    assert depth.repeated_stack(_llama(12)) == depth.Stack("model.layers", 12, "LlamaBlock")
    assert "differ" in str(depth.repeated_stack(_Uneven()))
    shared = _llama(12)
    shared.model.layers[1].w1.weight = shared.model.layers[0].w1.weight
    assert "share parameters" in str(depth.repeated_stack(shared))
    assert "no repeated blocks" in str(depth.repeated_stack(nn.Sequential(nn.Linear(2, 2))))
    setting = _llama(12)
    setting.model.layers[3].attention.heads = 2  # a setting the forward may read
    assert "differ" in str(depth.repeated_stack(setting))
    indexed = _llama(12)
    for index, layer in enumerate(indexed.model.layers):
        layer.layer_idx = index  # a layer index is not a difference
    assert isinstance(depth.repeated_stack(indexed), depth.Stack)


def test_truncate_keeps_the_first_blocks() -> None:
    model = _llama(12)
    stack = depth.repeated_stack(model)
    assert isinstance(stack, depth.Stack)
    first = model.model.layers[0]
    kept = depth.truncate(model, stack, 3)
    assert len(model.model.layers) == 3
    assert kept[0] is first
    with pytest.raises(depth.NotExtrapolable):
        depth.truncate(model, stack, 3)  # no longer the stack it was


def test_lines_through_two_traces() -> None:
    from lightning_presets.tools.plan.counts import Collective, OpCost, StepCounts

    small = StepCounts(ops=(OpCost("mm", "forward", "bfloat16", 3, 30, 300, False, 300, 7),
                            OpCost("_foreach_add", "optimizer", "float32", 1, 0, 40, True, 40, 1)),
                       collectives=(Collective("all_gather", 8, False, 800, 4, "forward"),), tokens=16)  # fmt: skip
    large = StepCounts(ops=(OpCost("mm", "forward", "bfloat16", 4, 40, 400, False, 400, 7),
                            OpCost("_foreach_add", "optimizer", "float32", 1, 0, 50, True, 50, 2)),
                       collectives=(Collective("all_gather", 8, False, 1000, 5, "forward"),), tokens=16)  # fmt: skip
    counts = depth.counts(small, large, 80)
    by_name = {op.name: op for op in counts.ops}
    assert (by_name["mm"].calls, by_name["mm"].flops, by_name["mm"].bytes) == (80, 800, 8000)
    assert (by_name["_foreach_add"].calls, by_name["_foreach_add"].bytes) == (1, 810)  # shapes differ: summed
    assert counts.collectives == (Collective("all_gather", 8, False, 16_200, 81, "forward"),)
    assert dataclasses.replace(counts, ops=()).tokens == 16


def test_a_shortened_model_that_does_not_add_up_is_refused() -> None:
    from lightning_presets.tools.plan import trace

    facts = trace.ModelFacts(numel=100, largest_layer=10, block_params=10, root_params=60, blocks=("B",))
    small = trace.Traced(parameters=1, gradients=1, optimizer=1, activations=1, peak=1, peak_all=1, transient_peak=1,
                         offloaded=False, batch=1, facts=facts)  # fmt: skip
    large = dataclasses.replace(small, facts=dataclasses.replace(facts, numel=110))
    with pytest.raises(depth.NotExtrapolable, match="not the model's 1,000"):
        depth.extrapolate(small, large, depth.Stack("layers", 12, "B"), 1_000)
