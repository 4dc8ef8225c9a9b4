"""``lightning-presets convert``: real checkpoints converted, resumed and compared tensor by tensor; bad input leaves
nothing behind and the source unchanged."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lightning_presets.checkpoints import read_checkpoint
from lightning_presets.cli import main
from lightning_presets.guards.resume import command_line, to_one_file
from lightning_presets.tools import convert as convert_module
from lightning_presets.tools.convert import ConvertError, convert, loading, writing

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_resume_matrix as bench  # noqa: E402


def digest(path: Path) -> str:
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    hashed = hashlib.sha256()
    for each in files:
        if each.is_file():
            hashed.update(each.name.encode() + each.read_bytes())
    return hashed.hexdigest()


@pytest.fixture(scope="module")
def fsdp2_folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    """A real fsdp2 checkpoint of 2 processes (saved after step 3 of 5) and the uninterrupted run's losses."""
    path = tmp_path_factory.mktemp("fsdp2") / "fsdp2-2.ckpt"
    saved, _ = bench.run(["save", "--strategy", "fsdp2", "--devices", "2", "--out", str(path)])
    assert saved["error"] is None, saved
    return path, saved["losses"]


@pytest.mark.distributed
def test_a_two_process_fsdp2_folder_resumes_in_ddp_after_convert(
    fsdp2_folder: tuple[Path, dict[str, float]], tmp_path: Path
) -> None:
    """folder -> one file by the CLI -> ddp_static_graph on 1 process resumes with the uninterrupted run's losses;
    the weights and AdamW's state equal torch's own consolidation of the folder, parameter by parameter."""
    folder, losses = fsdp2_folder
    before = digest(folder)
    conversion = to_one_file(read_checkpoint(folder))  # what LP801's hint names, run as its command line
    (step,) = conversion.steps
    result = subprocess.run([*command_line(step, sys.executable), "--json"], capture_output=True, text=True,
                            check=False, timeout=300)  # fmt: skip
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["converted"]
    assert report["verified"]
    assert report["dropped"] == []
    assert digest(folder) == before  # the source is only read
    out = Path(conversion.result)

    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(folder, tmp_path / "torch.pt")  # torch's own reader, not the one convert used
    reference = torch.load(tmp_path / "torch.pt", weights_only=False)
    converted = torch.load(out, weights_only=False)
    assert converted["state_dict"].keys() == reference["state_dict"].keys()
    assert all(torch.equal(converted["state_dict"][k], v) for k, v in reference["state_dict"].items())
    names = reference["optimizer_0"]["param_groups"][0]["params"]
    (optimizer,) = converted["optimizer_states"]
    assert optimizer["param_groups"][0]["params"] == list(range(len(names)))
    for position, name in enumerate(names):
        for key, value in reference["optimizer_0"]["state"][name].items():
            assert torch.equal(optimizer["state"][position][key], value), (name, key)
    meta = torch.load(folder / "meta.pt", weights_only=False)  # Lightning's own file of the Trainer's state
    assert converted["global_step"] == meta["global_step"]
    assert converted["loops"] == meta["loops"]

    resumed, _ = bench.run(["resume", "--strategy", "ddp_static_graph", "--devices", "1", "--ckpt", str(out)],
                           guards=True)  # fmt: skip
    assert resumed["error"] is None, resumed
    assert bench._outcome(resumed, losses)[0] == "resumes", resumed


def trainer_file(path: Path) -> tuple[nn.Module, dict[str, Any]]:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    state = {f"model.{k}": v for k, v in model.state_dict().items()}
    checkpoint = {"state_dict": state, "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
                  "global_step": 1, "pytorch-lightning_version": "2.6.6"}  # fmt: skip
    torch.save(checkpoint, path)
    return model, checkpoint


def test_safetensors_hold_the_modules_state_dict_under_its_own_names(tmp_path: Path) -> None:
    from safetensors.torch import load_file

    model, _ = trainer_file(tmp_path / "run.ckpt")
    result = convert(tmp_path / "run.ckpt", tmp_path / "model.safetensors", to="safetensors", strip_prefix="model.")
    assert result.verified
    assert result.tensors == 4
    assert any("weights" in each for each in result.dropped)  # the optimizer state is said to be left out
    written = load_file(str(tmp_path / "model.safetensors"))
    expected = model.state_dict()
    assert written.keys() == expected.keys()
    assert all(torch.equal(written[k], v) for k, v in expected.items())
    assert model.load_state_dict(written) is not None  # the names are the module's own


def test_a_file_of_tied_weights_exports_each_name(tmp_path: Path) -> None:
    shared = torch.ones(2, 2)
    torch.save({"state_dict": {"a.weight": shared, "b.weight": shared}, "pytorch-lightning_version": "2.6.6",
                "optimizer_states": [], "lr_schedulers": []}, tmp_path / "tied.ckpt")  # fmt: skip
    convert(tmp_path / "tied.ckpt", tmp_path / "tied.safetensors", to="safetensors")  # safetensors refuses shared
    from safetensors.torch import load_file

    assert set(load_file(str(tmp_path / "tied.safetensors"))) == {"a.weight", "b.weight"}


def test_the_trainer_layout_keys_optimizers_by_position() -> None:
    named = {"state": {"b": {"step": 1}, "a": {"step": 2}}, "param_groups": [{"lr": 1, "params": ["a", "c", "b"]}]}
    assert loading.by_position(named) == {
        "state": {0: {"step": 2}, 2: {"step": 1}},
        "param_groups": [{"lr": 1, "params": [0, 1, 2]}],
    }
    text_ids = {"state": {"1": {"step": 3}}, "param_groups": [{"params": [0]}, {"params": [1]}]}
    assert loading.by_position(text_ids)["state"] == {1: {"step": 3}}  # ids written as text by a folder
    layout = loading.trainer_layout({"model": {}, "optimizer_1": named, "optimizer_0": text_ids, "epoch": 0})
    assert list(layout) == ["epoch", "state_dict", "optimizer_states"]
    assert layout["optimizer_states"][1]["param_groups"][0]["params"] == [0, 1, 2]


def test_bad_input_is_refused_with_nothing_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _, checkpoint = trainer_file(tmp_path / "run.ckpt")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes((tmp_path / "run.ckpt").read_bytes()[:500])
    assert main(["convert", str(truncated), str(tmp_path / "out.ckpt")]) == 1
    err = capsys.readouterr().err
    assert "not converted" in err
    assert "truncated.ckpt" in err
    assert "hint:" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt", "truncated.ckpt"]  # no scratch left behind

    with pytest.raises(ConvertError, match="no checkpoint at"):
        convert(tmp_path / "missing.ckpt", tmp_path / "out.ckpt")
    (tmp_path / "taken.ckpt").write_text("keep me")
    with pytest.raises(ConvertError, match="exists"):
        convert(tmp_path / "run.ckpt", tmp_path / "taken.ckpt")
    assert (tmp_path / "taken.ckpt").read_text() == "keep me"
    with pytest.raises(ConvertError, match="is the source"):
        convert(tmp_path / "run.ckpt", tmp_path / "run.ckpt", force=True)
    convert(tmp_path / "run.ckpt", tmp_path / "taken.ckpt", force=True)
    assert torch.load(tmp_path / "taken.ckpt", weights_only=False)["global_step"] == checkpoint["global_step"]


def test_a_result_that_differs_from_its_source_is_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The verification can fail: a writer that changes one value leaves no destination and says which tensor."""
    trainer_file(tmp_path / "run.ckpt")
    before = digest(tmp_path / "run.ckpt")
    save = writing.save_file

    def corrupting(checkpoint: Any, path: Path) -> None:
        changed = dict(checkpoint, state_dict={k: v + 1 for k, v in checkpoint["state_dict"].items()})
        save(changed, path)

    monkeypatch.setattr(writing, "save_file", corrupting)
    with pytest.raises(ConvertError, match=r"state_dict/model\.0\.weight: the values differ"):
        convert(tmp_path / "run.ckpt", tmp_path / "out.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]
    assert digest(tmp_path / "run.ckpt") == before
    convert(tmp_path / "run.ckpt", tmp_path / "out.ckpt", verify_result=False)  # --no-verify writes it anyway
    assert (tmp_path / "out.ckpt").exists()


def test_a_failure_while_writing_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trainer_file(tmp_path / "run.ckpt")

    def full_disk(checkpoint: Any, path: Path) -> None:
        path.write_bytes(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writing, "save_file", full_disk)
    with pytest.raises(OSError, match="No space"):
        convert(tmp_path / "run.ckpt", tmp_path / "out.ckpt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]


def test_the_targets_are_what_the_cli_offers() -> None:
    from lightning_presets.cli import _parser

    convert_parser = _parser()._subparsers._group_actions[0].choices["convert"]  # type: ignore[union-attr]
    (to,) = [action for action in convert_parser._actions if action.dest == "to"]
    assert tuple(to.choices or ()) == convert_module.TARGETS


@pytest.mark.distributed
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
def test_deepspeed_zero_folders_written_by_its_engine_on_cpu(tmp_path: Path) -> None:
    """DeepSpeed's engine on 2 gloo processes writes ZeRO-2 and ZeRO-3 folders; convert's file holds the fp32 weights
    the engine held (gathered from its partitions), and says that the ZeRO optimizer state is not carried."""
    from harness import free_port

    env = {**os.environ, "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    script = str(ROOT / "tests" / "scripts" / "deepspeed_save.py")
    ranks = [
        subprocess.Popen(
            [sys.executable, script, str(tmp_path)],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in (0, 1)
    ]
    outputs = [rank.communicate(timeout=300)[0] for rank in ranks]
    assert all(f"SAVED {r}" in output for r, output in enumerate(outputs)), outputs[0][-3000:]
    for stage in (2, 3):
        result = convert(tmp_path / f"zero{stage}", tmp_path / f"zero{stage}.pt")
        assert f"ZeRO-{stage}" in result.source_layout
        assert any("ZeRO optimizer state" in each for each in result.dropped)
        written = torch.load(tmp_path / f"zero{stage}.pt", weights_only=True)
        held = torch.load(tmp_path / f"zero{stage}.held.pt", weights_only=True)
        assert written.keys() == held.keys()
        assert all(torch.equal(written[k], v) for k, v in held.items()), stage
