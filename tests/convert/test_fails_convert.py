"""Evidence for ``lightning-presets convert``'s refusals (LP820-LP823): what torch, Lightning or a later resume does
with the input each refusal stops, and that convert refuses it (exit 1, nothing written, the source unchanged)."""

from __future__ import annotations

import hashlib
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from proof import Proof
from torch import nn

from lightning_presets.cli import main
from lightning_presets.tools.convert import ConvertError, convert, writing

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_resume_matrix as bench  # noqa: E402


def digest(path: Path) -> str:
    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    content = b"".join(each.name.encode() + each.read_bytes() for each in files if each.is_file())
    return hashlib.sha256(content).hexdigest()


def trainer_file(path: Path) -> dict[str, Any]:
    model = nn.Linear(4, 2)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()
    checkpoint = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], "lr_schedulers": [],
                  "global_step": 1, "pytorch-lightning_version": "2.6.6"}  # fmt: skip
    torch.save(checkpoint, path)
    return checkpoint


def refuses(arguments: list[str], code: str, capsys: pytest.CaptureFixture[str]) -> None:
    source = Path(arguments[0])
    before, around = digest(source), sorted(source.parent.iterdir())
    assert main(["convert", *arguments]) == 1
    err = " ".join(capsys.readouterr().err.split())
    assert f"not converted: [{code}]" in err, err
    assert "Traceback" not in err
    assert digest(source) == before
    assert sorted(source.parent.iterdir()) == around  # nothing left behind


@pytest.mark.proves("LP820")
def test_lp820_torch_cannot_read_a_truncated_checkpoint(
    tmp_path: Path, proof: Proof, capsys: pytest.CaptureFixture[str]
) -> None:
    trainer_file(tmp_path / "run.ckpt")
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes((tmp_path / "run.ckpt").read_bytes()[:400])
    with proof.raises(RuntimeError, r"PytorchStreamReader failed|failed finding central directory", code="LP820"):
        torch.load(truncated, weights_only=False)
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "__0_0.distcp").write_bytes(b"\0" * 64)  # a folder of shards without its index
    from torch.distributed.checkpoint import FileSystemReader

    with proof.raises(FileNotFoundError, r"\.metadata", code="LP820"):
        FileSystemReader(str(folder)).read_metadata()
    refuses([str(truncated), str(tmp_path / "out.ckpt")], "LP820", capsys)

    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    partial = tmp_path / "partial.ckpt"  # a folder whose index is whole but one rank's shards are missing
    dcp.save({"state_dict": nn.Linear(4, 2).state_dict()}, checkpoint_id=str(partial))
    torch.save({"pytorch-lightning_version": "2.6.6", "lr_schedulers": []}, partial / "meta.pt")
    for shard in partial.glob("*.distcp"):
        shard.unlink()
    with proof.raises(CheckpointException, r"distcp|No such file", code="LP820"):
        dcp_to_torch_save(str(partial), str(tmp_path / "whole.pt"))
    refuses([str(partial), str(tmp_path / "out.ckpt")], "LP820", capsys)


@pytest.mark.proves("LP821")
def test_lp821_writing_over_a_destination_replaces_what_was_there(
    tmp_path: Path, proof: Proof, capsys: pytest.CaptureFixture[str]
) -> None:
    checkpoint = trainer_file(tmp_path / "run.ckpt")
    taken = tmp_path / "taken.ckpt"
    taken.write_text("the user's own file")
    refuses([str(tmp_path / "run.ckpt"), str(taken)], "LP821", capsys)
    assert taken.read_text() == "the user's own file"
    torch.save(checkpoint, taken)  # what any conversion written over it does
    proof.wrong("the destination's first bytes after writing over it", b"the user's own file"[:8],
                taken.read_bytes()[:8], code="LP821")  # fmt: skip


@pytest.mark.distributed
@pytest.mark.proves("LP822")
def test_lp822_a_folder_of_position_keyed_optimizer_state_fails_in_fsdp2(
    tmp_path: Path, proof: Proof, capsys: pytest.CaptureFixture[str]
) -> None:
    """A real DDP checkpoint's Adam state, written as the Trainer's sharded folder without re-keying it by name (what
    convert would write without the model), fails in ModelParallelStrategy's load; convert refuses without --model."""
    import torch.distributed.checkpoint as dcp

    path = tmp_path / "ddp.ckpt"
    saved, _ = bench.run(["save", "--strategy", "ddp_static_graph", "--devices", "1", "--out", str(path)])
    assert saved["error"] is None, saved
    refuses([str(path), str(tmp_path / "fsdp2.ckpt"), "--strategy", "fsdp2"], "LP822", capsys)
    full = torch.load(path, weights_only=False)
    folder = tmp_path / "positions.ckpt"
    dcp.save({"state_dict": full.pop("state_dict"), "optimizer_0": full.pop("optimizer_states")[0]},
             checkpoint_id=str(folder))  # fmt: skip
    torch.save(full, folder / "meta.pt")
    report, _ = bench.run(["resume", "--strategy", "fsdp2", "--devices", "1", "--ckpt", str(folder)])
    error = report["error"]
    assert error is not None, report
    where = re.search(r'File "(.+?)", line (\d+)', error["where"])
    assert where, error
    proof.record_raised(("LP822",), error["type"], error["message"], f"{where[1]}:{where[2]}",
                        "Missing key in checkpoint state_dict: optimizer_0", guard_off=False)  # fmt: skip


@pytest.mark.proves("LP823")
def test_lp823_a_result_that_differs_loads_other_weights(
    tmp_path: Path, proof: Proof, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkpoint = trainer_file(tmp_path / "run.ckpt")
    changed = {**checkpoint, "state_dict": {k: v + 1 for k, v in checkpoint["state_dict"].items()}}
    torch.save(changed, tmp_path / "differs.ckpt")
    model = nn.Linear(4, 2)
    model.load_state_dict(torch.load(tmp_path / "differs.ckpt", weights_only=False)["state_dict"])
    proof.wrong("the sum of the weights loaded from the result", float(checkpoint["state_dict"]["weight"].sum()),
                float(model.weight.detach().sum()), code="LP823")  # fmt: skip
    save = writing.save_file
    monkeypatch.setattr(writing, "save_file", lambda c, p: save(changed, p))  # a writer that changes the values
    with pytest.raises(ConvertError) as refused:
        convert(tmp_path / "run.ckpt", tmp_path / "out.ckpt")
    assert refused.value.code == "LP823"
    assert not (tmp_path / "out.ckpt").exists()
