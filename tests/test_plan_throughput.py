"""``plan``'s step time: the traced FLOPs and collectives against their closed forms, the roofline and overlap
model, the GPU table, the calibration row, and the CLI's speed columns and what-if flags.

The traces run in this process under a fake process group (no child: ``trace.trace`` in ``world.fake_world``),
on ``llama_tiny`` (2 blocks of width 128, 16 heads, 8 key-value heads): a few seconds each.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from helpers import run
from lightning_presets.tools.plan import calibration, hardware, planner, throughput, trace, worker
from lightning_presets.tools.plan.counts import Collective, OpCost, StepCounts
from lightning_presets.tools.plan.presets import mesh_sizes, plannable
from lightning_presets.tools.plan.request import PlanRequest
from lightning_presets.tools.simulation import user_model, world

TINY = "lightning_presets.tools.plan.reference_models:llama_tiny"
VOCAB, DIM, HEADS, HEAD_DIM, HIDDEN, KV, LAYERS, SEQ, BATCH = 256, 128, 16, 8, 320, 8, 2, 32, 2
TOKENS = BATCH * SEQ


def _matmul_params() -> int:
    """N of 6·N·T: every weight a matmul multiplies (the blocks' projections and the output head; the embedding
    is a lookup, the norms elementwise)."""
    block = DIM * DIM * 2 + DIM * KV * HEAD_DIM * 2 + 3 * DIM * HIDDEN
    return LAYERS * block + DIM * VOCAB


def _expected_flops(tensor_parallel: int = 1) -> int:
    """``6·N·T + 12·L·h·d_h·S·T``; under tensor parallelism the blocks' share is split, the head is not."""
    head = DIM * VOCAB
    blocks = _matmul_params() - head
    attention = 12 * LAYERS * HEADS * HEAD_DIM * SEQ * TOKENS
    return 6 * (blocks // tensor_parallel + head) * TOKENS + attention // tensor_parallel


def _trace(preset: str, *, gpus: int = 2, nodes: int = 1, checkpoint: bool | None = None,
           kernels: str = "cuda") -> trace.Traced:  # fmt: skip
    request = PlanRequest(model=TINY, gpus_per_node=gpus, num_nodes=nodes, presets=(preset,))
    factory = user_model.load_factory(TINY)
    with world.fake_world(request.world_size):
        found, layout = plannable(request)[0]
        if checkpoint is not None:
            layout = replace(layout, checkpoint=checkpoint)
        return trace.trace(factory, TINY, layout, precision="bf16-mixed", mesh_sizes=mesh_sizes(found, layout, request),
                           kernels=kernels, optimize=layout.traceable, gpus_per_node=gpus)  # fmt: skip


@pytest.fixture(scope="module")
def fsdp2_plain() -> trace.Traced:
    return _trace("fsdp2", checkpoint=False)


@pytest.fixture(scope="module")
def fsdp2_checkpointed() -> trace.Traced:
    return _trace("fsdp2", checkpoint=True)


# --- exact parts ------------------------------------------------------------------------------------------------


def test_flops_of_a_llama_equal_the_closed_form(fsdp2_plain: trace.Traced) -> None:
    counts = fsdp2_plain.counts
    assert counts.tokens == TOKENS
    assert counts.flops == pytest.approx(_expected_flops(), rel=0.02)
    assert counts.phase_flops("backward") == 2 * counts.phase_flops("forward")
    assert counts.phase_flops("optimizer") == 0  # AdamW is elementwise: bytes, no FLOPs


def test_cpu_attention_kernel_is_counted() -> None:
    """On CPU, SDPA runs ``_scaled_dot_product_flash_attention_for_cpu``: torch's counter has no formula for it."""
    counts = _trace("ddp_static_graph", kernels="cpu").counts
    names = {op.name for op in counts.ops if op.flops}
    assert "_scaled_dot_product_flash_attention_for_cpu" in names
    assert counts.flops == pytest.approx(_expected_flops(), rel=0.02)


def test_checkpointing_adds_the_recomputed_forward(fsdp2_plain: trace.Traced, fsdp2_checkpointed: trace.Traced) -> None:
    """Full checkpointing recomputes each block's forward in backward, exactly: the blocks' forward FLOPs (the head
    is outside the blocks) but the last matmul's, ``w2``: torch's checkpoint stops recomputing once every tensor
    backward needs exists again, and backward needs ``w2``'s input, not its output."""
    plain, checkpointed = fsdp2_plain.counts, fsdp2_checkpointed.counts
    head_forward = 2 * DIM * VOCAB * TOKENS
    w2_forward = LAYERS * 2 * HIDDEN * DIM * TOKENS
    recomputed = plain.phase_flops("forward") - head_forward - w2_forward
    assert checkpointed.phase_flops("forward") == plain.phase_flops("forward")
    assert checkpointed.flops - plain.flops == recomputed
    assert sum(op.flops for op in calibration.recomputed(plain, checkpointed)) == recomputed


def test_fsdp2_collectives_move_the_parameters_and_gradients(fsdp2_plain: trace.Traced) -> None:
    """fp32 shards (bf16-mixed autocasts over fp32 weights): every unit gathered in forward and again in backward,
    every gradient reduce-scattered once."""
    counts = fsdp2_plain.counts
    params = fsdp2_plain.facts.numel
    gathered = {c.phase: c.bytes for c in counts.collectives if c.kind == "all_gather"}
    assert gathered == {"forward": 4 * params, "backward": 4 * params}
    assert counts.collective_bytes("reduce_scatter") == 4 * params
    assert {(c.group_size, c.crosses_nodes, c.overlaps) for c in counts.collectives} == {(2, False, True)}


def test_tensor_parallel_counts_what_a_rank_computes() -> None:
    """Under DTensor the matmuls reach the counter at global shape first (declined) and as local operators;
    DTensor's sharding propagation runs them again in a fake mode of its own (skipped)."""
    traced = _trace("tp2d_hybrid", gpus=8, nodes=2)
    counts = traced.counts
    assert counts.flops == _expected_flops(tensor_parallel=8)
    tp = [c for c in counts.collectives if c.kind == "all_reduce"]
    dp = [c for c in counts.collectives if c.kind in ("all_gather", "reduce_scatter")]
    assert tp
    assert all(c.group_size == 8 and not c.crosses_nodes and not c.overlaps for c in tp)
    assert dp
    assert all(c.group_size == 2 and c.crosses_nodes and c.overlaps for c in dp)


# --- the model --------------------------------------------------------------------------------------------------


def _cluster(name: str = "H100-SXM", nodes: int = 1, **links: float) -> hardware.Cluster:
    return hardware.cluster(name, 8, nodes, **links)


def test_ring_collectives_cross_the_level_they_span() -> None:
    cal = replace(calibration.CALIBRATION, link_efficiency=1.0, latency_s=0.0)
    gather = Collective("all_gather", 8, False, 8 * 10**9, 1, "forward")
    assert throughput.collective_seconds(gather, _cluster(), cal) == pytest.approx(7e9 / 450e9)
    across = replace(gather, crosses_nodes=True)  # one rank on each of 8 nodes (a hybrid mesh's replicas): one port
    assert throughput.collective_seconds(across, _cluster(nodes=8), cal) == pytest.approx(7e9 / 50e9)
    reduce = replace(gather, kind="all_reduce")
    assert throughput.collective_seconds(reduce, _cluster(), cal) == pytest.approx(2 * 7e9 / 450e9)
    faster = _cluster(nodes=8, nvlink_gbps=900, inter_node_gbps=100)
    assert throughput.collective_seconds(gather, faster, cal) == pytest.approx(7e9 / 900e9)
    assert throughput.collective_seconds(across, faster, cal) == pytest.approx(7e9 / 100e9)


def test_a_group_of_whole_nodes_crosses_the_network_on_every_port_of_the_node() -> None:
    """NCCL's rings cross each node boundary once per ring and spread its channels over the node's ports: 64 ranks on 8
    nodes of 8 move each rank's bytes at the slower of NVLink and 8 ports (llm-foundry's 13B on 64 H100s runs at
    its 8-GPU rate; one port per GPU would make its FSDP collectives take four times its compute)."""
    cal = replace(calibration.CALIBRATION, link_efficiency=1.0, latency_s=0.0)
    world = Collective("all_gather", 64, True, 64 * 10**9, 1, "forward")
    assert throughput.collective_seconds(world, _cluster(nodes=8), cal) == pytest.approx(63e9 / (8 * 50e9))
    fast_network = _cluster(nodes=8, inter_node_gbps=400)
    assert throughput.collective_seconds(world, fast_network, cal) == pytest.approx(63e9 / 450e9)  # NVLink bounds it


def _steps(flops: float, comm: float, *, overlaps: bool = True, pointwise_bytes: int = 0) -> StepCounts:
    ops = [OpCost("mm", "forward", "bfloat16", 1, int(flops / 3), 0, False, 0),
           OpCost("mm", "backward", "bfloat16", 1, int(2 * flops / 3), 0, False, 0)]  # fmt: skip
    if pointwise_bytes:
        ops.append(OpCost("add", "forward", "bfloat16", 1, 0, pointwise_bytes, True, pointwise_bytes // 3))
    comms = (Collective("all_gather", 8, False, int(comm), 10, "backward", overlaps),)
    return StepCounts(ops=tuple(ops), collectives=comms, tokens=1000)


def test_overlapped_communication_hides_behind_compute_blocking_does_not() -> None:
    cluster = _cluster()
    small = throughput.estimate(_steps(1e14, 1e9), cluster, samples=1)
    assert small.exposed_comm_s < 0.2 * (small.step_time_s - small.compute_s + small.exposed_comm_s + 1e-9) + 1e-3
    blocking = throughput.estimate(_steps(1e14, 1e9, overlaps=False), cluster, samples=1)
    assert blocking.exposed_comm_s > small.exposed_comm_s
    assert blocking.step_time_s == pytest.approx(blocking.compute_s + blocking.exposed_comm_s)
    huge = throughput.estimate(_steps(1e12, 1e12), cluster, samples=1)
    assert (
        huge.exposed_comm_s
        > 0.9 * throughput.collective_seconds(_steps(1e12, 1e12).collectives[0], cluster, calibration.CALIBRATION)
        - huge.compute_s
    )


def test_compile_fuses_pointwise_bytes_only() -> None:
    steps = _steps(1e12, 1e6, pointwise_bytes=10**11)
    eager = throughput.estimate(steps, _cluster(), samples=1)
    compiled = throughput.estimate(steps, _cluster(), samples=1, compile=True)
    assert compiled.compute_s < eager.compute_s
    assert compiled.flops_per_step == eager.flops_per_step
    assert compiled.comm_bytes_per_step == eager.comm_bytes_per_step


def test_offload_adds_the_cpu_optimizer_step() -> None:
    steps = _steps(1e14, 1e9)
    plain = throughput.estimate(steps, _cluster(), samples=1)
    offloaded = throughput.estimate(steps, _cluster(), samples=1,
                                    offload=throughput.Offload(to_gpu=1e9, to_cpu=1e9,
                                                               optimizer_bytes=28e9))  # fmt: skip
    assert offloaded.offload_s >= 28e9 / (calibration.CALIBRATION.cpu_bandwidth / 8)
    assert offloaded.step_time_s > plain.step_time_s
    wider = (offloaded.high - offloaded.low) / offloaded.rate > (plain.high - plain.low) / plain.rate
    assert wider  # an assumed CPU bandwidth: a wider range


def test_a_faster_gpu_is_faster_and_an_uncalibrated_one_says_so() -> None:
    steps = _steps(1e15, 1e9)
    h100 = throughput.estimate(steps, _cluster("H100-SXM"), samples=1)
    b200 = throughput.estimate(steps, _cluster("B200"), samples=1)
    assert b200.step_time_s < h100.step_time_s
    assert not any("not calibrated" in note for note in h100.notes)
    assert any("B200: not calibrated on this GPU type" in note for note in b200.notes)
    assert b200.high / b200.rate - 1 > h100.high / h100.rate - 1


def test_gpu_table_covers_the_required_types_with_sources() -> None:
    required = {"A100-40GB", "A100-80GB", "H100-SXM", "H100-PCIe", "H200", "B200", "L40S", "MI300X"}
    assert required <= set(hardware.GPUS)
    for gpu in hardware.GPUS.values():
        assert gpu.source.startswith("https://")
        assert {"bf16", "fp16", "fp32"} <= set(gpu.peak_flops)
        assert gpu.memory_bytes > 0
        assert gpu.memory_bandwidth > 0
        assert gpu.in_node_bandwidth > 0
    assert "fp8" not in hardware.GPUS["A100-80GB"].peak_flops  # no FP8 tensor cores on Ampere
    assert hardware.GPUS["H100-SXM"].peak_flops["bf16"] == 989.5e12  # dense, not the 1,979 with sparsity


def test_the_fastest_fitting_preset_comes_first_and_the_old_order_breaks_ties() -> None:
    from lightning_presets.tools.plan.estimates import Estimate

    def make(name: str, rank: int, rate: float | None, fits: bool = True) -> Estimate:
        speed = None if rate is None else throughput.Throughput(
            step_time_s=1.0, tokens_per_s_per_gpu=rate, samples_per_s=None, mfu=0.0, flops_per_step=0,
            comm_bytes_per_step=0, compute_s=1.0, exposed_comm_s=0.0, offload_s=0.0, low=rate, high=rate)  # fmt: skip
        return Estimate(preset=name, rank=(rank, 0, 0), summary="", applicable=True, fits=fits, evidence="traced",
                        parameters=0, gradients=0, optimizer=0, activations=0, total_peak=0, usable_gpu_bytes=1,
                        throughput=speed)  # fmt: skip

    ordered = planner.order([make("ddp", 0, 1000.0), make("fsdp2", 3, 3000.0), make("tp", 4, 3000.4),
                             make("big", 0, 9000.0, fits=False), make("offload", 6, None)])  # fmt: skip
    assert [each.preset for each in ordered] == ["fsdp2", "tp", "ddp", "offload", "big"]


# --- the calibration rows ---------------------------------------------------------------------------------------

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
CACHE = RESULTS / "throughput_counts.json"
PUBLISHED_COUNTS = RESULTS / "plan_published_counts.json"


@pytest.mark.skipif(not PUBLISHED_COUNTS.exists(), reason="bench_plan_published.py --calibrate: no cached trace")
@pytest.mark.parametrize("generation", sorted(calibration.CALIBRATED_ROWS))
def test_each_generations_efficiency_reproduces_its_calibration_row(generation: str) -> None:
    """Each generation's efficiency is what ``bench_plan_published.py --calibrate`` fits: its row (llm-foundry's MPT-7B
    on 8 GPUs of that generation) comes back within 1 % from the cached trace counts, and the other generation's
    efficiency would miss it by more than 10 % (one constant for both was the defect)."""
    row_id, published = calibration.CALIBRATED_ROWS[generation]
    spec = json.loads((RESULTS.parent / "published_runs.json").read_text())
    row = next(each for each in spec["rows"] if each["id"] == row_id)
    cached = json.loads(PUBLISHED_COUNTS.read_text())[f"{row['model']}:{row['micro_batch']}"]
    counts = StepCounts.from_dict(cached["counts"])
    cluster = hardware.cluster(row["gpu_type"], 8, 1)
    assert cluster.gpu.generation == generation
    estimate = throughput.estimate(counts, cluster, samples=int(cached["batch"]))
    assert estimate.rate == pytest.approx(published, rel=0.01)
    cal = calibration.CALIBRATION
    other = next(name for name in calibration.CALIBRATED_ROWS if name != generation)
    swapped = cal.with_efficiency(generation, cal.matmul_efficiency if other == "hopper" else
                                  cal.generation_efficiency[other])  # fmt: skip
    assert abs(throughput.estimate(counts, cluster, samples=1, calibration=swapped).rate / published - 1) > 0.1


def test_a_generation_without_a_row_scales_hoppers_efficiency_by_the_measured_matmul_ceilings() -> None:
    cal = calibration.CALIBRATION
    b200, h200, l40s = (hardware.GPUS[name] for name in ("B200", "H200", "L40S"))
    assert cal.efficiency(b200) == pytest.approx(cal.matmul_efficiency * 0.776 / 0.803)
    assert cal.efficiency(h200) == cal.matmul_efficiency  # Hopper: fitted on an H100
    assert cal.efficiency(l40s) == cal.matmul_efficiency  # no measured ceiling: Hopper's, range widened
    assert cal.efficiency(hardware.GPUS["A100-40GB"]) == cal.generation_efficiency["ampere"]


@pytest.mark.skipif(not CACHE.exists(), reason="benchmarks/bench_throughput.py has not cached its traces")
def test_torchtitans_held_out_row_is_within_the_judged_error() -> None:
    """torchtitan's Llama 3.1 8B on 8 H100s (5,762 tokens/s/GPU), not fitted on, within ``judged_error``."""
    cache: dict[str, Any] = json.loads(CACHE.read_text())
    plain, full = (StepCounts.from_dict(cache[key]["counts"]) for key in ("1:0", "1:1"))
    steps = calibration.with_ops(plain, calibration.selective_recompute(calibration.recomputed(plain, full)))
    cluster = hardware.cluster(hardware.CALIBRATION_GPU.name, 8, 1, 50)
    estimate = throughput.estimate(steps, cluster, samples=int(cache["1:0"]["batch"]))
    assert estimate.rate == pytest.approx(calibration.MEASURED_TOKENS_PER_S, rel=calibration.CALIBRATION.judged_error)


# --- the command --------------------------------------------------------------------------------------------------


def test_cli_gives_the_throughput_of_each_preset_and_the_what_ifs(capsys: pytest.CaptureFixture[str]) -> None:
    """The command's JSON throughput (traced in a child process, as the command does), the table's columns
    (rendered from the same plan), and the what-ifs."""
    from lightning_presets.cli._output import emit
    from lightning_presets.cli._plan import render
    from lightning_presets.tools.plan.estimates import Estimate

    argv = ("plan", "--model", TINY, "--gpus", "2", "--preset", "fsdp2", "--json")
    code, out = run(capsys, *argv)
    data = json.loads(out)
    base = data["presets"][0]
    assert code == 0
    speed = base["throughput"]
    assert set(speed) >= {"step_time_s", "tokens_per_s_per_gpu", "samples_per_s", "mfu", "flops_per_step",
                          "comm_bytes_per_step", "breakdown", "range"}  # fmt: skip
    assert set(speed["breakdown"]) == {"compute_s", "exposed_comm_s", "offload_s"}
    assert speed["range"][0] < speed["tokens_per_s_per_gpu"] < speed["range"][1]
    assert speed["flops_per_step"] == pytest.approx(_expected_flops(), rel=0.02)
    emit(render(planner.Plan(PlanRequest.from_dict(data["request"]), (Estimate.from_dict(base),))))
    table = capsys.readouterr().out
    assert "tokens/s/GPU" in table
    assert f"{speed['tokens_per_s_per_gpu']:,.0f}" in table
    assert "calibrated per GPU generation on one published run each" in table
    # the what-ifs in this process (the flags' parsing is the same request; a second child would cost seconds)
    request = replace(PlanRequest.from_dict(data["request"]), activation_checkpointing="full", compile=True,
                      gpu_type="B200", fp8="torchao")  # fmt: skip
    estimates, _ = worker.plan_in_process(request)
    what_if = estimates[0]
    assert what_if.throughput is not None
    assert what_if.throughput.flops_per_step > speed["flops_per_step"]  # the recomputed forward
    assert what_if.activations is not None
    assert what_if.activations < base["per_gpu_bytes"]["activations"]
    assert "what-if" in what_if.summary
    assert any("not calibrated" in note for note in what_if.throughput.notes)
    assert any("--compile" in note for note in what_if.throughput.notes)
    assert any("--fp8 torchao: modelled, not run" in note for note in what_if.throughput.notes)
    assert PlanRequest.from_dict(request.as_dict()).fp8 == "torchao"


@pytest.mark.parametrize("argv", [("--gpu-type", "V100"), ("--inter-node-bandwidth", "-1"),
                                  ("--nvlink-bandwidth", "fast")])  # fmt: skip
def test_cli_rejects_bad_hardware(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        run(capsys, "plan", "--params", "7B", "--gpus", "8", *argv)
    assert exited.value.code == 2


def test_gpu_type_sets_the_default_gpu_memory(capsys: pytest.CaptureFixture[str]) -> None:
    _code, out = run(capsys, "plan", "--params", "7B", "--gpus", "8", "--gpu-type", "H200", "--json")
    assert json.loads(out)["request"]["gpu_memory_bytes"] == 141 * 10**9
    assert json.loads(out)["request"]["gpu_type"] == "H200"


@pytest.mark.parametrize(
    ("device", "expected"),
    [("NVIDIA H100 80GB HBM3", "H100-SXM"), ("NVIDIA H100 PCIe", "H100-PCIe"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"),
     ("NVIDIA A100-SXM4-80GB", "A100-80GB"), ("NVIDIA H200", "H200"), ("NVIDIA B200", "B200"), ("NVIDIA L40S", "L40S"),
     ("AMD Instinct MI300X", "MI300X"), ("Tesla V100-SXM2-16GB", None)],
)  # fmt: skip
def test_gpu_type_from_the_drivers_device_name(device: str, expected: str | None) -> None:
    assert hardware.gpu_type_of(device) == expected


# --- fp8 --------------------------------------------------------------------------------------------------------


def test_fp8_runs_the_linear_matmuls_at_the_fp8_peak_plus_their_casts_where_the_gpu_has_fp8() -> None:
    steps = _steps(1e15, 1e6)
    bf16 = throughput.estimate(steps, _cluster(), samples=1)
    fp8 = throughput.estimate(steps, _cluster(), samples=1, fp8="torchao")
    assert fp8.step_time_s < bf16.step_time_s
    assert fp8.flops_per_step == bf16.flops_per_step
    assert any("--fp8 torchao: modelled, not run" in note for note in fp8.notes)
    converted = throughput.with_fp8(StepCounts(ops=(OpCost("mm", "forward", "bfloat16", 1, 10**12, 3 * 10**6, False,
                                                           3 * 10**6),)), "torchao", compile=False)  # fmt: skip
    matmul, cast = converted.ops
    assert matmul.dtype == "float8_e4m3fn"
    assert (cast.pointwise, cast.bytes) == (True, round(2.5 * 2 * 10**6))  # amax read + cast read + fp8 write
    ampere = throughput.estimate(steps, _cluster("A100-80GB"), samples=1, fp8="te")
    assert ampere.step_time_s == throughput.estimate(steps, _cluster("A100-80GB"), samples=1).step_time_s
    assert any("no fp8 tensor cores" in note for note in ampere.notes)


@pytest.mark.skipif(not CACHE.exists(), reason="benchmarks/bench_throughput.py has not cached its traces")
def test_torchtitans_float8_row_is_within_the_judged_error() -> None:
    """torchtitan's compiled Float8 Llama 3.1 8B on 8 H100s (8,532 tokens/s/GPU; 6,667 in bf16), not fitted on."""
    cache: dict[str, Any] = json.loads(CACHE.read_text())
    plain, full = (StepCounts.from_dict(cache[key]["counts"]) for key in ("1:0", "1:1"))
    steps = calibration.with_ops(plain, calibration.selective_recompute(calibration.recomputed(plain, full)))
    cluster = hardware.cluster(hardware.CALIBRATION_GPU.name, 8, 1, 50)
    estimate = throughput.estimate(steps, cluster, samples=2, compile=True, fp8="torchao")
    assert estimate.rate == pytest.approx(8532, rel=calibration.CALIBRATION.judged_error)
