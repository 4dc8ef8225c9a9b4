"""The GPU check harness (benchmarks/gpu/): its no-GPU path, its CPU smoke run and its bookkeeping.

The GPU checks themselves need CUDA and are not run here; these tests prove the harness around them.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
GPU_DIR = ROOT / "benchmarks" / "gpu"
RUN_SH = GPU_DIR / "run.sh"
SCRIPT = GPU_DIR / "gpu_checks.py"


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_checks", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("gpu_checks", module)
    spec.loader.exec_module(module)
    return module


gpu_checks = _harness()


def _env(out: Path) -> dict[str, str]:
    # No CUDA device even on a machine that has one: this is the path a CPU box takes.
    return {**os.environ, "PYTHON": sys.executable, "OUT": str(out), "CUDA_VISIBLE_DEVICES": ""}


def _report(out: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((out / "gpu_checks.json").read_text())
    return data


class _Started:
    """A command started in the background, waited for by the test that reads it."""

    def __init__(self, command: list[str], out: Path, timeout: float) -> None:
        self.out, self.timeout = out, timeout
        self.start = time.monotonic()
        self.process = subprocess.Popen(
            command, env=_env(out), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )  # fmt: skip

    def result(self) -> tuple[subprocess.CompletedProcess[str], float]:
        """What ``subprocess.run`` would have returned, and the seconds from the start to the end."""
        try:
            stdout, stderr = self.process.communicate(timeout=max(1.0, self.timeout - (time.monotonic() - self.start)))
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.communicate()
            raise
        elapsed = time.monotonic() - self.start
        return subprocess.CompletedProcess(self.process.args, self.process.returncode, stdout, stderr), elapsed


NO_GPU_TEST = "test_no_gpu_path_skips_every_check_and_exits_non_zero"
SMOKE_TEST = "test_cpu_smoke_runs_the_cpu_capable_checks_through_the_harness"


@pytest.fixture(scope="module")
def script_runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, _Started]]:
    """The two runs of the real script (fresh interpreters: it is what a GPU machine runs), started together when
    the session has both tests, so the no-GPU run's start-up uses the core the smoke run's waits leave idle. Each
    test still reads only its own run, in a folder of its own."""
    selected = {item.name for item in request.session.items if item.path == request.path}
    runs = {}
    if NO_GPU_TEST in selected:
        runs["no_gpu"] = _Started(["bash", str(RUN_SH)], tmp_path_factory.mktemp("no_gpu"), timeout=120)
    if SMOKE_TEST in selected:
        smoke = tmp_path_factory.mktemp("cpu_smoke")
        runs["smoke"] = _Started([sys.executable, str(SCRIPT), "--cpu-smoke", "--out", str(smoke)], smoke, timeout=300)
    yield runs
    for run in runs.values():
        if run.process.poll() is None:
            run.process.kill()
            run.process.communicate()


def test_no_gpu_path_skips_every_check_and_exits_non_zero(script_runs: dict[str, _Started]) -> None:
    """No visible GPU (or a GPU node whose CUDA is broken) is not a pass: exit 2, the report still written."""
    done, _ = script_runs["no_gpu"].result()
    tmp_path = script_runs["no_gpu"].out
    assert done.returncode == gpu_checks.EXIT_NO_GPU == 2, done.stdout + done.stderr
    assert "no CUDA device is visible: every GPU check was skipped; exit 2" in done.stdout
    report = _report(tmp_path)
    assert report["schema"] == "lightning-presets/gpu-checks"
    assert report["mode"] == "gpu"
    assert [check["name"] for check in report["checks"]] == [check.name for check in gpu_checks.CHECKS]
    assert {(check["status"], check["reason"]) for check in report["checks"]} == {("skipped", "no CUDA device")}
    assert {check["duration_s"] for check in report["checks"]} == {0.0}  # no check's process was started
    assert report["summary"] == {"passed": 0, "failed": 0, "skipped": len(gpu_checks.CHECKS)}
    environment = report["environment"]
    assert environment["gpus"] == 0
    for key in ("torch", "lightning", "lightning_presets"):
        assert environment[key], key
    assert set(environment["optional"]) == set(gpu_checks.OPTIONAL_PACKAGES)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["gpu_checks.json", "gpu_checks.log"]
    log = (tmp_path / "gpu_checks.log").read_text()
    assert f"summary: 0 passed, 0 failed, {len(gpu_checks.CHECKS)} skipped" in log


def test_every_check_has_a_distinct_name_and_a_reason_to_exist() -> None:
    names = [check.name for check in gpu_checks.CHECKS]
    assert len(names) == len(set(names))
    assert {check.name for check in gpu_checks.CHECKS if check.cpu_smoke} == {
        "cli_check", "ddp_static_graph", "fsdp2", "tp2d_hybrid",
    }  # fmt: skip
    for check in gpu_checks.CHECKS:
        assert check.what
        assert check.timeout_s * 2 < gpu_checks.DEFAULT_BUDGET_S


def test_unknown_check_name_is_a_usage_error() -> None:
    with pytest.raises(SystemExit, match="unknown check"):
        gpu_checks._selected("fsdp_offload_ckpt,nope", cpu=False)


def _gpu_env(capability: str = "9.0", **optional: str) -> dict[str, Any]:
    packages = {name: "not installed" for name in gpu_checks.OPTIONAL_PACKAGES}
    packages.update(optional)
    return {
        "gpus": 1,
        "devices": [{"name": "a GPU", "capability": capability}],
        "lightning": "2.6.6",
        "lightning_presets": "0.1.0",
        "optional": packages,
    }


def test_skip_reasons_name_what_is_missing() -> None:
    by_name = gpu_checks.BY_NAME
    env = _gpu_env()
    assert gpu_checks._skip_reason(by_name["fsdp_offload_ckpt"], env, cpu=False) is None
    assert gpu_checks._skip_reason(by_name["deepspeed_zero2_offload"], env, cpu=False) == "deepspeed not installed"
    broken = _gpu_env(deepspeed="fails to import: ImportError: no CUDA_HOME")
    assert "no CUDA_HOME" in gpu_checks._skip_reason(by_name["deepspeed_zero2_offload"], broken, cpu=False)
    ampere = _gpu_env("8.0", torchao="0.18.0")
    assert gpu_checks._skip_reason(by_name["precision_fp8_torchao"], ampere, cpu=False) == (
        "needs compute capability 8.9, the GPU has 8.0"
    )
    hopper = _gpu_env("9.0", torchao="0.18.0")
    assert gpu_checks._skip_reason(by_name["precision_fp8_torchao"], hopper, cpu=False) is None
    no_lightning = {**_gpu_env(), "lightning_error": "ModuleNotFoundError: No module named 'lightning'"}
    reason = gpu_checks._skip_reason(by_name["fsdp2"], no_lightning, cpu=False)
    assert reason == "lightning does not import: ModuleNotFoundError: No module named 'lightning'"


def _record(name: str, peak: float) -> Any:
    return gpu_checks.Record(name=name, status="passed", reason="", duration_s=1.0, figures={"peak_memory_mib": peak})


def test_memory_ratio_is_recorded_and_must_be_below_1() -> None:
    records = {"baseline_auto": _record("baseline_auto", 2000.0), "fsdp_offload_ckpt": _record("x", 500.0)}
    gpu_checks._memory_ratio(records)
    assert records["fsdp_offload_ckpt"].figures["memory_ratio_vs_auto"] == 0.25
    assert records["fsdp_offload_ckpt"].status == "passed"
    worse = {"baseline_auto": _record("baseline_auto", 500.0), "fsdp_offload_ckpt": _record("x", 800.0)}
    gpu_checks._memory_ratio(worse)
    assert worse["fsdp_offload_ckpt"].status == "failed"
    assert "800.0 MiB is not below the plain run's 500.0 MiB" in worse["fsdp_offload_ckpt"].reason


def test_expectations_reject_a_loss_that_does_not_fall() -> None:
    sizes = gpu_checks.CPU_SIZES
    check = gpu_checks.BY_NAME["ddp_static_graph"]
    good = {"losses": [3.4, 3.3, 3.2, 3.1], "static_graph": True, "backend": "gloo"}
    assert gpu_checks._expectations(check, good, sizes, cpu=True) == []
    flat = {**good, "losses": [3.0, 3.1, 3.2, 3.3]}
    assert "never went below its first value" in gpu_checks._expectations(check, flat, sizes, cpu=True)[0]
    nan = {**good, "losses": [3.0, math.nan, 3.2, 3.3]}
    assert "finite losses" in gpu_checks._expectations(check, nan, sizes, cpu=True)[0]
    on_gpu = gpu_checks._expectations(check, good, sizes, cpu=False)
    assert on_gpu == ["unexpected backend gloo"]


def test_a_hanging_check_is_killed_with_its_process_group(tmp_path: Path) -> None:
    marker, woke = tmp_path / "child.pid", tmp_path / "woke"
    grandchild_code = "import sys, time; time.sleep(60); open(sys.argv[1], 'w')"  # writes once it wakes
    code = (
        "import os, subprocess, sys, time; "
        f"child = subprocess.Popen([sys.executable, '-c', {grandchild_code!r}, {str(woke)!r}]); "
        f"open({str(marker)!r}, 'w').write(str(child.pid)); time.sleep(60)"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,
    )  # fmt: skip
    running = gpu_checks.Running(
        check=gpu_checks.BY_NAME["fsdp2"], process=process, started=time.monotonic(), timeout_s=3, command="hang"
    )
    record, _ = gpu_checks._finish(running)
    assert not woke.exists()  # _finish did not wait for the grandchild (it holds the output pipe) to end its sleep
    assert record.status == "failed"
    assert record.reason == "timed out after 3 s (process group killed)"
    grandchild = int(marker.read_text())
    for _ in range(50):  # the grandchild (another rank, say) went down with the group
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"process {grandchild} survived the timeout")


@pytest.mark.distributed
def test_cpu_smoke_runs_the_cpu_capable_checks_through_the_harness(script_runs: dict[str, _Started]) -> None:
    done, _ = script_runs["smoke"].result()
    tmp_path = script_runs["smoke"].out
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = _report(tmp_path)
    assert report["mode"] == "cpu-smoke"
    checks = {check["name"]: check for check in report["checks"]}
    assert set(checks) == {"cli_check", "ddp_static_graph", "fsdp2", "tp2d_hybrid"}
    assert {name: check["status"] for name, check in checks.items()} == dict.fromkeys(checks, "passed")
    for name in ("ddp_static_graph", "fsdp2", "tp2d_hybrid"):
        figures = checks[name]["figures"]
        assert figures["accelerator"] == "cpu"
        assert figures["world_size"] == 2
        losses = figures["losses"]
        assert len(losses) == gpu_checks.CPU_SIZES.steps
        assert all(math.isfinite(loss) for loss in losses)
        assert min(losses[1:]) < losses[0]
        assert figures["step_time_ms_median"] > 0
    assert checks["ddp_static_graph"]["figures"]["static_graph"] is True
    assert checks["ddp_static_graph"]["figures"]["backend"] == "gloo"
    assert checks["fsdp2"]["figures"]["fsdp2_modules"] == gpu_checks.CPU_SIZES.layers + 1
    assert checks["tp2d_hybrid"]["figures"]["dtensor_parameters"] > 0
    cli = checks["cli_check"]["figures"]
    assert cli["exit_code"] == 0
    assert cli["cuda_initialized_after"] is False
    assert cli["evidence"] == "construction"
    # side by side: the run took less than its checks one after another (each check's duration spans its start-up)
    durations = sum(check["duration_s"] for check in checks.values())
    assert report["duration_s"] < durations, (report["duration_s"], durations)


def test_source_metadata_exposes_the_entry_points_when_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from importlib import metadata

    assert gpu_checks.source_metadata(tmp_path / "installed") is None  # installed here: nothing to make

    def not_installed(name: str) -> Any:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "distribution", not_installed)
    folder = gpu_checks.source_metadata(tmp_path / "shim")
    assert folder == tmp_path / "shim"
    (dist,) = metadata.distributions(path=[str(folder)])
    assert dist.metadata["Name"] == "lightning-presets"
    strategies = {ep.name: ep.value for ep in dist.entry_points if ep.group == "lightning_presets.strategies"}
    precision = {ep.name for ep in dist.entry_points if ep.group == "lightning_presets.precision"}
    assert strategies["fsdp_offload_ckpt"] == "lightning_presets.strategies.fsdp:FSDP_OFFLOAD_CKPT"
    assert {"fsdp2", "tp2d_hybrid", "deepspeed_zero3_offload_ckpt"} <= set(strategies)
    assert {"fp8-torchao", "nf4-bnb", "bf16-fp32-reduce"} <= precision


def _fake_probe(gpus: int) -> Any:
    def probe(import_optional: bool = False) -> dict[str, Any]:
        devices = [{"capability": "9.0", "name": "H100"}] * gpus
        return {"gpus": gpus, "devices": devices, "optional": {"deepspeed": "not installed"}}

    return probe


@pytest.mark.parametrize(("gpus", "code"), [(1, 0), (0, gpu_checks.EXIT_NO_GPU)])
def test_exit_code_tells_a_skipped_package_from_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gpus: int, code: int
) -> None:
    """Checks skipped because an optional package is missing leave a GPU run green; no GPU at all does not."""
    names = [check.name for check in gpu_checks.CHECKS if "deepspeed" in check.requires]
    assert names
    monkeypatch.setattr(gpu_checks, "_probe", _fake_probe(gpus))
    assert gpu_checks.main(["--only", ",".join(names), "--out", str(tmp_path)]) == code
    assert {check["status"] for check in _report(tmp_path)["checks"]} == {"skipped"}


def test_a_proof_check_passes_only_when_its_configuration_fails() -> None:
    closure = gpu_checks.BY_NAME["proof_lp412_deepspeed_closure"]
    assert gpu_checks.proof_result(closure, {"losses": []}, None) == []
    assert gpu_checks.proof_result(closure, {"failure": "x"}, "AssertionError: x") == []
    assert "training_step ran 2 time(s)" in gpu_checks.proof_result(closure, {"losses": [1.0, 0.9]}, None)[0]
    fp8 = gpu_checks.BY_NAME["proof_lp604_fp8_below_capability"]
    assert gpu_checks.proof_result(fp8, {}, "RuntimeError: torch._scaled_mm is only supported on ...") == []
    assert "a run that trained" in gpu_checks.proof_result(fp8, {"losses": [1.0]}, None)[0]
    assert "proves a failure below compute capability 8.9" in (
        gpu_checks._skip_reason(fp8, _gpu_env(capability="9.0", torchao="0.18.0"), cpu=False) or ""
    )
    assert gpu_checks._skip_reason(fp8, _gpu_env(capability="8.0", torchao="0.18.0"), cpu=False) is None
