"""``lightning-presets list`` and ``show``: provenance, status, guards and the plain-Lightning equivalent."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import warnings
from typing import Any

import pytest
import torch

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
    assert (
        'strategy = FSDPStrategy(sharding_strategy="FULL_SHARD", cpu_offload=True, state_dict_type="sharded", '
        "auto_wrap_policy={MyBlock}, activation_checkpointing_policy={MyBlock})"
    ) in out
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
    namespace["MyBlock"] = torch.nn.Linear  # the block class the printed code names
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


class MyBlock(torch.nn.Module):
    """The repeated block of the model the printed code is compared on (the name `show` prints)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


class _Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(MyBlock() for _ in range(3))
        self.head = torch.nn.Linear(8, 2)


def _normal(value: Any) -> Any:
    """A strategy's or plugin's attribute in a comparable form: data as is, wrap policies as their classes, objects
    without a readable value as their type."""
    import enum

    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    if isinstance(value, ModuleWrapPolicy):
        return ("ModuleWrapPolicy", sorted(cls.__qualname__ for cls in value._module_classes))
    if isinstance(value, dict):
        return {key: _normal(each) for key, each in value.items()}
    if isinstance(value, (list, tuple)):
        return [_normal(each) for each in value]
    if isinstance(value, (bool, int, float, str, type(None), enum.Enum, torch.dtype)):
        return value
    text = repr(value)
    return type(value).__qualname__ if " at 0x" in text or " object>" in text else text


def _differences(ours: Any, theirs: Any, path: str = "") -> list[str]:
    """The attribute paths (``config.zero_force_ds_cpu_optimizer``) where two normalised states differ."""
    if isinstance(ours, dict) and isinstance(theirs, dict):
        keys = sorted(set(ours) | set(theirs), key=str)
        return [
            found
            for key in keys
            for found in _differences(ours.get(key), theirs.get(key), f"{path}.{key}" if path else str(key))
        ]
    return [] if ours == theirs else [path]


def _state(instance: Any) -> dict[str, Any]:
    return {key: _normal(value) for key, value in vars(instance).items() if not key.startswith(("_lp", "lp_"))}


def _built(name: str, kind: str, source: str, simulated_gpus: Any) -> tuple[Any, Any]:
    """(what the preset builds, with its setup-time hooks applied to a model of MyBlocks; what the printed plain code
    builds, executed) on 8 simulated GPUs, with the printed code's num_nodes and devices for both."""
    from lightning.fabric import Fabric
    from lightning.pytorch import Trainer

    import lightning_presets

    if name == "nf4-bnb":
        import bitsandbytes  # noqa: F401  (imported before CUDA is simulated: its import reads CUDA's streams then)
    simulated_gpus(8)
    namespace: dict[str, Any] = {"MyBlock": MyBlock, "parallelize": lambda module, mesh: module}
    exec(compile(source, f"<show {name} {kind}>", "exec"), namespace)
    sizes = {key: namespace[key] for key in ("num_nodes", "devices") if key in namespace}
    build = Trainer if kind == "trainer" else Fabric
    if "variable" not in namespace and "plugin" in namespace:  # a precision preset: the plugin
        plugin = lightning_presets.precision(name, target=kind)
        return plugin, namespace["plugin"]
    made = namespace[kind]
    theirs = made.strategy if kind == "trainer" else made._strategy
    extra = {"parallelize_fn": namespace["parallelize"]} if "parallelize_fn=" in source else {}
    preset = build(strategy=lightning_presets.strategy(name, target=kind, **extra), **sizes)
    ours = preset.strategy if kind == "trainer" else preset._strategy
    apply_blocks = getattr(ours, "_lp_apply_blocks", None)  # the FSDP presets' setup-time wrapping and checkpointing
    if apply_blocks is not None:
        apply_blocks(_Model())
    return ours, theirs


SHOWN = [
    pytest.param(name, kind, id=f"{name}-{kind}")
    for name in [
        "ddp_bf16_compress",
        "ddp_static_graph",
        "deepspeed_zero2_offload",
        "deepspeed_zero3_offload_ckpt",
        "fsdp2",
        "fsdp2_offload_ckpt",
        "fsdp_grad_op",
        "fsdp_hybrid_shard",
        "fsdp_offload_ckpt",
        "tp2d_hybrid",
        "bf16-fp32-reduce",
        "fp8-torchao",
        "nf4-bnb",
    ]
    for kind in ("trainer", "fabric")
]


def test_every_builtin_preset_is_compared_below() -> None:
    """Every built-in preset is in SHOWN but xla_fsdp_ckpt (its strategy needs a TPU to be built) and fp8-te
    (Transformer Engine needs CUDA to import)."""
    import lightning_presets
    from lightning_presets.registry.catalog import precision_catalog

    names = {*lightning_presets.presets(), *precision_catalog().presets}
    assert names - {param.values[0] for param in SHOWN} == {"xla_fsdp_ckpt", "fp8-te"}


@pytest.mark.parametrize(("name", "kind"), SHOWN)
def test_the_printed_plain_code_builds_what_the_preset_builds(
    name: str, kind: str, capsys: pytest.CaptureFixture[str], simulated_gpus: Any
) -> None:
    """`show`'s plain-Lightning code, executed on simulated GPUs, builds the strategy (or plugin) the preset builds
    once its hooks have run on a model (auto-wrap, activation checkpointing, offload, sharding, mesh sizes): every
    attribute is the same, except what the printed "not expressed" lines name."""
    from lightning_presets.tools.catalog import find, plain

    listed = find(name)
    assert listed is not None
    assert listed.entry.status == "ok", f"{name}: its optional dependency is not installed"
    printed = plain(listed.item, kind)
    assert printed is not None
    code, out = run(capsys, "show", name, "--json")
    assert code == 0
    shown = json.loads(out)["preset"]
    assert shown["plain_lightning"][kind] == printed.code
    assert shown["plain_lightning_missing"][kind] == list(printed.missing)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ours, theirs = _built(name, kind, printed.code, simulated_gpus)
    assert type(theirs).__name__ in {cls.__name__ for cls in type(ours).__mro__}
    differences = _differences(_state(ours), _state(theirs))
    unexplained = [path for path in differences if not any(path.split(".")[-1] in line for line in printed.missing)]
    assert unexplained == [], f"{name} ({kind}): the printed code differs in {unexplained}:\n{printed.code}"
    if type(ours).__name__ == "FSDPStrategy":  # the comparison is not vacuous: the hooks' wrapping is compared
        assert "auto_wrap_policy" in str(_state(theirs))
