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
from lightning_presets.checkpoints.conversions import to_universal
from lightning_presets.cli import main
from lightning_presets.guards.resume import command_line, render, to_one_file
from lightning_presets.tools import convert as convert_module
from lightning_presets.tools.convert import ConvertError, convert, loading, writing

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
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
    assert "Trainer(strategy='ddp_static_graph', devices=1, num_nodes=1) resumes it" in report["guard"]
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
    assert "not converted: [LP820]" in err
    assert "truncated.ckpt" in err
    assert "hint:" in err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt", "truncated.ckpt"]  # no scratch left behind

    with pytest.raises(ConvertError, match=r"\[LP820\] no checkpoint at"):
        convert(tmp_path / "missing.ckpt", tmp_path / "out.ckpt")
    (tmp_path / "foreign.ckpt").write_text("not a checkpoint")
    with pytest.raises(ConvertError, match=r"\[LP820\]"):
        convert(tmp_path / "foreign.ckpt", tmp_path / "out.ckpt")
    (tmp_path / "foreign.ckpt").unlink()
    source = digest(tmp_path / "run.ckpt")
    (tmp_path / "taken.ckpt").write_text("keep me")
    assert main(["convert", str(tmp_path / "run.ckpt"), str(tmp_path / "taken.ckpt")]) == 1
    assert "[LP821] the destination" in capsys.readouterr().err
    assert (tmp_path / "taken.ckpt").read_text() == "keep me"
    with pytest.raises(ConvertError, match=r"\[LP821\] .* is the source"):
        convert(tmp_path / "run.ckpt", tmp_path / "run.ckpt", force=True)
    assert digest(tmp_path / "run.ckpt") == source
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt", "taken.ckpt", "truncated.ckpt"]
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
    with pytest.raises(ConvertError, match=r"\[LP823\] .*state_dict/model\.0\.weight: the values differ"):
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


def _deepspeed(arguments: list[str], world_size: int) -> list[str]:
    """tests/scripts/deepspeed_save.py on ``world_size`` gloo processes of DeepSpeed's CPU accelerator: each output."""
    from harness import free_port

    env = {**os.environ, "WORLD_SIZE": str(world_size), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    ranks = [
        subprocess.Popen(
            [sys.executable, str(SCRIPTS / "deepspeed_save.py"), *arguments],
            env={**env, "RANK": str(r), "LOCAL_RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(world_size)
    ]
    return [rank.communicate(timeout=300)[0] for rank in ranks]


@pytest.mark.distributed
@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="DeepSpeed is not installed")
def test_deepspeed_zero_folders_written_by_its_engine_on_cpu(tmp_path: Path) -> None:
    """DeepSpeed's engine on 2 gloo processes writes ZeRO-2 and ZeRO-3 folders; convert's file holds the fp32 weights
    the engine held (gathered from its partitions), and says that the ZeRO optimizer state is not carried. LP802's
    conversion (``convert --to universal``: ds_to_universal on a copy), its command line run verbatim, makes each
    folder load into a 1-process engine with ``checkpoint.load_universal``: the weights it held at 2 processes and
    AdamW's step count; the source folders unchanged."""
    outputs = _deepspeed([str(tmp_path)], world_size=2)
    assert all(f"SAVED {r}" in output for r, output in enumerate(outputs)), outputs[0][-3000:]
    universal = []
    for stage in (2, 3):
        folder = tmp_path / f"zero{stage}"
        result = convert(folder, tmp_path / f"zero{stage}.pt")
        assert f"ZeRO-{stage}" in result.source_layout
        shards = folder / str(read_checkpoint(folder).tag)  # the memory said before loading: its shard files, twice
        assert result.memory_needed_bytes == 2 * sum(each.stat().st_size for each in shards.glob("*.pt"))
        assert any("ZeRO optimizer state" in each for each in result.dropped)
        written = torch.load(tmp_path / f"zero{stage}.pt", weights_only=True)
        held = torch.load(tmp_path / f"zero{stage}.held.pt", weights_only=True)
        assert written.keys() == held.keys()
        assert all(torch.equal(written[k], v) for k, v in held.items()), stage

        before = digest(folder)
        conversion = to_universal(read_checkpoint(folder))  # what LP802's hint renders
        assert render(conversion).startswith("`python -m lightning_presets convert ")
        if stage == 2:  # the hint's line, verbatim (one interpreter more); ZeRO-3 through the API, in this one
            (step,) = conversion.steps
            done = subprocess.run(command_line(step, sys.executable), capture_output=True, text=True, check=False,
                                  timeout=300)  # fmt: skip
            assert done.returncode == 0, done.stderr[-2000:]
            assert "universal, 4 tensors" in " ".join(done.stdout.split())
        else:
            assert convert(folder, conversion.result, to="universal").tensors == 4
        assert digest(folder) == before  # ds_to_universal ran on a copy
        assert read_checkpoint(conversion.result).universal
        universal.append(conversion.result)
    (loaded,) = _deepspeed(["--load-universal", *universal, str(tmp_path)], world_size=1)
    assert "LOADED 2 EQUAL True STEP 2" in loaded, loaded[-3000:]
    assert "LOADED 3 EQUAL True STEP 2" in loaded, loaded[-3000:]


@pytest.fixture(scope="module")
def ddp_file(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, float]]:
    """A real ddp_static_graph checkpoint of 1 process (saved after step 3 of 5, Adam's state in it) and the
    uninterrupted run's losses."""
    path = tmp_path_factory.mktemp("ddp") / "ddp-1.ckpt"
    saved, _ = bench.run(["save", "--strategy", "ddp_static_graph", "--devices", "1", "--out", str(path)])
    assert saved["error"] is None, saved
    return path, saved["losses"]


def _refused(arguments: list[str], code: str, capsys: pytest.CaptureFixture[str]) -> str:
    assert main(["convert", *arguments]) == 1
    err = " ".join(capsys.readouterr().err.split())  # the terminal's line breaks as spaces
    assert f"not converted: [{code}]" in err, err
    assert "Traceback" not in err
    return err


@pytest.mark.distributed
def test_a_ddp_file_becomes_a_folder_that_fsdp2_and_tp2d_hybrid_resume_on_two_processes(
    ddp_file: tuple[Path, dict[str, float]], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """DDP's file -> the Trainer's sharded folder (Adam's state re-keyed by name through the model's own
    configure_optimizers) -> fsdp2 and tp2d_hybrid on 2 processes resume with the uninterrupted run's losses; the
    folder, read by torch's own reader, holds the file's weights and Adam's state parameter by parameter. Without the
    model, or with another model, LP822: nothing written, the source unchanged."""
    source, losses = ddp_file
    before = digest(source)
    monkeypatch.syspath_prepend(str(SCRIPTS))  # where the factory lives, as `--model` imports it
    out = tmp_path / "fsdp2.ckpt"
    target = [str(source), str(out), "--strategy", "fsdp2", "--devices", "2"]
    assert "--model MODULE:FACTORY" in _refused(target, "LP822", capsys)
    assert "not the checkpoint's model" in _refused([*target, "--model", "convert_model:other"], "LP822", capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert main(["convert", *target, "--model", "convert_model:module", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["target"], report["verified"], report["dropped"]) == ("folder", True, [])
    assert "Trainer(strategy='fsdp2', devices=2, num_nodes=1) resumes it" in report["guard"]
    assert digest(source) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fsdp2.ckpt"]  # no scratch left beside it

    from convert_model import module
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    dcp_to_torch_save(out, tmp_path / "torch.pt")  # torch's own reader, not the one convert verified with
    folder = torch.load(tmp_path / "torch.pt", weights_only=False)
    original = torch.load(source, weights_only=False)
    assert folder["state_dict"].keys() == original["state_dict"].keys()
    assert all(torch.equal(folder["state_dict"][k], v) for k, v in original["state_dict"].items())
    names = [name for name, _ in module().named_parameters()]  # Adam(self.parameters()): positions in this order
    (positions,) = original["optimizer_states"]
    assert len(positions["state"]) == len(names)
    for position, name in enumerate(names):
        for key, value in positions["state"][position].items():
            assert torch.equal(folder["optimizer_0"]["state"][name][key], value), (name, key)
    assert torch.load(out / "meta.pt", weights_only=False)["global_step"] == original["global_step"]

    for strategy in ("fsdp2", "tp2d_hybrid"):
        resumed, _ = bench.run(["resume", "--strategy", strategy, "--devices", "2", "--ckpt", str(out)], guards=True)
        assert resumed["error"] is None, resumed
        assert bench._outcome(resumed, losses)[0] == "resumes", (strategy, resumed)


def test_a_result_the_target_guard_refuses_is_not_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The target preset's resume guard judges the result: a DeepSpeed job loads no single file's optimizer state
    (LP801), so converting for it fails with LP823 and writes nothing; a request convert does not serve (a universal
    checkpoint from a file) is a usage error (exit 2)."""
    trainer_file(tmp_path / "run.ckpt")
    before = digest(tmp_path / "run.ckpt")
    err = _refused([str(tmp_path / "run.ckpt"), str(tmp_path / "out.ckpt"), "--to", "file", "--strategy",
                    "deepspeed_zero2_offload", "--devices", "8"], "LP823", capsys)  # fmt: skip
    assert "[LP801]" in err
    assert main(["convert", str(tmp_path / "run.ckpt"), str(tmp_path / "out"), "--to", "universal"]) == 2
    usage = " ".join(capsys.readouterr().err.split())
    assert "a universal checkpoint is made from a DeepSpeed ZeRO folder only" in usage
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]
    assert digest(tmp_path / "run.ckpt") == before
    result = convert(tmp_path / "run.ckpt", tmp_path / "out.ckpt", strategy="ddp_static_graph", devices=2)
    assert result.target == "file"
    assert "ddp_static_graph" in result.guard
    assert "resumes it" in result.guard


@pytest.mark.parametrize("torch_rekey", [True, False], ids=["torch", "by-hand"])
def test_positions_are_named_through_the_models_own_optimizer(
    torch_rekey: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Parameter groups out of the model's order (weight decay split): each position gets the state of the parameter
    the optimizer held there, by torch's rekey and by the fallback for a torch without FSDP1's class; a model whose
    parameters differ from the checkpoint's is refused."""
    import torch.distributed.fsdp as fsdp

    from lightning_presets.tools.convert import folder

    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    rest = [model[0].bias, model[1].weight, model[1].bias, model[2].bias]
    groups = [{"params": [model[2].weight, model[0].weight]}, {"params": rest, "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups)
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    checkpoint = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()]}
    if not torch_rekey:
        monkeypatch.delattr(fsdp, "FullyShardedDataParallel")
    (named,) = folder.by_name(checkpoint, model, [optimizer])
    for name, parameter in model.named_parameters():
        assert torch.equal(named["state"][name]["exp_avg"], optimizer.state[parameter]["exp_avg"]), name
    assert sorted(named["param_groups"][0]["params"]) == ["0.weight", "2.weight"]
    other = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    with pytest.raises(folder.ModelMismatch, match="are not in the checkpoint"):
        folder.by_name({**checkpoint, "state_dict": {"x": torch.ones(1)}}, other, [optimizer])


def test_the_memory_needed_is_said_before_loading_and_warned_when_short(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The need comes from the source's own metadata before anything is loaded (a folder's ``.metadata``: every
    tensor's shape × dtype); it is in the text output and the JSON; above the memory available (a small figure
    injected) a warning with both numbers is said on stderr before the checkpoint is loaded, and the conversion still
    runs (a warning, not a refusal)."""
    import torch.distributed.checkpoint as dcp

    from lightning_presets.tools.convert import memory

    folder = tmp_path / "run.ckpt"
    weights = {"model.a": torch.ones(256, 128), "model.b": torch.ones(64, dtype=torch.float16)}
    dcp.save({"state_dict": weights}, checkpoint_id=str(folder), no_dist=True)
    torch.save({"global_step": 1, "pytorch-lightning_version": "2.6.6", "loops": {}}, folder / "meta.pt")
    tensor_bytes = 256 * 128 * 4 + 64 * 2
    size = memory.checkpoint_bytes(read_checkpoint(folder))
    assert size is not None
    assert tensor_bytes + (folder / "meta.pt").stat().st_size <= size < tensor_bytes + 16 * 1024

    assert main(["convert", str(folder), str(tmp_path / "one.safetensors"), "--to", "safetensors", "--json"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["memory_needed_bytes"] == 2 * size  # held once, and once more while read back
    assert "needs about" in report["memory"]
    assert "warning" not in captured.err

    said: list[str] = []
    load = loading.load

    def loading_after_the_warning(facts: Any) -> loading.Loaded:
        said.append(capsys.readouterr().err)  # what stderr held when the checkpoint began to load
        return load(facts)

    monkeypatch.setattr(memory, "available_bytes", lambda: 1000)
    monkeypatch.setattr(loading, "load", loading_after_the_warning)
    assert main(["convert", str(folder), str(tmp_path / "two.safetensors"), "--to", "safetensors"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    warning = " ".join(said[0].split())
    assert f"needs about {memory.gib(2 * size)} of memory" in warning, warning
    assert "more than the 0.0 MiB available" in warning
    assert "--no-verify" in warning
    assert f"needs about {memory.gib(2 * size)} of memory" in out
    assert (tmp_path / "two.safetensors").exists()  # not refused
    with pytest.warns(convert_module.MemoryShortWarning, match="more than the 0.0 MiB available"):
        unverified = convert(folder, tmp_path / "three.ckpt", verify_result=False)  # the API warns too
    assert unverified.memory_needed_bytes == size  # held once


@pytest.mark.distributed
def test_a_two_process_fsdp2_folder_becomes_a_folder_that_tp2d_hybrid_resumes(
    fsdp2_folder: tuple[Path, dict[str, float]], tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """folder -> folder for real: the 2-process fsdp2 fit's folder (its 2 writers' shards, Adam's state keyed by name)
    rewritten as the Trainer's sharded layout for ``--strategy tp2d_hybrid --devices 2`` (the optimizer state read
    back by position and named again through the model); the result holds, by torch's own reader, the source's
    weights and Adam's state tensor by tensor, and tp2d_hybrid on 2 processes resumes it with the uninterrupted
    run's losses."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    source, losses = fsdp2_folder
    before = digest(source)
    monkeypatch.syspath_prepend(str(SCRIPTS))
    out = tmp_path / "tp2d.ckpt"
    arguments = [str(source), str(out), "--strategy", "tp2d_hybrid", "--devices", "2", "--model",
                 "convert_model:module", "--json"]  # fmt: skip
    assert main(["convert", *arguments]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["target"], report["verified"], report["dropped"]) == ("folder", True, [])
    assert "Trainer(strategy='tp2d_hybrid', devices=2, num_nodes=1) resumes it" in report["guard"]
    assert digest(source) == before

    dcp_to_torch_save(source, tmp_path / "source.pt")  # torch's own reader of both folders
    dcp_to_torch_save(out, tmp_path / "result.pt")
    want = torch.load(tmp_path / "source.pt", weights_only=False)
    got = torch.load(tmp_path / "result.pt", weights_only=False)
    for key in ("state_dict", "optimizer_0"):
        expected, written = dict(verify_tensors(want[key])), dict(verify_tensors(got[key]))
        assert expected.keys() == written.keys(), key
        assert all(torch.equal(written[name], value) for name, value in expected.items()), key
    unordered = [  # the same groups and hyper-parameters; the names in the model's order, torch's reader sorts them
        [{**group, "params": sorted(group["params"])} for group in each["optimizer_0"]["param_groups"]]
        for each in (want, got)
    ]
    assert unordered[0] == unordered[1]

    resumed, _ = bench.run(["resume", "--strategy", "tp2d_hybrid", "--devices", "2", "--ckpt", str(out)], guards=True)
    assert resumed["error"] is None, resumed
    assert bench._outcome(resumed, losses)[0] == "resumes", resumed


def verify_tensors(tree: Any) -> Any:
    from lightning_presets.tools.convert.verify import tensors

    return tensors(tree)
