"""The resume rules (LP801-LP809): each refusal and its accepted neighbour, the hook that runs them before Lightning
loads a checkpoint (Trainer and Fabric), their documented examples, and the real runs that fail without them."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from lightning_presets import PresetConfigError
from lightning_presets.checkpoints import CheckpointFacts
from lightning_presets.core.context import Context
from lightning_presets.core.namespaces import Kind
from lightning_presets.core.rules import Rule
from lightning_presets.guards.resume import RESUME_RULES, Resume, resumable, resume_findings
from lightning_presets.tools.examples import run_example

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from checkpoint_layouts import deepspeed_folder  # noqa: E402

RULES = {each.code: each for each in RESUME_RULES}
FAMILIES = {
    "ddp_static_graph": "ddp", "fsdp2": "model_parallel", "tp2d_hybrid": "model_parallel",
    "fsdp_offload_ckpt": "fsdp", "deepspeed_zero2_offload": "deepspeed", "deepspeed_zero3_offload_ckpt": "deepspeed",
    "xla_fsdp_ckpt": "xla",
}  # fmt: skip


def ctx(preset: str = "fsdp2", devices: int = 2, kind: Kind = "trainer") -> Context:
    return Context(
        preset=preset,
        target=kind,
        kind=kind,
        accelerator="cuda",
        devices_per_node=devices,
        num_nodes=1,
        precision="bf16-mixed",
        precision_plugin="Precision",
        cluster_environment="LightningEnvironment",
        family=FAMILIES[preset],
    )


TRAINER_FILE = CheckpointFacts(
    path="run.ckpt", format="file", writer="trainer", model_key="state_dict", weight_dtypes=("float32",), optimizers=1,
    optimizer_keys="ids", top_level=("state_dict", "optimizer_states", "lr_schedulers", "pytorch-lightning_version"),
)  # fmt: skip
SHARDED = dataclasses.replace(TRAINER_FILE, format="distributed", world_size=2, optimizer_keys="names")
DEEPSPEED = CheckpointFacts(
    path="run.ckpt", format="deepspeed", writer="trainer", world_size=8, model_key="module", optimizers=1,
    optimizer_keys="ids", data_parallel_size=8, model_parallel_size=1, zero_stage=2, zero_shards=8, tag="checkpoint",
    top_level=("module", "lr_schedulers", "pytorch-lightning_version"),
)  # fmt: skip


def resume(facts: CheckpointFacts | None, **changes: Any) -> Resume:
    return Resume(path="run.ckpt", checkpoint=facts, **changes)


def codes(context: Context, state: Resume) -> list[str]:
    return [each.code for each in RESUME_RULES if each(context, state) is not None]


def hint(code: str, context: Context, state: Resume) -> str:
    finding = RULES[code](context, state)
    assert finding is not None
    return finding.hint


def message(code: str, context: Context, state: Resume) -> str:
    finding = RULES[code](context, state)
    assert finding is not None
    return finding.message


# --------------------------------------------------------------------------- each rule: refused and accepted


def test_lp801_a_sharded_folder_into_ddp_and_its_accepted_neighbours() -> None:
    assert codes(ctx("ddp_static_graph"), resume(SHARDED)) == ["LP801"]
    consolidate = hint("LP801", ctx("ddp_static_graph"), resume(SHARDED))
    assert "`python -m lightning_presets convert run.ckpt run.ckpt.consolidated`" in consolidate
    assert codes(ctx("ddp_static_graph"), resume(TRAINER_FILE)) == []
    assert codes(ctx("fsdp2"), resume(SHARDED)) == []  # a sharded folder, at another world size too
    assert codes(ctx("fsdp2", devices=8), resume(TRAINER_FILE)) == []  # a full file into a sharded preset
    assert codes(ctx("xla_fsdp_ckpt", kind="fabric"), resume(DEEPSPEED, how="load(...)")) == []  # not checked
    custom = resume(SHARDED, default_checkpoint_io=False)  # a user's CheckpointIO plugin may read folders
    assert codes(ctx("ddp_static_graph"), custom) == []


def test_lp801_deepspeed_and_files() -> None:
    for preset in ("ddp_static_graph", "fsdp2", "fsdp_offload_ckpt"):
        assert codes(ctx(preset), resume(DEEPSPEED)) == ["LP801"]
    assert "`python -m lightning_presets convert run.ckpt run.ckpt.consolidated`" in hint(
        "LP801", ctx("fsdp2"), resume(DEEPSPEED)
    )
    assert codes(ctx("deepspeed_zero2_offload"), resume(TRAINER_FILE, zero_stage=2)) == ["LP801"]
    zero3 = resume(TRAINER_FILE, zero_stage=3)
    assert "load_full_weights=True" in hint("LP801", ctx("deepspeed_zero3_offload_ckpt"), zero3)
    assert codes(ctx("deepspeed_zero3_offload_ckpt"), dataclasses.replace(zero3, load_full_weights=True)) == []


def test_lp802_zero_shards_at_another_data_parallel_size() -> None:
    state = resume(DEEPSPEED, zero_stage=2)
    assert codes(ctx("deepspeed_zero2_offload", devices=4), state) == ["LP802"]
    text = hint("LP802", ctx("deepspeed_zero2_offload", devices=4), state)
    assert "`python -m lightning_presets convert run.ckpt run.ckpt.universal --to universal`" in text
    assert "strategy.config['checkpoint'] = {'load_universal': True}" in text
    assert codes(ctx("deepspeed_zero2_offload", devices=8), state) == []
    assert codes(ctx("deepspeed_zero2_offload", devices=4), dataclasses.replace(state, restores_optimizer=False)) == []
    universal = resume(dataclasses.replace(DEEPSPEED, universal=True), zero_stage=2)
    assert "ds_to_universal" not in hint("LP802", ctx("deepspeed_zero2_offload", devices=4), universal)
    loaded = dataclasses.replace(universal, load_universal=True)
    assert codes(ctx("deepspeed_zero2_offload", devices=4), loaded) == []


def test_lp803_another_zero_stage() -> None:
    assert codes(ctx("deepspeed_zero3_offload_ckpt", devices=8), resume(DEEPSPEED, zero_stage=3)) == ["LP803"]
    stage_one = resume(dataclasses.replace(DEEPSPEED, zero_stage=1), zero_stage=2)
    assert codes(ctx("deepspeed_zero2_offload", devices=8), stage_one) == []  # ZeRO-1 and 2 keep the same files


def test_lp804_no_optimizer_state_while_the_job_restores_one() -> None:
    weights = dataclasses.replace(
        TRAINER_FILE, optimizers=0, optimizer_keys="none", top_level=("state_dict", "pytorch-lightning_version")
    )
    assert codes(ctx("ddp_static_graph"), resume(weights)) == ["LP804"]
    validate = resume(weights, how="validate(ckpt_path=...)", restores_optimizer=False)
    assert codes(ctx("ddp_static_graph"), validate) == []
    assert codes(ctx("ddp_static_graph"), resume(TRAINER_FILE)) == []
    fabric = dataclasses.replace(weights, writer="fabric", model_key="model")
    assert codes(ctx("fsdp2", kind="fabric"), resume(fabric, how="load(...)")) == ["LP804"]
    assert codes(ctx("fsdp2", kind="fabric"), resume(fabric, how="load(...)", restores_optimizer=False)) == []


def test_lp804_accepts_what_lightning_and_fabric_load_without_an_optimizer_state() -> None:
    """LP804's accepted side beside the rule (each case a neighbour of tests/neighbours.py, run there too): the
    Trainer's file with an empty optimizer_states list (a fit without an optimizer) loads; Fabric.load(strict=False)
    skips what the file lacks; Fabric.load of a state whose optimizer key the checkpoint holds; an entry that may be an
    optimizer's own state dict."""
    listed = dataclasses.replace(TRAINER_FILE, optimizers=0, optimizer_keys="none")  # 'optimizer_states': []
    assert "optimizer_states" in listed.top_level
    assert codes(ctx("ddp_static_graph"), resume(listed)) == []
    fabric = dataclasses.replace(listed, writer="fabric", model_key="model", top_level=("model",))
    assert codes(ctx("fsdp2", kind="fabric"), resume(fabric, how="load(...)")) == ["LP804"]
    assert codes(ctx("fsdp2", kind="fabric"), resume(fabric, how="load(...)", strict=False)) == []
    held = dataclasses.replace(fabric, top_level=("model", "optimizer"))
    assert codes(ctx("fsdp2", kind="fabric"), resume(held, how="load(...)", state_optimizers=("optimizer",))) == []
    assert codes(ctx("fsdp2", kind="fabric"), resume(held, how="load(...)", state_optimizers=("opt",))) == ["LP804"]
    unknown = dataclasses.replace(fabric, top_level=("model", "extra"), unknown_entries=("extra",))
    assert codes(ctx("fsdp2", kind="fabric"), resume(unknown, how="load(...)")) == []


def test_lp805_the_trainers_sharded_layout_of_the_other_fsdp_strategy() -> None:
    fsdp_layout = dataclasses.replace(SHARDED, model_key="model")
    assert codes(ctx("fsdp2"), resume(fsdp_layout)) == ["LP805"]
    assert "python -m lightning_presets convert run.ckpt" in hint("LP805", ctx("fsdp2"), resume(fsdp_layout))
    assert codes(ctx("fsdp_offload_ckpt"), resume(SHARDED)) == ["LP805"]  # ModelParallelStrategy's into FSDPStrategy
    assert codes(ctx("fsdp_offload_ckpt"), resume(fsdp_layout)) == []
    assert codes(ctx("fsdp2", kind="fabric"), resume(fsdp_layout, how="load(...)")) == []  # Fabric: the user's keys


def test_lp806_a_sharded_optimizer_keyed_by_parameter_ids() -> None:
    ids = dataclasses.replace(SHARDED, optimizer_keys="ids")
    assert codes(ctx("fsdp2"), resume(ids)) == ["LP806"]
    assert codes(ctx("fsdp2"), resume(ids, how="validate(ckpt_path=...)", restores_optimizer=False)) == []
    assert codes(ctx("fsdp2"), resume(dataclasses.replace(TRAINER_FILE, optimizer_keys="ids"))) == []


def test_lp807_the_tag_folder_instead_of_the_checkpoint() -> None:
    tag_folder = dataclasses.replace(DEEPSPEED, path="run.ckpt/checkpoint", tag=None)
    state = Resume(path="run.ckpt/checkpoint", checkpoint=tag_folder, zero_stage=2)
    assert codes(ctx("deepspeed_zero2_offload", devices=8), state) == ["LP807"]
    assert "ckpt_path='run.ckpt'" in hint("LP807", ctx("deepspeed_zero2_offload", devices=8), state)
    assert codes(ctx("deepspeed_zero2_offload", devices=8), resume(DEEPSPEED, zero_stage=2)) == []


def test_lp808_trainer_fit_of_a_checkpoint_the_trainer_did_not_save() -> None:
    fabric = dataclasses.replace(TRAINER_FILE, writer="fabric", model_key="model", top_level=("model", "optimizer"))
    assert codes(ctx("ddp_static_graph"), resume(fabric)) == ["LP808"]
    assert "['model']" in hint("LP808", ctx("ddp_static_graph"), resume(fabric))
    assert codes(ctx("ddp_static_graph"), resume(fabric, how="validate(ckpt_path=...)")) == []
    assert codes(ctx("ddp_static_graph", kind="fabric"), resume(fabric, how="load(...)")) == []
    lookalike = dataclasses.replace(fabric, top_level=("state_dict", "optimizer_states", "lr_schedulers"))
    assert codes(ctx("ddp_static_graph"), resume(lookalike)) == ["LP808"]  # fit reads the version first
    assert "KeyError 'pytorch-lightning_version' first" in message("LP808", ctx("ddp_static_graph"), resume(lookalike))
    versioned = dataclasses.replace(lookalike, top_level=(*lookalike.top_level, "pytorch-lightning_version"))
    assert codes(ctx("ddp_static_graph"), resume(versioned)) == []  # every key fit reads: Lightning loads it
    sharded = dataclasses.replace(SHARDED, writer="fabric", model_key="model", top_level=("model", "step"))
    assert "its meta.pt" in message("LP808", ctx("fsdp2"), resume(sharded))
    zero = dataclasses.replace(DEEPSPEED, writer="deepspeed", top_level=("module", "step"))
    assert "meta.pt" not in message("LP808", ctx("deepspeed_zero2_offload"), resume(zero))
    assert "client state" in message("LP808", ctx("deepspeed_zero2_offload"), resume(zero))


def test_lp809_warns_when_the_checkpoint_cannot_be_read() -> None:
    findings = [RULES["LP809"](ctx(), resume(None, unreadable="'x' is a symbolic link loop"))]
    assert findings[0] is not None
    assert findings[0].severity == "warning"
    assert "symbolic link loop" in findings[0].message
    assert codes(ctx(), resume(TRAINER_FILE)) == []


# --------------------------------------------------------------------------- the conversions, as values

REFUSALS = [  # (code, job, checkpoint): one refusal of each code that names a conversion
    ("LP801", ctx("ddp_static_graph"), resume(SHARDED)),
    ("LP801", ctx("fsdp2"), resume(DEEPSPEED)),
    ("LP802", ctx("deepspeed_zero2_offload", devices=4), resume(DEEPSPEED, zero_stage=2)),
    ("LP803", ctx("deepspeed_zero3_offload_ckpt", devices=8), resume(DEEPSPEED, zero_stage=3)),
    ("LP804", ctx("fsdp2"), resume(dataclasses.replace(SHARDED, optimizers=0))),
    ("LP805", ctx("fsdp2"), resume(dataclasses.replace(SHARDED, model_key="model", path="my run's.ckpt"))),
    ("LP806", ctx("fsdp2"), resume(dataclasses.replace(SHARDED, optimizer_keys="ids"))),
    ("LP808", ctx("fsdp2"), resume(dataclasses.replace(SHARDED, writer="fabric", model_key="model", top_level=()))),
]


@pytest.mark.parametrize(("code", "job", "state"), REFUSALS, ids=[each[0] for each in REFUSALS])
def test_each_refusal_renders_the_conversion_it_names(code: str, job: Context, state: Resume) -> None:
    from lightning_presets.guards.resume import conversion_for, render

    assert code in codes(job, state)
    conversion = conversion_for(code, job, state)
    assert conversion is not None
    assert conversion.steps
    assert f": {render(conversion)}; then " in hint(code, job, state)  # all of its steps, nothing else
    if conversion.resumes:  # the job resumes from what the steps write, by its path
        assert f"ckpt_path={conversion.result!r}" in hint(code, job, state)


def test_a_conversion_runs_as_its_steps_say() -> None:
    from lightning_presets.guards.resume import Command, Python, command_line, conversion_for, render

    fsdp_layout = resume(dataclasses.replace(SHARDED, model_key="model", path="my run's.ckpt"))
    conversion = conversion_for("LP805", ctx("fsdp2"), fsdp_layout)
    assert conversion is not None
    assert conversion.resumes
    assert conversion.result == "my run's.ckpt.consolidated"
    (step,) = conversion.steps
    assert isinstance(step, Command)
    assert command_line(step, "/bin/py") == [
        "/bin/py", "-m", "lightning_presets", "convert", "my run's.ckpt", "my run's.ckpt.consolidated",
    ]  # fmt: skip
    assert render(conversion) == (  # quoted for a shell, as the hint shows it
        "`python -m lightning_presets convert 'my run'\"'\"'s.ckpt' 'my run'\"'\"'s.ckpt.consolidated'`"
    )
    ids = dataclasses.replace(SHARDED, optimizer_keys="ids")
    keyed = conversion_for("LP806", ctx("fsdp2"), resume(ids))
    assert keyed is not None
    assert [type(each) for each in keyed.steps] == [Command]  # convert re-keys the Trainer's layout itself
    fabric = conversion_for("LP806", ctx("fsdp2"), resume(dataclasses.replace(ids, writer="torch", model_key=None)))
    assert fabric is not None
    assert [type(each) for each in fabric.steps] == [Python, Python]  # torch's consolidation, then the re-key
    assert command_line(fabric.steps[-1], "py")[:2] == ["py", "-c"]
    assert conversion_for("LP807", ctx("deepspeed_zero2_offload"), resume(DEEPSPEED)) is None  # a path, no steps
    weights = conversion_for("LP804", ctx("ddp_static_graph"), resume(TRAINER_FILE))
    assert weights is not None
    assert not weights.resumes  # the weights alone: nothing to resume from
    assert weights.steps == ()


@pytest.mark.parametrize("each", RESUME_RULES, ids=lambda each: each.code)
def test_documented_examples_behave(each: Rule) -> None:
    if "deepspeed_" in each.fails and importlib.util.find_spec("deepspeed") is None:
        pytest.skip("the DeepSpeed presets' examples need deepspeed installed")
    failing = run_example(each.fails, each.setting)
    fixed = run_example(each.fixed, each.fixed_setting or each.setting)
    assert failing.error is None, failing
    assert each.code in failing.codes, failing
    assert fixed.error is None, fixed
    assert each.code not in fixed.codes, fixed


def test_a_presets_own_resume_rules_run_beside_them(tmp_path: Path) -> None:
    from lightning_presets import rule
    from lightning_presets.core.rules import Problem

    @rule("LP902", "error", "resume", "no bf16 weights", fails="x", fixed="y")
    def no_bf16(context: Context, state: Resume) -> Problem | None:
        facts = state.checkpoint
        return None if facts is None or "bfloat16" not in facts.weight_dtypes else Problem("bf16", "convert them")

    torch.save({"w": torch.zeros(1, dtype=torch.bfloat16)}, tmp_path / "w.pt")
    for family in ("fsdp2", "xla_fsdp_ckpt"):  # a family the built-in rules check, and one they do not
        job = ctx(family, kind="fabric")
        findings = resume_findings(tmp_path / "w.pt", job, how="load(...)", restores_optimizer=False, own=(no_bf16,))
        assert [finding.code for finding in findings] == ["LP902"]


def test_what_each_family_resumes() -> None:
    assert resumable("ddp") == (
        "a single-file checkpoint (DDP's, FSDP's full state, a consolidated folder), at any world size",
    )
    assert "weights under 'state_dict'" in resumable("model_parallel")[1]
    assert "weights under 'model'" in resumable("fsdp")[1]
    assert len(resumable("deepspeed")) == 2
    assert resumable("xla") == ()


def test_remote_and_missing_paths_and_unchecked_families_are_left_to_lightning(tmp_path: Path) -> None:
    assert resume_findings("s3://bucket/run.ckpt", ctx("ddp_static_graph")) == []
    assert resume_findings(tmp_path / "missing.ckpt", ctx("ddp_static_graph")) == []
    (tmp_path / "xla").mkdir()  # XLA's sharded layout is not one this reader knows: not even a warning
    (tmp_path / "xla" / "checkpoint_rank-00000000-of-00000001.pth").write_bytes(b"")
    assert [f.code for f in resume_findings(tmp_path / "xla", ctx("fsdp2"))] == ["LP809"]
    assert resume_findings(tmp_path / "xla", ctx("xla_fsdp_ckpt", kind="fabric"), how="load(...)") == []


# --------------------------------------------------------------------------- the hook


def sharded_folder(path: Path) -> Path:
    """A sharded checkpoint in ModelParallelStrategy's layout, as the Trainer saves it (one process)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model = torch.nn.Linear(2, 2)
    optimizer = get_optimizer_state_dict(model, torch.optim.Adam(model.parameters()))
    dcp.save({"state_dict": model.state_dict(), "optimizer_0": optimizer}, checkpoint_id=str(path))
    torch.save({"loops": {}, "pytorch-lightning_version": "2.6.6"}, path / "meta.pt")
    return path


@pytest.fixture
def lightning_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Lightning's own ``load_checkpoint`` and ``broadcast`` of DDP and ModelParallel, recorded instead of run."""
    from lightning.fabric.strategies import ModelParallelStrategy as FabricModelParallel
    from lightning.pytorch.strategies import DDPStrategy, ModelParallelStrategy

    calls: list[str] = []
    for cls in (DDPStrategy, ModelParallelStrategy, FabricModelParallel):
        monkeypatch.setattr(cls, "load_checkpoint", lambda self, *a, **k: calls.append("load_checkpoint") or {})
        monkeypatch.setattr(cls, "broadcast", lambda self, obj, src=0: calls.append("broadcast") or obj)
    return calls


def test_trainer_refuses_before_lightning_loads_or_communicates(tmp_path: Path, lightning_calls: list[str]) -> None:
    from lightning.pytorch import Trainer

    folder = sharded_folder(tmp_path / "run.ckpt")
    strategy = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, logger=False).strategy
    with pytest.raises(PresetConfigError) as raised:
        strategy.load_checkpoint(str(folder))
    assert raised.value.codes == ("LP801",)
    assert lightning_calls == []
    deepspeed = deepspeed_folder(tmp_path / "ds.ckpt", stage=2, data_parallel=8)
    fsdp2 = Trainer(strategy="fsdp2", accelerator="cpu", devices=2, logger=False).strategy
    with pytest.raises(PresetConfigError, match="LP801"):
        fsdp2.load_checkpoint(deepspeed)
    assert lightning_calls == []
    fsdp2.load_checkpoint(folder)  # accepted: Lightning's own load runs
    assert lightning_calls == ["load_checkpoint"]


def test_fabric_load_refuses_before_lightning_loads(tmp_path: Path, lightning_calls: list[str]) -> None:
    from lightning.fabric import Fabric
    from torch import nn

    strategy = Fabric(strategy="fsdp2", accelerator="cpu", devices=2).strategy
    model = nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    torch.save({"model": model.state_dict()}, tmp_path / "weights.pt")
    with pytest.raises(PresetConfigError) as raised:  # what Fabric.load calls (it needs launched processes first)
        strategy.load_checkpoint(
            path=tmp_path / "weights.pt", state={"model": model, "optimizer": optimizer}, strict=True
        )
    assert raised.value.codes == ("LP804",)
    assert lightning_calls == []
    strategy.load_checkpoint(path=tmp_path / "weights.pt", state={"model": model}, strict=True)  # no optimizer asked
    torch.save(optimizer.state_dict(), tmp_path / "optimizer.pt")
    strategy.load_checkpoint(path=tmp_path / "optimizer.pt", state=optimizer, strict=True)  # load_raw(optimizer)
    assert lightning_calls == ["load_checkpoint", "load_checkpoint"]


def test_a_users_checkpoint_io_plugin_is_trusted_to_read_folders(tmp_path: Path, lightning_calls: list[str]) -> None:
    from lightning.pytorch import Trainer
    from lightning.pytorch.plugins import TorchCheckpointIO

    class FolderIO(TorchCheckpointIO):
        """Reads sharded folders too (as a user's plugin may)."""

    strategy = Trainer(
        strategy="ddp_static_graph", accelerator="cpu", devices=2, logger=False, plugins=[FolderIO()]
    ).strategy
    strategy.load_checkpoint(str(sharded_folder(tmp_path / "run.ckpt")))
    assert lightning_calls == ["load_checkpoint"]


def test_skipping_the_code_lets_lightning_load(
    tmp_path: Path, lightning_calls: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.pytorch import Trainer

    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "LP801")
    strategy = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, logger=False).strategy
    strategy.load_checkpoint(str(sharded_folder(tmp_path / "run.ckpt")))
    assert lightning_calls == ["load_checkpoint"]


def test_the_hook_refuses_under_python_optimizations(tmp_path: Path) -> None:
    folder = sharded_folder(tmp_path / "run.ckpt")
    code = (
        "from lightning.pytorch import Trainer\nimport lightning_presets\n"
        "strategy = Trainer(strategy='ddp_static_graph', accelerator='cpu', devices=2, logger=False).strategy\n"
        f"try:\n    strategy.load_checkpoint({str(folder)!r})\n"
        "except lightning_presets.PresetConfigError as error:\n    print('CODES', error.codes)\n"
    )
    done = subprocess.run([sys.executable, "-O", "-c", code], capture_output=True, text=True, timeout=120)
    assert "CODES ('LP801',)" in done.stdout, done.stderr[-2000:]


def test_results_are_json_serialisable() -> None:
    json.dumps(dataclasses.asdict(TRAINER_FILE))
    assert os.fspath(TRAINER_FILE.path) == "run.ckpt"


# --------------------------------------------------------------------------- the CLI


def test_check_resume_from_refuses_what_fit_would_refuse(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import run_cli

    folder = str(sharded_folder(tmp_path / "run.ckpt"))
    job = ("check", "--accelerator", "cpu", "--devices", "2", "--resume-from", folder, "--json")
    code, out, _ = run_cli(capsys, *job, "--strategy", "ddp_static_graph")
    assert code == 1
    assert [each["code"] for each in json.loads(out)["findings"]] == ["LP801"]
    code, out, _ = run_cli(capsys, *job, "--strategy", "fsdp2")  # the accepted neighbour: a sharded preset
    assert code == 0, out
    assert json.loads(out)["findings"] == []
    code, out, _ = run_cli(capsys, *job, "--strategy", "ddp")  # Lightning's own strategy has no resume rules
    assert code == 0, out
    code, _, err = run_cli(capsys, "check", "--strategy", "fsdp2", "--resume-from", str(tmp_path / "missing.ckpt"))
    assert code == 2
    assert "missing.ckpt" in err
    code, out, _ = run_cli(capsys, *job[:-3], "--resume-from", "s3://bucket/run.ckpt", "--strategy", "fsdp2")
    assert code == 0, out  # a remote checkpoint is Lightning's to read (fsspec): not refused, not read here


def test_show_lists_what_a_preset_resumes(capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import run_cli

    _, out, _ = run_cli(capsys, "show", "fsdp2", "--json")
    preset = json.loads(out)["preset"]
    assert preset["resumes"] == list(resumable(preset["family"]))
    assert any("sharded" in line for line in preset["resumes"])
    _, out, _ = run_cli(capsys, "show", "ddp_static_graph")
    assert "resumes" in out
    assert "single-file checkpoint" in out
    _, out, _ = run_cli(capsys, "show", "bf16-fp32-reduce", "--json")  # a precision preset resumes nothing itself
    assert json.loads(out)["preset"]["resumes"] == []
