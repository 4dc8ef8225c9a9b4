"""``lightning-presets list`` and ``show``: provenance, status, guards and the plain-Lightning equivalent."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from helpers import run
from lightning_presets.cli import main


def test_list_shows_every_builtin_with_provenance(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "list")
    assert code == 0
    row = next(line for line in out.splitlines() if line.startswith("fsdp_offload_ckpt "))
    assert row.split()[:3] == ["fsdp_offload_ckpt", "strategy", "fsdp"]
    assert "Trainer, Fabric" in row
    assert "lightning-presets" in row
    assert row.rstrip().endswith("ok")


def test_list_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "list", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["schema"] == "lightning-presets/list"
    assert data["schema_version"] == 1
    by_name = {row["name"]: row for row in data["presets"]}
    tp = by_name["tp2d_hybrid"]
    assert tp["family"] == "model_parallel"
    assert tp["status"] == "ok"
    assert tp["kind"] == "strategy"
    assert tp["targets"] == ["trainer", "fabric", "pytorch_lightning", "lightning_fabric"]
    assert tp["distribution"] == "lightning-presets"
    assert tp["version"]
    assert tp["entry_point"] == "lightning_presets.strategies.model_parallel:TP2D_HYBRID"
    assert set(tp) >= {"extras", "description", "findings"}


def test_list_includes_broken_entries_with_their_finding(
    capsys: pytest.CaptureFixture[str], broken_entry: None
) -> None:
    code, out = run(capsys, "list", "--json")
    row = next(row for row in json.loads(out)["presets"] if row["name"] == "acme_broken")
    assert code == 0
    assert row["status"] == "broken"
    assert row["family"] is None
    assert [finding["code"] for finding in row["findings"]] == ["LP004"]
    code, out = run(capsys, "list")
    assert "acme_broken" in out
    assert "broken" in out
    assert "[LP004]" in out
    assert run(capsys, "list", "--strict")[0] == 1


def test_list_shows_denied_entries(
    capsys: pytest.CaptureFixture[str], broken_entry: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", "unknown")  # the fake entry point has no distribution
    _, out = run(capsys, "list", "--json")
    row = next(row for row in json.loads(out)["presets"] if row["name"] == "acme_broken")
    assert row["status"] == "denied"
    assert row["findings"] == []


def test_list_imports_neither_lightning_nor_optional_backends() -> None:
    code = textwrap.dedent(
        """
        import sys
        from lightning_presets.cli import main
        assert main(["list"]) == 0
        heavy = sorted(name for name in sys.modules if name.split(".")[0] in
                       ("lightning", "pytorch_lightning", "lightning_fabric", "deepspeed", "torch_xla",
                        "transformer_engine", "torchao", "bitsandbytes"))
        print("HEAVY", heavy)
        """
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert "HEAVY []" in result.stdout


def test_show_human(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "show", "fsdp_offload_ckpt")
    assert code == 0
    assert out.startswith("fsdp_offload_ckpt (strategy preset, family fsdp)")
    assert 'sharding_strategy = "FULL_SHARD"' in out
    assert "cpu_offload = True" in out
    assert "LP101  error     construction  FSDP needs CUDA devices" in out
    assert "tested with" in out
    assert 'strategy = FSDPStrategy(sharding_strategy="FULL_SHARD", cpu_offload=True, state_dict_type="sharded")' in out
    assert "from lightning.pytorch.strategies import FSDPStrategy" in out


def _plain(name: str, kind: str, capsys: pytest.CaptureFixture[str]) -> str:
    code, out = run(capsys, "show", name, "--json")
    assert code == 0
    return str(json.loads(out)["preset"]["plain_lightning"][kind])


@pytest.mark.parametrize("kind", ["trainer", "fabric"])
def test_show_plain_lightning_code_builds_the_same_strategy(capsys: pytest.CaptureFixture[str], kind: str) -> None:
    source = _plain("fsdp_offload_ckpt", kind, capsys)
    compile(source, "<plain>", "exec")
    namespace: dict[str, Any] = {}
    exec(source.split("\n" + kind)[0], namespace)  # everything before the Trainer/Fabric line
    strategy = namespace["strategy"]
    assert type(strategy).__name__ == "FSDPStrategy"
    assert type(strategy).__module__.startswith(f"lightning.{'pytorch' if kind == 'trainer' else 'fabric'}")
    assert strategy.cpu_offload.offload_params is True


def test_show_fabric_model_parallel_names_the_parallelize_function(capsys: pytest.CaptureFixture[str]) -> None:
    source = _plain("tp2d_hybrid", "fabric", capsys)
    assert "parallelize_fn=parallelize" in source
    assert "# parallelize: your function" in source
    compile(source, "<plain>", "exec")


def test_show_json(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "show", "tp2d_hybrid", "--json")
    data = json.loads(out)
    preset = data["preset"]
    assert code == 0
    assert data["schema"] == "lightning-presets/show"
    assert data["schema_version"] == 1
    assert preset["arguments"] == {"data_parallel_size": '"auto"', "tensor_parallel_size": '"auto"'}
    assert {"code": "LP201", "severity": "error", "stage": "construction",
            "title": "data × tensor parallel size differs from the world size"} in preset["guards"]  # fmt: skip
    assert preset["classes"] == {"trainer": "ModelParallelStrategy", "fabric": "ModelParallelStrategy"}
    assert isinstance(preset["tested_with"], dict)


def test_show_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "show", "fsdp_ofload_ckpt")
    assert code == 1
    assert "[LP010]" in out
    assert "did you mean 'fsdp_offload_ckpt'" in out
    code, out = run(capsys, "show", "fsdp_ofload_ckpt", "--json")
    assert code == 1
    assert json.loads(out)["findings"][0]["code"] == "LP010"


def test_show_broken_entry_exits_1(capsys: pytest.CaptureFixture[str], broken_entry: None) -> None:
    code, out = run(capsys, "show", "acme_broken")
    assert code == 1
    assert re.search(r"^  status +broken$", out, re.MULTILINE)
    assert "[LP004]" in out


def test_usage_error_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["show"])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        main(["frobnicate"])
    assert exit_.value.code == 2


def test_python_m_and_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "lightning_presets", "--version"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0
    assert result.stdout.startswith("lightning-presets ")


def test_list_includes_precision_presets(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(capsys, "list", "--json")
    kinds = {row["name"]: row["kind"] for row in json.loads(out)["presets"]}
    assert kinds["fsdp_offload_ckpt"] == "strategy"
    assert kinds["bf16-fp32-reduce"] == "precision"


def test_show_precision_preset_plain_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "show", "bf16-fp32-reduce", "--json")
    preset = json.loads(out)["preset"]
    assert code == 0
    assert preset["kind"] == "precision"
    assert preset["classes"]["trainer"] == "FSDPPrecision"
    source = preset["plain_lightning"]["trainer"]
    assert "plugin = FSDPPrecision(" in source
    assert "trainer = Trainer(plugins=[plugin])" in source
    compile(source, "<plain>", "exec")


def test_show_lists_every_override_a_preset_accepts(capsys: pytest.CaptureFixture[str]) -> None:
    """What `show` says is accepted is exactly what lightning_presets.strategy() accepts (issue: config,
    process_group_backend and partition_activations were accepted but not shown)."""
    import lightning_presets

    code, out = run(capsys, "show", "deepspeed_zero3_offload_ckpt", "--json")
    assert code == 0
    accepted = json.loads(out)["preset"]["also_accepted"]
    for key in ("config", "process_group_backend", "partition_activations"):
        assert key in accepted["trainer"]
        assert key in accepted["fabric"]
    code, text = run(capsys, "show", "deepspeed_zero3_offload_ckpt")
    assert "partition_activations" in text
    with pytest.raises(lightning_presets.PresetConfigError) as excinfo:
        lightning_presets.strategy("deepspeed_zero3_offload_ckpt", not_an_argument=1)
    valid = excinfo.value.findings[0].hint.split("valid keys: ")[1].split(", ")
    preset = lightning_presets.get_preset("deepspeed_zero3_offload_ckpt")
    assert sorted(set(valid) - set(preset.init_params)) == accepted["trainer"]


MISSING = {"deepspeed": ("deepspeed_zero2_offload", "deepspeed_zero3_offload_ckpt"), "bitsandbytes": ("nf4-bnb",),
           "transformer_engine": ("fp8-te",), "torch_xla": ("xla_fsdp_ckpt",)}  # fmt: skip


def test_list_show_and_doctor_agree_on_a_preset_whose_dependency_is_missing(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With DeepSpeed, bitsandbytes, Transformer Engine and torch_xla made missing (``sys.modules[name] = None``
    blocks an import, as the requirements helper reads it), their five presets are not usable in all three
    commands, each with the line that installs the dependency; doctor does not fail the environment for it."""
    for module in MISSING:
        monkeypatch.setitem(sys.modules, module, None)
    affected = {name for names in MISSING.values() for name in names}
    code, out = run(capsys, "list", "--json")
    rows = {row["name"]: row for row in json.loads(out)["presets"]}
    assert code == 0
    assert {name for name, row in rows.items() if row["status"] != "ok"} == affected
    for name in affected:
        assert [finding["code"] for finding in rows[name]["findings"]] == ["LP007"], rows[name]
        assert "pip install" in rows[name]["findings"][0]["hint"]
    assert run(capsys, "list", "--strict")[0] == 1
    code, out = run(capsys, "show", "nf4-bnb")
    assert code == 1
    assert "missing" in out
    assert "[LP007]" in out
    assert "pip install 'bitsandbytes" in out
    code, out = run(capsys, "doctor", "--json")
    report = json.loads(out)
    assert report["catalog"]["usable"] == len(rows) - len(affected)
    assert {row["name"] for row in report["catalog"]["problems"]} == affected
    assert all(row["install"] for row in report["catalog"]["problems"])
    for module in MISSING:
        assert report["optional_dependencies"][module]["status"] == "missing"
    assert code == 0  # an environment without an optional package is fine for the jobs that do not use it
    code, out = run(capsys, "doctor")
    assert f"{len(rows) - len(affected)} usable preset(s); {len(affected)} not usable" in out
    assert "deepspeed_zero2_offload from lightning-presets" in out
