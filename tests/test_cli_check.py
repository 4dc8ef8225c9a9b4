"""``lightning-presets check``: exit codes, every LP7xx code, the JSON schema, goldens and a fuzz."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lightning_presets.cli import main
from lightning_presets.registry.requirements import is_importable
from lightning_presets.tools.check import CODES as CHECK_CODES
from lightning_presets.tools.check import CheckRequest
from lightning_presets.tools.plan.fit import CODES as MEMORY_CODES
from lightning_presets.tools.verdict import run_check

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = json.loads((ROOT / "docs" / "check-schema.json").read_text(encoding="utf-8"))
GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("LP_UPDATE_GOLDEN") == "1"
CODES = (*CHECK_CODES, *MEMORY_CODES)
ISSUE_COMMANDS = (
    "--mode trainer --accelerator cpu --devices 1 --strategy auto --precision 32-true",
    "--mode fabric --accelerator auto --devices 1 --strategy auto --precision bf16-mixed",
)


def check(capsys: pytest.CaptureFixture[str], args: str | list[str]) -> tuple[int, str]:
    argv = ["check", *(shlex.split(args) if isinstance(args, str) else args)]
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().out


def check_json(capsys: pytest.CaptureFixture[str], args: str) -> tuple[int, dict[str, Any]]:
    code, out = check(capsys, f"{args} --json")
    return code, json.loads(out)


# --- a small validator for the subset of JSON Schema that docs/check-schema.json uses ------------------


def validate(value: Any, schema: dict[str, Any], path: str = "$") -> list[str]:
    errors: list[str] = []
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "number": (int, float), "null": type(None)}
    if "const" in schema and value != schema["const"]:
        errors.append(f"{path}: {value!r} != {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not in {schema['enum']}")
    if "oneOf" in schema:
        matches = [option for option in schema["oneOf"] if not validate(value, option, path)]
        if len(matches) != 1:
            errors.append(f"{path}: matches {len(matches)} of oneOf")
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        ok = any(
            (isinstance(value, int) and not isinstance(value, bool)) if kind == "integer" else
            (isinstance(value, kinds[kind]) and not (kind == "number" and isinstance(value, bool)))
            for kind in types
        )  # fmt: skip
        if not ok:
            return [*errors, f"{path}: {type(value).__name__} is not {types}"]
    if "pattern" in schema and isinstance(value, str) and not re.search(schema["pattern"], value):
        errors.append(f"{path}: {value!r} does not match {schema['pattern']}")
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        errors.append(f"{path}: {value} < {schema['minimum']}")
    if isinstance(value, dict):
        errors += [f"{path}: missing {key!r}" for key in schema.get("required", []) if key not in value]
        properties = schema.get("properties", {})
        for key, item in value.items():
            if key in properties:
                errors += validate(item, properties[key], f"{path}.{key}")
            elif schema.get("additionalProperties") is False:
                errors.append(f"{path}: unexpected key {key!r}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errors += validate(item, schema["additionalProperties"], f"{path}.{key}")
    if isinstance(value, list) and "items" in schema:
        for index, item in enumerate(value):
            errors += validate(item, schema["items"], f"{path}[{index}]")
    return errors


def test_validator_rejects_a_broken_report() -> None:
    report = run_check(CheckRequest(arguments={"accelerator": "cpu"})).as_dict()
    assert validate(report, SCHEMA) == []
    del report["findings"]
    report["schema_version"] = 2
    errors = validate(report, SCHEMA)
    assert any("missing 'findings'" in error for error in errors)
    assert any("schema_version" in error for error in errors)


# --- the issue's commands, verbatim -------------------------------------------------------------------


@pytest.mark.parametrize("args", ISSUE_COMMANDS)
def test_issue_commands_work_verbatim(capsys: pytest.CaptureFixture[str], args: str) -> None:
    code, out = check(capsys, args)
    assert code == 0, out
    assert "VALID: 0 error(s)" in out
    assert "construction: a real" in out
    assert "SingleDeviceStrategy" in out


def test_fabric_issue_command_resolves_bf16_mixed_on_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check_json(capsys, ISSUE_COMMANDS[1])
    assert code == 0
    assert report["resolved"]["accelerator"] == "cpu"
    assert report["resolved"]["precision"] == "bf16-mixed"
    assert report["resolved"]["precision_plugin"] == "MixedPrecision"
    assert report["evidence"] == {**report["evidence"], "level": "construction", "constructed": True}


# --- exit codes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("--accelerator cpu --devices 2 --strategy ddp", 0),
        ("--accelerator cpu --devices 2 --strategy fsdp_offload_ckpt", 1),
        ("--accelerator cpu --devices 2 --strategy ddp --bogus-flag", 2),
        ("--set cpu_offload=False", 2),  # --set needs a named strategy
        ("--gpu-memory eighty", 2),
        ("--gpu-capability nine", 2),
        ("--cluster kubernetes", 2),
        ("--config /nonexistent/config.yaml", 2),
    ],
)
def test_exit_codes(capsys: pytest.CaptureFixture[str], args: str, expected: int) -> None:
    assert check(capsys, args)[0] == expected


def test_usage_error_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["check", "--set", "cpu_offload=False"])
    assert exit_.value.code == 2
    assert "--set needs a named strategy" in capsys.readouterr().err


def test_strict_turns_warnings_into_rejection(capsys: pytest.CaptureFixture[str]) -> None:
    args = "--accelerator cuda --gpus 8 --devices 8 --num-nodes 4"  # LP713 is a warning
    code, report = check_json(capsys, args)
    assert code == 0
    assert report["valid"]
    assert [f["code"] for f in report["findings"]] == ["LP713"]
    code, report = check_json(capsys, f"{args} --strict")
    assert code == 1
    assert not report["valid"]
    assert report["strict"]


# --- every documented check code: the failing example fires it, the fixed one does not ------------------


def _codes_of(capsys: pytest.CaptureFixture[str], command: str) -> list[str]:
    args = command.removeprefix("lightning-presets check").strip()
    _, report = check_json(capsys, args)
    assert validate(report, SCHEMA) == []
    return [finding["code"] for finding in report["findings"]]


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.code)
def test_documented_failing_example_fires(capsys: pytest.CaptureFixture[str], code: Any) -> None:
    assert code.code in _codes_of(capsys, code.fails)


@pytest.mark.parametrize("code", CODES, ids=lambda code: code.code)
def test_documented_fixed_example_passes(capsys: pytest.CaptureFixture[str], code: Any) -> None:
    codes = _codes_of(capsys, code.fixed)
    assert code.code not in codes
    assert code.severity != "error" or not any(c == code.code for c in codes)


def test_codes_are_unique_and_in_the_check_range() -> None:
    numbers = [code.code for code in CODES]
    assert len(numbers) == len(set(numbers))
    assert all(re.fullmatch(r"LP7\d\d", number) for number in numbers)


# --- findings: Lightning's text, our codes, did you mean, valid splits -----------------------------------


def test_lightning_error_keeps_its_text_and_our_guard_adds_its_code(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = check_json(capsys, "--accelerator cpu --devices 2 --strategy fsdp_offload_ckpt --precision 64-true")
    by_code = {finding["code"]: finding for finding in report["findings"]}
    assert "is not supported in FSDP" in by_code["LP700"]["message"]
    assert by_code["LP700"]["source"] == "lightning"
    assert by_code["LP101"]["source"] == "guard"  # the preset's guards on the requested values, read as Lightning
    assert by_code["LP101"]["level"] == "syntax"


def test_the_syntax_fallback_reads_tpu_as_lightning_does(capsys: pytest.CaptureFixture[str]) -> None:
    """``--accelerator tpu`` is Lightning's XLA accelerator: no false LP503 when torch_xla stops the construction."""
    _, report = check_json(capsys, "--mode fabric --accelerator tpu --devices 8 --strategy xla_fsdp_ckpt")
    assert "LP503" not in [finding["code"] for finding in report["findings"]]
    _, report = check_json(capsys, "--mode fabric --accelerator cuda --gpus 8 --devices 8 --strategy xla_fsdp_ckpt")
    assert "LP503" in [finding["code"] for finding in report["findings"]]


def test_tp2d_precision_rule_runs_for_fabric_too(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = check_json(
        capsys, "--mode fabric --accelerator cpu --devices 2 --strategy tp2d_hybrid --precision 16-mixed"
    )
    codes = [finding["code"] for finding in report["findings"]]
    assert "LP205" in codes


def test_every_problem_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --strategy tp2d_hybrid --set tensor_parallel_size=3 "
            "--cluster slurm --env SLURM_NTASKS_PER_NODE=4 --env SLURM_NNODES=2")  # fmt: skip
    code, report = check_json(capsys, args)
    codes = {finding["code"] for finding in report["findings"]}
    assert code == 1
    assert {"LP201", "LP203", "LP705", "LP706"} <= codes
    lp201 = next(f for f in report["findings"] if f["code"] == "LP201")
    assert "valid (data, tensor) splits for 32 device(s): (32, 1), (16, 2), (8, 4), (4, 8)" in lp201["hint"]
    assert report["resolved"]["device_mesh"] == {"data_parallel": 4, "tensor_parallel": 3}


@pytest.mark.parametrize(
    ("args", "code", "suggestion"),
    [
        ("--strategy fsdp_ofload_ckpt", "LP701", "'fsdp_offload_ckpt'"),
        ("--strategy dpp", "LP701", "'ddp'"),
        ("--precision bf16_mixed", "LP702", "'bf16-mixed'"),
        ("--accelerator cdua", "LP703", "'cuda'"),
    ],
)
def test_unknown_names_get_did_you_mean(
    capsys: pytest.CaptureFixture[str], args: str, code: str, suggestion: str
) -> None:
    exit_code, report = check_json(capsys, args)
    finding = next(f for f in report["findings"] if f["code"] == code)
    assert exit_code == 1
    assert f"did you mean {suggestion}" in finding["hint"] or f"did you mean {suggestion}," in finding["hint"]
    assert report["evidence"]["level"] == "syntax"
    assert report["resolved"] is None


def test_unknown_set_key_of_a_preset_is_lp006(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = check_json(
        capsys, "--accelerator cuda --gpus 8 --devices 8 --strategy fsdp_offload_ckpt --set sharding_stratgy=X"
    )
    lp006 = next(f for f in report["findings"] if f["code"] == "LP006")
    assert "did you mean 'sharding_strategy'" in lp006["hint"]


def test_set_values_are_python_literals(capsys: pytest.CaptureFixture[str]) -> None:
    code, report = check_json(
        capsys,
        "--accelerator cuda --gpus 8 --devices 8 --strategy tp2d_hybrid --set data_parallel_size=2 "
        "--set tensor_parallel_size=4 --precision bf16-mixed",
    )
    assert code == 0, report["findings"]
    assert report["request"]["overrides"] == {"data_parallel_size": 2, "tensor_parallel_size": 4}
    assert report["resolved"]["device_mesh"] == {"data_parallel": 2, "tensor_parallel": 4}


def test_cuda_visible_devices_is_respected(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = check_json(capsys, "--accelerator cuda --gpus 8 --devices 4 --env CUDA_VISIBLE_DEVICES=0,1,2,3")
    assert report["valid"]
    assert report["evidence"]["simulated"]["gpus_visible"] == 4
    assert report["resolved"]["devices_per_node"] == 4


def test_gpu_accelerator_without_gpus_says_how_to_simulate_them(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = check_json(capsys, "--accelerator cuda --devices 8")
    lp710 = next(f for f in report["findings"] if f["code"] == "LP710")
    assert "--gpus" in lp710["hint"]
    assert any(f["code"] == "LP700" for f in report["findings"])


@pytest.mark.parametrize(
    ("cluster", "environment"),
    [("slurm", "SLURMEnvironment"), ("torchelastic", "TorchElasticEnvironment"), ("lsf", "LSFEnvironment"),
     ("none", "LightningEnvironment")],
)  # fmt: skip
def test_simulated_clusters_are_detected_by_lightning(
    capsys: pytest.CaptureFixture[str], cluster: str, environment: str
) -> None:
    code, report = check_json(
        capsys, f"--accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --strategy ddp --cluster {cluster}"
    )
    assert report["resolved"]["cluster_environment"] == environment
    assert report["resolved"]["world_size"] == 16
    assert code == 0  # with cluster none, LP713 is only a warning


def test_check_leaves_the_environment_as_it_was(capsys: pytest.CaptureFixture[str]) -> None:
    before = dict(os.environ)
    check(capsys, "--accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --strategy ddp --cluster lsf --env FOO_BAR=1")
    check(capsys, "--accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --strategy ddp --cluster slurm")
    assert dict(os.environ) == before


# --- config file and PL_TRAINER_* ---------------------------------------------------------------------


def test_config_file_trainer_section_under_the_flags(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "seed_everything: 1\ntrainer:\n  accelerator: cpu\n  devices: 2\n  strategy: fsdp_offload_ckpt\n"
        "  max_epochs: 3\n  callbacks: []\nmodel:\n  hidden: 8\n",
        encoding="utf-8",
    )
    code, report = check_json(capsys, f"--config {config}")
    assert code == 1
    assert "LP101" in [f["code"] for f in report["findings"]]
    assert any("trainer.callbacks" in note for note in report["notes"])
    code, report = check_json(capsys, f"--config {config} --strategy ddp")
    assert code == 0
    assert report["resolved"]["strategy_class"].endswith("DDPStrategy")


def test_config_file_class_path_strategy(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "trainer:\n  accelerator: cpu\n  devices: 2\n  strategy:\n"
        "    class_path: lightning.pytorch.strategies.DDPStrategy\n"
        "    init_args:\n      start_method: bogus\n",
        encoding="utf-8",
    )
    code, report = check_json(capsys, f"--config {config}")
    assert code == 1
    assert any("bogus" in f["message"] for f in report["findings"] if f["code"] == "LP700")


def test_pl_trainer_variables_apply_as_in_lightning(capsys: pytest.CaptureFixture[str]) -> None:
    _, report = check_json(capsys, "--accelerator cpu --env PL_TRAINER_DEVICES=2 --env PL_TRAINER_STRATEGY=ddp")
    assert report["resolved"]["devices_per_node"] == 2
    assert report["resolved"]["strategy_class"].endswith("DDPStrategy")
    _, report = check_json(capsys, "--accelerator cpu --devices 1 --env PL_TRAINER_DEVICES=2")
    assert report["resolved"]["devices_per_node"] == 1  # an explicit argument wins, as in Lightning


# --- nothing launched, CUDA never initialized ------------------------------------------------------------


def _children() -> list[int]:
    me = str(os.getpid())
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == me:
                children.append(int(entry))
    return children


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")
def test_no_cuda_initialized_and_no_child_process(
    capsys: pytest.CaptureFixture[str], forbid_cuda_init: list[str]
) -> None:
    before = _children()
    for args in (
        "--accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --strategy fsdp_offload_ckpt --precision bf16-mixed "
        "--cluster slurm",
        "--accelerator cuda --gpus 8 --devices 8 --strategy ddp_spawn --precision 16-mixed",
        "--accelerator cpu --devices 2 --strategy ddp_fork",
        "--mode fabric --accelerator cuda --gpus 8 --devices 8 --strategy deepspeed --precision bf16-mixed",
        "--accelerator cuda --gpus 8 --devices 8 --strategy tp2d_hybrid --cluster torchelastic",
    ):
        check(capsys, args)
    assert forbid_cuda_init == []
    assert not torch.cuda.is_initialized()
    assert multiprocessing.active_children() == []
    assert _children() == before
    assert not torch.distributed.is_initialized()


def test_python_m_runs_the_check_in_a_fresh_interpreter() -> None:
    # a fresh interpreter: the claim is `python -m` from a cold start (Lightning's import-time banners silenced)
    result = subprocess.run(
        [sys.executable, "-m", "lightning_presets", "check", *shlex.split(ISSUE_COMMANDS[0]), "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["valid"]
    assert validate(report, SCHEMA) == []
    assert "GPU available" not in result.stdout + result.stderr  # Lightning's banners are silenced


# --- golden outputs ----------------------------------------------------------------------------------------

GOLDEN_CASES = {
    "issue_trainer_cpu": ISSUE_COMMANDS[0],
    "issue_fabric_auto": ISSUE_COMMANDS[1],
    "fsdp_offload_h100_slurm": "--accelerator cuda --gpus 8 --gpu-memory 80GiB --devices 8 --num-nodes 4 "
    "--strategy fsdp_offload_ckpt --precision bf16-mixed --cluster slurm",
    "fsdp_offload_cpu_64": "--accelerator cpu --devices 2 --strategy fsdp_offload_ckpt --precision 64-true",
    "tp2d_bad_split_torchelastic": "--accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --strategy tp2d_hybrid "
    "--set tensor_parallel_size=3 --cluster torchelastic --env WORLD_SIZE=16",
    "ddp_interactive": "--accelerator cpu --devices 2 --strategy ddp --interactive",
    "unknown_names": "--strategy fsdp_ofload_ckpt --precision bf16_mixed --accelerator cdua",
}


def _normalized(text: str) -> str:
    return re.sub(r"checked in [0-9.]+ ms(\s*\([^)]*\))?", "checked in <time> ms", text)


def _json_normalized(text: str) -> str:
    data = json.loads(text)
    data.pop("elapsed_ms")
    return json.dumps(data, indent=2, ensure_ascii=False) + "\n"


@pytest.mark.parametrize("name", sorted(GOLDEN_CASES))
def test_golden_outputs(capsys: pytest.CaptureFixture[str], name: str) -> None:
    args = GOLDEN_CASES[name]
    _, text = check(capsys, args)
    _, data = check(capsys, f"{args} --json")
    outputs = {f"check_{name}.txt": _normalized(text), f"check_{name}.json": _json_normalized(data)}
    for file_name, output in outputs.items():
        path = GOLDEN / file_name
        if UPDATE:
            path.write_text(output, encoding="utf-8")
        expected = path.read_text(encoding="utf-8")
        assert output == expected, f"{file_name} differs; regenerate with LP_UPDATE_GOLDEN=1 pytest {__file__}"


# --- fuzz: any flag combination gives findings or a usage error, never a traceback -------------------------

_NAMES = st.sampled_from(["auto", "ddp", "fsdp", "deepspeed", "fsdp_offload_ckpt", "tp2d_hybrid", "single_device",
                          "ddp_spawn", "xla", "dp", "nonsense", "FSDP", ""])  # fmt: skip
_PRECISION = st.sampled_from(["32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true", "16", "32",
                              "transformer-engine", "8-bit", ""])  # fmt: skip
_ACCELERATOR = st.sampled_from(["cpu", "cuda", "gpu", "auto", "mps", "tpu", "hpu", "x"])
_DEVICES = st.one_of(st.integers(-2, 10).map(str), st.sampled_from(["auto", "0,1", "1,", "a", "-1", "0"]))
_ENV = st.sampled_from(["SLURM_NTASKS=7", "SLURM_NTASKS_PER_NODE=3", "SLURM_NNODES=x", "WORLD_SIZE=5",
                        "LOCAL_WORLD_SIZE=0", "CUDA_VISIBLE_DEVICES=", "CUDA_VISIBLE_DEVICES=9,0",
                        "SLURM_JOB_NAME=bash", "PL_TRAINER_DEVICES=3", "PL_TRAINER_STRATEGY=bogus",
                        "NODE_RANK=1"])  # fmt: skip
_SET = st.sampled_from(["cpu_offload=False", "sharding_strategy=NOPE", "tensor_parallel_size=0", "bogus=1",
                        "data_parallel_size='auto'", "start_method=fork"])  # fmt: skip


@st.composite
def _argv(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    for flag, values in (
        ("--mode", st.sampled_from(["trainer", "fabric"])), ("--accelerator", _ACCELERATOR), ("--devices", _DEVICES),
        ("--num-nodes", st.integers(-1, 5).map(str)), ("--strategy", _NAMES), ("--precision", _PRECISION),
        ("--gpus", st.integers(0, 9).map(str)),
        ("--cluster", st.sampled_from(["none", "slurm", "torchelastic", "lsf"])),
        ("--gpu-capability", st.sampled_from(["7.0", "8.0", "9.0"])),
    ):  # fmt: skip
        if draw(st.booleans()):
            argv += [flag, draw(values)]
    argv += [part for value in draw(st.lists(_ENV, max_size=3)) for part in ("--env", value)]
    argv += [part for value in draw(st.lists(_SET, max_size=2)) for part in ("--set", value)]
    for flag in ("--interactive", "--strict", "--json"):
        if draw(st.booleans()):
            argv.append(flag)
    return argv


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=_argv())
def test_fuzz_only_findings_or_usage_errors(
    capsys: pytest.CaptureFixture[str], forbid_cuda_init: list[str], argv: list[str]
) -> None:
    code, out = check(capsys, argv)
    capsys.readouterr()
    assert code in (0, 1, 2)
    if code != 2 and "--json" in argv:
        assert validate(json.loads(out), SCHEMA) == []
    assert forbid_cuda_init == []
    assert not torch.cuda.is_initialized()


def test_precision_preset_plugin_is_built_on_the_simulated_node(capsys: pytest.CaptureFixture[str]) -> None:
    args = "--accelerator cuda --gpus 8 --devices 8 --strategy fsdp_offload_ckpt --plugin bf16-fp32-reduce"
    code, report = check_json(capsys, args)
    assert code == 0, report["findings"]
    assert report["resolved"]["precision"] == "bf16-mixed"
    assert report["resolved"]["precision_plugin"] != "FSDPPrecision"  # the preset's own plugin class
    assert "lightning_presets.precision('bf16-fp32-reduce')" in report["call"]


def test_fabric_mode_leaves_out_trainer_only_config_keys(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(
        "trainer:\n  accelerator: cpu\n  devices: 2\n  strategy: ddp\n  max_epochs: 3\n", encoding="utf-8"
    )
    code, report = check_json(capsys, f"--mode fabric --config {config}")
    assert code == 0, report["findings"]
    assert report["notes"] == ["Fabric takes no max_epochs; left out"]
    assert report["resolved"]["strategy_class"] == "lightning.fabric.strategies.ddp.DDPStrategy"


def test_check_works_under_python_O() -> None:
    # a fresh interpreter: -O (assert statements stripped) is fixed when the interpreter starts
    result = subprocess.run(
        [sys.executable, "-O", "-m", "lightning_presets", "check", "--accelerator", "cpu", "--devices", "2",
         "--strategy", "fsdp_offload_ckpt", "--json"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "LP101" in [finding["code"] for finding in json.loads(result.stdout)["findings"]]


def test_the_no_cuda_guard_can_fail(forbid_cuda_init: list[str]) -> None:
    """What the CUDA assertions above rely on: an initialisation attempt is recorded, even when it is swallowed."""
    with contextlib.suppress(RuntimeError):
        torch.cuda.current_device()
    assert len(forbid_cuda_init) == 1
    assert "current_device" in forbid_cuda_init[0]


# --- the Trainer's accumulate_grad_batches reaches DeepSpeed's batch arithmetic (LP407) before launch --------------

_DS_CONFIG = '{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}'
_DS = f"--strategy deepspeed_zero2_offload --accelerator cuda --gpus 8 --devices 8 --set 'config={_DS_CONFIG}'"


@pytest.mark.skipif(not is_importable("deepspeed"), reason="deepspeed is not installed")
@pytest.mark.parametrize(
    ("accumulation", "rejected"),
    [("--accumulate-grad-batches 1", True), ("--accumulate-grad-batches 2", False),
     ("--set accumulate_grad_batches=1", True), ("--set accumulate_grad_batches=2", False)],
)  # fmt: skip
def test_lp407_sees_accumulate_grad_batches_from_a_flag_or_set(
    capsys: pytest.CaptureFixture[str], accumulation: str, rejected: bool
) -> None:
    code, report = check_json(capsys, f"{_DS} {accumulation}")
    assert ("LP407" in [f["code"] for f in report["findings"]]) is rejected
    assert code == (1 if rejected else 0)
    assert validate(report, SCHEMA) == []


@pytest.mark.skipif(not is_importable("deepspeed"), reason="deepspeed is not installed")
def test_lp407_sees_accumulate_grad_batches_from_a_config_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("trainer:\n  accumulate_grad_batches: 1\n")
    code, report = check_json(capsys, f"{_DS} --config {config}")
    assert code == 1
    (finding,) = [f for f in report["findings"] if f["code"] == "LP407"]
    assert "accumulate_grad_batches=1" in finding["message"]
    assert "4 × 1 × 8 = 32" in finding["hint"]


def test_accumulate_grad_batches_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = check(capsys, "--accumulate-grad-batches 0")
    assert code == 2


@pytest.mark.parametrize(("written", "shown"), [(-1, "devices=-1"), ("auto", "devices='auto'"), (None, "devices=0")])
def test_launch_findings_repeat_devices_as_the_user_wrote_it(written: Any, shown: str) -> None:
    """A SLURM job without GPUs: the launch rules count 0 devices per node, but the call they repeat is the user's."""
    arguments: dict[str, Any] = {"strategy": "ddp_static_graph", "accelerator": "cuda"}
    if written is not None:
        arguments["devices"] = written
    report = run_check(CheckRequest(arguments=arguments, gpus=0, cluster="slurm"))
    messages = {finding.code: finding.message for finding in report.findings}
    assert messages["LP705"].startswith(f"`Trainer({shown})`"), messages
    assert messages["LP707"].startswith(f"`Trainer({shown}, num_nodes=1)`"), messages


@pytest.mark.parametrize(("written", "shown"), [(-1, "devices=-1"), ([0], "devices=[0]"), ("auto", "devices=1"),
                                                (None, "devices=1"), (1, "devices=1")])  # fmt: skip
def test_preset_findings_repeat_devices_as_the_user_wrote_it(written: Any, shown: str) -> None:
    """One GPU: LP305 (DDP on one process) repeats ``devices=`` as written; when nothing was, the count it resolved."""
    arguments: dict[str, Any] = {"strategy": "ddp_static_graph", "accelerator": "cuda"}
    if written is not None:
        arguments["devices"] = written
    report = run_check(CheckRequest(arguments=arguments, gpus=1))
    messages = {finding.code: finding.message for finding in report.findings}
    assert messages["LP305"].startswith(f"`Trainer(strategy='ddp_static_graph', {shown}, num_nodes=1)`"), messages
