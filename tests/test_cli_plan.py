"""``lightning-presets plan --params``: the documented memory arithmetic, the preference order, JSON and exit codes.

The traced planner (``--model``) is tested in test_plan_trace.py.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest
import torch

from helpers import run
from lightning_presets.cli import main
from lightning_presets.core.findings import UsageError
from lightning_presets.tools import plan as _plan
from lightning_presets.tools.plan import GIB, PlanRequest, bytes_per_param, parse_count, plan


def by_name(result: _plan.Plan) -> dict[str, _plan.Estimate]:
    return {each.preset: each for each in result.estimates}


def tiny_model() -> torch.nn.Module:
    """A factory for ``--model``: 10*20+20 + 20*5+5 = 325 parameters, with an example input."""
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.Linear(20, 5))
    model.example_input_array = torch.zeros(4, 10)  # type: ignore[assignment]  # Lightning's convention, on a plain module
    return model


@pytest.mark.parametrize(
    ("precision", "optimizer", "deepspeed", "expected"),
    [
        ("bf16-mixed", "adamw", False, (4, 4, 8)),  # fp32 weights under autocast: 16 B/param
        ("bf16-mixed", "adamw", True, (2, 2, 12)),  # the ZeRO paper's 2 + 2 + 12 = 16 B/param
        ("16-mixed", "sgd", False, (4, 4, 4)),
        ("32-true", "adamw", False, (4, 4, 8)),
        ("bf16-true", "adamw", False, (2, 2, 4)),
        ("bf16-true", "sgd", True, (2, 2, 2)),
        ("64-true", "adamw", False, (8, 8, 16)),
    ],
)
def test_bytes_per_param(precision: str, optimizer: str, deepspeed: bool, expected: tuple[int, int, int]) -> None:
    per = bytes_per_param(precision, optimizer, deepspeed=deepspeed)
    assert (per.weights, per.grads, per.optimizer) == expected


@pytest.mark.parametrize(("text", "count"), [("7B", 7 * 10**9), ("1.3b", 1_300_000_000), ("350M", 350 * 10**6),
                                             ("125k", 125_000), ("7e9", 7 * 10**9), ("42", 42)])  # fmt: skip
def test_parse_count(text: str, count: int) -> None:
    assert parse_count(text) == count


@pytest.mark.parametrize("text", ["abc", "7X", "0", "-3B", ""])
def test_parse_count_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="parameter count"):
        parse_count(text)


@pytest.mark.parametrize("text", ["1e400", "2e18", "9999999T"])
def test_parse_count_rejects_counts_no_model_has(text: str) -> None:
    with pytest.raises(ValueError, match="more parameters than any model has"):
        parse_count(text)


def test_7b_on_8x80gib_ddp_does_not_fit_sharding_does() -> None:
    result = plan(PlanRequest(params=7 * 10**9, gpus_per_node=8, gpu_memory=80 * GIB))
    estimates = by_name(result)
    assert estimates["ddp_static_graph"].total_peak == 112e9  # 16 B/param, nothing sharded
    assert not estimates["ddp_static_graph"].fits
    assert estimates["fsdp2"].total_peak == 14e9  # 112 GB / 8
    assert estimates["fsdp2"].fits
    # fp32 shards + the bf16 weights FSDP gathers from forward to backward + (grads + Adam) / 8
    assert estimates["fsdp_grad_op"].total_peak == 28e9 / 8 + 14e9 + 84e9 / 8
    assert estimates["fsdp_offload_ckpt"].total_peak == 0  # the gathered weights are not modelled without --model
    assert estimates["fsdp_offload_ckpt"].cpu_bytes_per_node == 112e9
    # DeepSpeed's estimate_zero2_model_states_mem_needs(cpu_offload=True): 2Ψ on the GPU, Ψ·max(4N, 16)·1.5 on the CPU
    assert estimates["deepspeed_zero2_offload"].total_peak == 14e9
    assert estimates["deepspeed_zero2_offload"].cpu_bytes_per_node == 7e9 * 32 * 1.5
    assert estimates["deepspeed_zero2_offload"].evidence == "arithmetic"
    assert result.recommended is not None
    assert result.recommended.preset == "fsdp_grad_op"
    assert result.request.usable_gpu_bytes == pytest.approx(0.7 * 80 * GIB)
    assert result.exit_code == 0


def test_per_gpu_categories_add_up_to_the_arithmetic_peak() -> None:
    estimates = by_name(plan(PlanRequest(params=10**9, gpus_per_node=4, precision="bf16-true")))
    ddp = estimates["ddp_static_graph"]
    assert (ddp.parameters, ddp.gradients, ddp.optimizer) == (2e9, 2e9, 4e9)  # bf16-true AdamW: 2 + 2 + 4
    assert ddp.activations is None  # not modelled without --model
    fsdp2 = estimates["fsdp2"]
    assert (fsdp2.parameters, fsdp2.gradients, fsdp2.optimizer) == (0.5e9, 0.5e9, 1e9)


def test_small_model_recommends_ddp_and_orders_fitting_first_by_speed() -> None:
    result = plan(PlanRequest(params=10**9, gpus_per_node=8, gpu_memory=80 * GIB))
    names = [each.preset for each in result.estimates]
    assert names[0] == "ddp_static_graph"
    fitting = [each.preset for each in result.fitting]
    assert fitting == ["ddp_static_graph", "ddp_bf16_compress", "fsdp_grad_op", "fsdp2", "tp2d_hybrid",
                       "deepspeed_zero2_offload", "fsdp2_offload_ckpt", "fsdp_offload_ckpt",
                       "deepspeed_zero3_offload_ckpt"]  # fmt: skip
    assert names[-1] == "fsdp_hybrid_shard"  # not applicable on one node (LP110), listed last
    assert not by_name(result)["fsdp_hybrid_shard"].applicable


def test_multi_node_prefers_hybrid_shard_to_full_shard_when_it_fits() -> None:
    result = plan(PlanRequest(params=25 * 10**9, gpus_per_node=8, num_nodes=2, gpu_memory=80 * GIB))
    estimates = by_name(result)
    assert estimates["fsdp_grad_op"].total_peak == 100e9 / 16 + 50e9 + 300e9 / 16  # 69.8 GiB > 56 GiB usable
    assert not estimates["fsdp_grad_op"].fits
    assert estimates["fsdp_hybrid_shard"].parameters == 100e9 / 8  # sharded within a node only
    assert result.recommended is not None
    assert result.recommended.preset == "fsdp_hybrid_shard"
    assert [each.preset for each in result.fitting][:2] == ["fsdp_hybrid_shard", "fsdp2"]


def test_70b_on_4_nodes_needs_full_shard() -> None:
    result = plan(PlanRequest(params=70 * 10**9, gpus_per_node=8, num_nodes=4, gpu_memory=80 * GIB))
    estimates = by_name(result)
    assert not estimates["fsdp_hybrid_shard"].fits  # 1120 GB / 8 = 140 GB per GPU
    assert estimates["fsdp2"].total_peak == 1120e9 / 32
    assert result.recommended is not None
    assert result.recommended.preset == "fsdp2"


def test_tp2d_needs_two_gpus_per_node() -> None:
    estimates = by_name(plan(PlanRequest(params=10**8, gpus_per_node=1, num_nodes=2)))
    assert not estimates["tp2d_hybrid"].applicable
    assert any("tensor-parallel size would be 1" in why for why in estimates["tp2d_hybrid"].why)
    assert by_name(plan(PlanRequest(params=10**8, gpus_per_node=2, num_nodes=2)))["tp2d_hybrid"].applicable


def test_headroom_changes_what_fits() -> None:
    def request(headroom: float) -> PlanRequest:  # DDP: 64 GB = 59.6 GiB of model states
        return PlanRequest(params=4 * 10**9, gpus_per_node=1, gpu_memory=80 * GIB, headroom=headroom)

    assert not by_name(plan(request(0.3)))["ddp_static_graph"].fits  # 56 GiB usable
    assert by_name(plan(request(0.2)))["ddp_static_graph"].fits  # 64 GiB usable


def test_cpu_memory_limits_offload() -> None:
    def request(cpu: int) -> PlanRequest:
        return PlanRequest(params=7 * 10**9, gpus_per_node=1, gpu_memory=24 * GIB, cpu_memory=cpu)

    assert by_name(plan(request(512 * GIB)))["fsdp_offload_ckpt"].fits
    small = by_name(plan(request(64 * GIB)))["fsdp_offload_ckpt"]
    assert not small.fits
    assert any("CPU memory per node > 64.0 GiB" in why for why in small.why)


def test_cpu_memory_is_judged_when_not_given() -> None:
    """1e15 parameters: the offload presets would need petabytes of CPU memory; without --cpu-memory a node is
    assumed to have twice its GPU memory, and nothing fits."""
    result = plan(PlanRequest(params=10**15, gpus_per_node=8, gpu_memory=80 * GIB))
    offload = by_name(result)["fsdp2_offload_ckpt"]
    assert offload.cpu_bytes_per_node == 16 * 10**15
    assert not offload.cpu_fits
    assert not offload.fits
    assert result.request.cpu_memory_per_node == 2 * 8 * 80 * GIB
    assert any("(assumed)" in why for why in offload.why)
    assert result.exit_code == 1


def test_offload_hint_names_a_preset_and_a_cpu_memory_that_fits() -> None:
    result = plan(PlanRequest(params=70 * 10**9, gpus_per_node=1, gpu_memory=24 * GIB, cpu_memory=64 * GIB))
    hint = result.hint()
    assert hint is not None
    offload = by_name(result)["fsdp2_offload_ckpt"]  # 16 B/param in CPU memory, nothing on the GPU (--params)
    assert "fsdp2_offload_ckpt fits on the GPU" in hint
    size = re.search(r"--cpu-memory (\d+)GiB", hint)
    assert size is not None
    needed = int(size.group(1)) * GIB
    assert needed >= offload.cpu_bytes_per_node  # the memory named would be enough
    again = by_name(plan(PlanRequest(params=70 * 10**9, gpus_per_node=1, gpu_memory=24 * GIB, cpu_memory=needed)))
    assert again["fsdp2_offload_ckpt"].fits


def test_request_rejects_impossible_values() -> None:
    with pytest.raises(ValueError, match="gpus=0"):
        PlanRequest(params=10, gpus_per_node=0)
    with pytest.raises(ValueError, match="headroom"):
        PlanRequest(params=10, gpus_per_node=1, headroom=1.0)
    with pytest.raises(ValueError, match="precision"):
        PlanRequest(params=10, gpus_per_node=1, precision="fp8")


def test_cli_text_labels_the_estimate_and_gives_trainer_and_check(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "plan", "--params", "7B", "--gpus", "8", "--gpu-memory", "80GiB")
    assert code == 0
    assert "evidence: none" in out
    assert "ESTIMATE" in out
    assert "*fsdp_grad_op" in out
    assert 'Trainer(strategy="fsdp_grad_op", accelerator="cuda", devices=8, num_nodes=1, precision="bf16-mixed")' in out
    assert "lightning-presets check --strategy fsdp_grad_op" in out
    assert 'Fabric(strategy="fsdp_grad_op", accelerator="cuda", devices=8' in out
    assert "not planned (no GPU memory layout): xla_fsdp_ckpt" in out
    assert out.index("fsdp_grad_op") < out.index("ddp_static_graph")  # recommended first, DDP among the misfits


@pytest.mark.parametrize(
    ("argv", "recommended"),
    [
        (("--params", "7B", "--gpus", "8"), "fsdp_grad_op"),
        (("--params", "1B", "--gpus", "8"), "ddp_static_graph"),
        (("--params", "25B", "--gpus", "8", "--num-nodes", "2"), "fsdp_hybrid_shard"),
    ],
)
def test_cli_recommended_check_command_passes_check(
    argv: tuple[str, ...], recommended: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = run(capsys, "plan", *argv, "--json")
    data = json.loads(out)
    assert code == 0
    assert data["recommended"] == recommended
    check_code, check_out = run(capsys, *shlex.split(data["check"])[1:])
    assert check_code == 0, check_out


def test_every_modelled_preset_is_a_builtin_and_every_gpu_builtin_is_modelled() -> None:
    from lightning_presets.registry.catalog import strategy_catalog

    builtins = {
        name for name, preset in strategy_catalog().presets.items() if preset.distribution == "lightning-presets"
    }
    modelled = set(_plan.planned_presets())
    assert modelled <= builtins
    assert builtins - modelled == {"xla_fsdp_ckpt"}  # TPU: no GPU memory layout


def test_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "plan", "--params", "7B", "--gpus", "8", "--json")
    data = json.loads(out)
    assert code == data["exit_code"] == 0
    assert data["schema"] == "lightning-presets/plan"
    assert data["evidence"].startswith("none")
    assert data["recommended"] == "fsdp_grad_op"
    assert "the fastest preset that fits" in data["rule"]
    assert "preference order" in data["rule"]
    assert all(each["throughput"] is None for each in data["presets"])  # --params: no step to time
    ddp = next(each for each in data["presets"] if each["preset"] == "ddp_static_graph")
    assert ddp["per_gpu_bytes"] == {"parameters": 28 * 10**9, "gradients": 28 * 10**9, "optimizer": 56 * 10**9,
                                    "activations": None, "total_peak": 112 * 10**9}  # fmt: skip
    assert ddp["fits"] is False
    assert ddp["evidence"] == "arithmetic"
    assert data["model_parameters"] == 7 * 10**9


def test_cli_nothing_fits_exits_1_with_hint(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("plan", "--params", "70B", "--gpus", "1", "--gpu-memory", "24GiB", "--cpu-memory", "64GiB")
    code, out = run(capsys, *argv)
    assert code == 1
    assert "NOTHING FITS" in out
    assert "--gpus" in out
    assert "--num-nodes" in out
    assert "fsdp2_offload_ckpt fits on the GPU" in out
    assert "--gpus 8 --num-nodes 8: fsdp2 fits" in out  # the smallest change that fits, planned
    code, out = run(capsys, *argv, "--json")
    data = json.loads(out)
    assert code == data["exit_code"] == 1
    assert data["recommended"] is None
    assert data["trainer"] is None
    assert "--cpu-memory" in data["hint"]
    assert [each["change"] for each in data["suggestions"]] == ["--gpus 8 --num-nodes 8"]


def test_a_plain_module_is_traced_with_the_default_optimizer() -> None:
    from lightning_presets.tools.plan import worker as plan_worker

    request = PlanRequest(model=f"{__name__}:tiny_model", gpus_per_node=1, presets=("ddp_static_graph",))
    (ddp,), parameters = plan_worker.plan_in_process(request)
    assert parameters == 325
    assert ddp.evidence == "traced"
    assert ddp.parameters == 325 * 4  # fp32 weights (bf16-mixed autocasts)
    assert ddp.optimizer >= 2 * 325 * 4  # no configure_optimizers: AdamW, two fp32 moments (+ step counters)


@pytest.mark.parametrize(
    "argv",
    [
        ("plan", "--gpus", "8"),  # neither --params nor --model
        ("plan", "--params", "abc", "--gpus", "8"),
        ("plan", "--params", "7B", "--gpus", "0"),
        ("plan", "--params", "7B", "--gpus", "8", "--headroom", "1.5"),
        ("plan", "--params", "7B", "--gpus", "8", "--precision", "fp8"),
        ("plan", "--model", "no_such_module_xyz:build", "--gpus", "8"),
        ("plan", "--model", "nocolon", "--gpus", "8"),
        ("plan", "--params", "1e400", "--gpus", "8"),
        ("plan", "--params", "7B", "--gpus", "8", "--batch-size", "4"),  # a batch needs a traced model
        ("plan", "--params", "7B", "--gpus", "8", "--preset", "no_such_preset"),
    ],
)
def test_cli_usage_errors_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(list(argv))
    assert exited.value.code == 2
    assert "error" in capsys.readouterr().err


def test_install_note_agrees_with_doctor(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed is installed in the test environment: no install note; reported missing, the note names the extra."""
    from lightning_presets.tools import doctor

    installed = doctor.dependencies_section()[0]["deepspeed"]["status"] == "found"
    estimates = by_name(plan(PlanRequest(params=10**9, gpus_per_node=8)))
    assert (estimates["deepspeed_zero2_offload"].install is None) is installed
    from lightning_presets.tools.plan import presets as _presets

    monkeypatch.setattr(_presets, "is_importable", lambda module: module != "deepspeed")
    missing = by_name(plan(PlanRequest(params=10**9, gpus_per_node=8)))["deepspeed_zero2_offload"]
    assert missing.install == "pip install --no-build-isolation 'deepspeed>=0.16'"
    assert missing.fits  # the plan is for the target machine: a missing package here is a note, not a misfit
    assert any("not installed here" in why for why in missing.why)


# --- the child that traces: bounded, importable from here (issues 16 and 18) -------------------------------------

TINY = "lightning_presets.tools.plan.reference_models:decoder_tiny"
HELPER_PID = "plan-helper.pid"


def forks_a_helper_and_hangs() -> torch.nn.Module:
    """A factory that forks a helper holding the event pipe, then never returns."""
    import os
    import time

    pid = os.fork()
    if pid == 0:  # the helper: sleeps with every inherited descriptor open
        time.sleep(600)
        os._exit(0)
    with open(os.environ["LP_TEST_HELPER_PID"], "w", encoding="utf-8") as record:
        record.write(str(pid))
    time.sleep(600)
    return tiny_model()


def floods_stderr() -> torch.nn.Module:
    """A factory that writes 100 MB to stderr, then returns a model."""
    import os

    chunk = b"x" * (1 << 20)
    for _ in range(100):
        os.write(2, chunk)
    return tiny_model()


def _alive(pid: int) -> bool:
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:  # a zombie is dead, whoever reaps it
        return stat.read().split(")")[-1].split()[0] != "Z"


def test_a_timeout_kills_the_childs_process_group(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from lightning_presets.tools.plan import worker

    record = tmp_path / HELPER_PID
    monkeypatch.setenv("LP_TEST_HELPER_PID", str(record))
    # The timeout must outlast the child's start (importing torch, then the factory forks its helper): 8 s is about
    # twice a quiet machine's; a machine too busy for that gets more tries, at 20 s and at 60 s.
    for timeout in (8, 20, 60):
        request = PlanRequest(model=f"{__name__}:forks_a_helper_and_hangs", gpus_per_node=1, timeout_s=timeout,
                              presets=("ddp_static_graph",))  # fmt: skip
        started = time.monotonic()
        with pytest.raises(worker.PlanFailed, match=f"took longer than {timeout} s and was stopped"):
            worker.run(request)
        assert time.monotonic() - started < 2 * timeout  # not the helper's 600 s
        if record.exists():
            break
    helper = int(record.read_text(encoding="utf-8"))
    deadline = time.monotonic() + 5
    while _alive(helper) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(helper)


def test_a_flood_of_stderr_keeps_only_a_bounded_tail() -> None:
    """100 MB of the child's stderr: the parent's peak memory grows by far less (only the last 4 KiB are kept)."""
    import subprocess
    import sys

    program = f"""
import resource, sys
sys.path[:0] = {sys.path!r}
from lightning_presets.tools.plan import worker, PlanRequest
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
estimates, _ = worker.run(PlanRequest(model="test_cli_plan:floods_stderr", gpus_per_node=1,
                                      presets=("ddp_static_graph",)))
print(len(estimates), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""
    # a fresh interpreter: the parent's peak memory is measured from a process that holds nothing else
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    count, grown_kib = map(int, done.stdout.split()[-2:])
    assert count == 1
    assert grown_kib < 30 * 1024  # 100 MB went through; the parent kept a tail


def test_a_long_sys_path_reaches_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 KB of sys.path (one argument may hold 128 KiB): the request goes through the child's stdin."""
    import sys

    from lightning_presets.tools.plan import worker

    monkeypatch.setattr(sys, "path", [*sys.path, *(f"/nonexistent/{'p' * 90}/{i}" for i in range(3000))])
    estimates, parameters = worker.run(PlanRequest(model=TINY, gpus_per_node=1, presets=("ddp_static_graph",)))
    assert parameters == 29_312
    assert len(estimates) == 1


def test_breakpoint_as_a_factory_is_a_one_line_message(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--model", "builtins:breakpoint", "--gpus", "1", "--preset", "ddp_static_graph"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "called breakpoint()" in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


MODELS_PY = """
import torch


def build():
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.Linear(20, 5))
    model.example_input_array = torch.zeros(4, 10)
    return model
"""


def test_the_console_script_imports_a_module_of_the_current_folder(tmp_path: Any) -> None:
    """``lightning-presets plan --model models:build`` from the folder that holds models.py, as ``python -m``."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "models.py").write_text(MODELS_PY, encoding="utf-8")
    script = Path(sys.executable).with_name("lightning-presets")
    assert script.exists()
    import lightning_presets

    here = str(Path(lightning_presets.__file__).parents[1])  # the package under test, as the script imports it
    env = {**os.environ, "PYTHONPATH": here}
    # a fresh interpreter: the claim is the console script's own start (its sys.path), then its child's
    done = subprocess.run([str(script), "plan", "--model", "models:build", "--gpus", "1", "--preset",
                           "ddp_static_graph", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          check=False, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout)["model_parameters"] == 325


def test_with_every_preset_denied_there_is_nothing_to_plan() -> None:
    import os
    import subprocess
    import sys

    env = {**os.environ, "LIGHTNING_PRESETS_DENY": "lightning-presets"}
    # a fresh interpreter: LIGHTNING_PRESETS_DENY is read when the presets are imported
    done = subprocess.run([sys.executable, "-m", "lightning_presets", "plan", "--params", "7B", "--gpus", "8"],
                          capture_output=True, text=True, timeout=300, check=False, env=env)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "nothing to plan" in done.stderr
    assert "NOTHING FITS" not in done.stdout + done.stderr


def test_full_trace_reaches_the_request_and_needs_a_model() -> None:
    """``--full-trace`` is the request's ``full_trace`` (what it changes: ``test_plan_depth.py``); with ``--params``
    there is nothing to trace, a usage error."""
    import argparse

    from lightning_presets.cli import _plan as plan_cli

    parser = argparse.ArgumentParser()
    plan_cli.add_arguments(parser)
    args = parser.parse_args(["--model", "tests.models:tiny", "--gpus", "8", "--gpu-type", "H100-SXM", "--full-trace"])
    assert plan_cli.request_from(args).full_trace is True
    args = parser.parse_args(["--model", "tests.models:tiny", "--gpus", "8", "--gpu-type", "H100-SXM"])
    assert plan_cli.request_from(args).full_trace is False
    args = parser.parse_args(["--params", "7e9", "--gpus", "8", "--gpu-type", "H100-SXM", "--full-trace"])
    with pytest.raises(UsageError, match="full_trace traces a model"):
        plan_cli.request_from(args)


def test_the_request_reaches_the_child_whole() -> None:
    """The child process plans ``PlanRequest.from_dict(request.as_dict())``: every field but the parent's own timeout
    survives the trip (a field left out of either would be silently its default in the child)."""
    import dataclasses

    from lightning_presets.tools.plan.request import PlanRequest

    given = {"gpus_per_node": 4, "model": "tests.models:tiny", "num_nodes": 2, "gpu_memory": 40 * 2**30,
             "precision": "bf16-true", "optimizer": "sgd", "headroom": 0.2, "cpu_memory": 512 * 2**30,
             "batch_size": 3, "batch": "tests.models:batch", "kernels": "cpu", "max_batch": True,
             "presets": ("fsdp2",), "gpu_type": "A100-80GB", "inter_node_bandwidth": 25.0,
             "nvlink_bandwidth": 300.0, "activation_checkpointing": "full", "compile": True,
             "full_trace": True, "fp8": "te"}  # fmt: skip
    parent_only = {"timeout_s", "params"}  # params: the other kind of request (a count, not a model)
    assert set(given) | parent_only == {field.name for field in dataclasses.fields(PlanRequest)}
    request = PlanRequest(**given)  # type: ignore[arg-type]
    defaults = PlanRequest(gpus_per_node=1, model="tests.models:batch")
    assert all(getattr(request, name) != getattr(defaults, name) for name in given), "a value equal to its default"
    assert PlanRequest.from_dict(request.as_dict()) == request


# --- the table and the recommendation ------------------------------------------------------------------------------


def _estimate(name: str, rank: int, peak: float, rate: float | None, *, fits: bool = True,
              evidence: str = "traced") -> _plan.Estimate:  # fmt: skip
    from lightning_presets.tools.plan.throughput import Throughput

    speed = None if rate is None else Throughput(
        step_time_s=1.0, tokens_per_s_per_gpu=rate, samples_per_s=None, mfu=0.4, flops_per_step=1,
        comm_bytes_per_step=0, compute_s=1.0, exposed_comm_s=0.0, offload_s=0.0, low=rate, high=rate)  # fmt: skip
    return _plan.Estimate(preset=name, rank=(rank, 0, 0), summary="", applicable=True, fits=fits, evidence=evidence,
                          parameters=round(peak / 4), gradients=0, optimizer=0, activations=round(peak / 2),
                          total_peak=round(peak), usable_gpu_bytes=72 * GIB, throughput=speed)  # fmt: skip


def _rendered(result: _plan.Plan, capsys: pytest.CaptureFixture[str]) -> str:
    from lightning_presets.cli._output import emit
    from lightning_presets.cli._plan import render

    capsys.readouterr()
    emit(render(result))
    return capsys.readouterr().out


def test_table_gives_every_figure_its_own_unit_and_evidence_one_word(capsys: pytest.CaptureFixture[str]) -> None:
    """A 70B table mixes a 14.56 GiB offload row with a 1.5 TiB DDP row: each figure keeps its own unit (the whole
    table in TiB read the recommended row as 0.01), and the evidence column is one word, its details under how and
    why."""
    from lightning_presets.tools.plan.planner import order

    long = "arithmetic + traced activations, 3 and 4 of 80 blocks extrapolated"
    request = PlanRequest(params=70 * 10**9, gpus_per_node=8)
    estimates = order([_estimate("fsdp_offload_ckpt", 6, 14.56 * GIB, 400.0, evidence=long),
                       _estimate("ddp_static_graph", 0, 1.5 * 2**40, 900.0, fits=False)])  # fmt: skip
    out = _rendered(_plan.Plan(request, estimates), capsys)
    row = next(line for line in out.splitlines() if "*fsdp_offload_ckpt" in line)
    assert all(figure in row for figure in ("14.6 GiB", "7.3 GiB", "3.6 GiB"))
    assert "formula+trace~" in row
    assert "extrapolated" not in row
    assert "1.5 TiB" in next(line for line in out.splitlines() if line.lstrip().startswith("ddp_static_graph"))
    assert f"evidence: {long}" in " ".join(out.split())


def test_the_recommendation_names_the_runner_up_and_by_how_much(capsys: pytest.CaptureFixture[str]) -> None:
    from lightning_presets.tools.plan.planner import order

    request = PlanRequest(params=7 * 10**9, gpus_per_node=8)
    result = _plan.Plan(
        request,
        order(
            [
                _estimate("fsdp2", 3, 60 * GIB, 9000.0),
                _estimate("fsdp_grad_op", 1, 70 * GIB, 10000.0),
                _estimate("ddp_static_graph", 0, 90 * GIB, 12000.0, fits=False),
            ]
        ),
    )
    fastest = result.as_dict()["fastest"]
    assert fastest == {"preset": "fsdp_grad_op", "rate": 10000.0, "unit": "tokens/s/GPU", "runner_up": "fsdp2",
                       "runner_up_rate": 9000.0, "runner_up_slower_by": pytest.approx(0.1)}  # fmt: skip
    out = _rendered(result, capsys)
    assert "fsdp_grad_op at 10,000 tokens/s/GPU; runner-up fsdp2 at 9,000 (10% slower)" in " ".join(out.split())
    alone = _plan.Plan(request, order([_estimate("fsdp2", 3, 60 * GIB, None)]))
    assert alone.as_dict()["fastest"]["preset"] == "fsdp2"  # no step time (--params): still named
    assert alone.fastest_text() == "fsdp2 (no step time); the only preset that fits"
    nothing = _plan.Plan(request, order([_estimate("fsdp2", 3, 90 * GIB, 9000.0, fits=False)]))
    assert nothing.as_dict()["fastest"] is None


def test_when_nothing_fits_the_smallest_change_that_fits_is_planned() -> None:
    """70B on one 24 GiB GPU: nothing fits; doubling GPUs, then nodes, the first that fits is 8 × 8 (fsdp2 at 16.3 GiB
    of 16.8 usable), planned as the request is; a traced request also tries checkpointing and halved micro-batches."""
    from lightning_presets.tools.plan import planner

    request = PlanRequest(params=70 * 10**9, gpus_per_node=1, gpu_memory=24 * GIB, cpu_memory=64 * GIB)
    assert plan(request).suggestions == ()  # not asked for (check --model plans without them)
    result = plan(request, suggest_changes=True)
    assert not result.fitting
    (more,) = result.suggestions
    assert (more.change, more.preset, more.peak) == ("--gpus 8 --num-nodes 8", "fsdp2", 70 * 10**9 * 16 // 64)
    assert result.as_dict()["suggestions"][0]["change"] == "--gpus 8 --num-nodes 8"
    fits = plan(replace_request(request, gpus_per_node=8, num_nodes=8), suggest_changes=True)
    assert fits.suggestions == ()  # it fits: nothing to suggest
    traced = PlanRequest(model="lightning_presets.tools.plan.reference_models:decoder_tiny", gpus_per_node=8)
    kinds = {kind: [step for step in steps] for kind, _flag, steps in planner._changes(traced, batch=4)}
    assert kinds["checkpointing"] == [{"activation_checkpointing": "full"}]
    assert kinds["micro-batch"] == [{"batch_size": 2}, {"batch_size": 1}]
    assert kinds["more nodes"][0] == {"num_nodes": 2, "gpus_per_node": 8}


def replace_request(request: PlanRequest, **changes: Any) -> PlanRequest:
    from dataclasses import replace

    return replace(request, **changes)


def test_a_faster_preset_that_misses_is_offered_with_the_change_that_makes_it_fit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An offload preset fits at 5,900 tokens/s while full sharding (11,900) misses by a few GiB: plan names the
    largest smaller micro-batch at which it fits, with its speed (llm-foundry's 7B on 8 × 80 GB: published 10,643
    for full sharding); a change that does not make it faster than the recommended one is left out."""
    from dataclasses import replace

    from lightning_presets.tools.plan import planner

    request = PlanRequest(model="lightning_presets.tools.plan.reference_models:decoder_tiny", gpus_per_node=8)
    base = (_estimate("deepspeed_zero2_offload", 5, 64 * GIB, 5900.0),
            _estimate("fsdp2", 3, 86 * GIB, 11900.0, fits=False))  # fmt: skip
    base = tuple(replace(each, batch=6) for each in base)

    def fake(changed: PlanRequest, progress: Any, notes: Any) -> _plan.Plan:
        if changed.batch_size is not None:  # fits at half the micro-batch, a little slower per token
            return _plan.Plan(changed, (_estimate("fsdp2", 3, 50 * GIB, 11500.0),))
        if changed.activation_checkpointing == "full":  # fits, but slower than the offload preset
            return _plan.Plan(changed, (_estimate("fsdp2", 3, 30 * GIB, 5000.0),))
        return _plan.Plan(changed, planner.order(base))

    monkeypatch.setattr(planner, "_plan", fake)
    plain = planner.plan(request, suggest_changes=True)
    assert plain.suggestions == ()  # not asked for: named only (plan --faster plans it)
    missed = plain.missed()
    assert missed is not None
    assert missed.preset == "fsdp2"
    assert "fsdp2 would run at 11,900 but misses by 14.0 GiB per GPU; --faster" in " ".join(
        _rendered(plain, capsys).split()
    )
    result = planner.plan(request, suggest_changes=True, faster_changes=True)
    assert result.recommended is not None
    assert result.recommended.preset == "deepspeed_zero2_offload"
    (change,) = result.suggestions
    assert (change.change, change.preset, change.rate) == ("--batch-size 3", "fsdp2", 11500.0)
    assert change.text() == "--batch-size 3: fsdp2 fits (50.0 GiB per GPU, 11,500 tokens/s/GPU)"
