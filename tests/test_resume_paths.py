"""``--resume-from`` and ``fit(ckpt_path=...)`` agree on odd paths (issue 27): a ``file://`` URL is the local path it
names (Lightning loads it through fsspec), and a symbolic link loop is reported as fit reports it (LP809)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from helpers import run_cli
from lightning_presets import PresetConfigError, PresetWarning
from lightning_presets.checkpoints import local_path
from test_resume import lightning_calls, sharded_folder  # noqa: F401  (a fixture)


@pytest.mark.parametrize(
    ("path", "local"),
    [("/tmp/run.ckpt", "/tmp/run.ckpt"), ("file:///tmp/run.ckpt", "/tmp/run.ckpt"), ("run.ckpt", "run.ckpt"),
     ("file://run.ckpt", "run.ckpt"), ("s3://bucket/run.ckpt", None), ("hdfs://x/y", None), ("file://", None),
     (Path("/tmp/a"), "/tmp/a"), (42, None)],
)  # fmt: skip
def test_local_path(path: object, local: str | None) -> None:
    assert local_path(path) == local


def _trainer_strategy(name: str = "ddp_static_graph") -> object:
    from lightning.pytorch import Trainer

    return Trainer(strategy=name, accelerator="cpu", devices=2, logger=False).strategy


def test_a_file_url_is_guarded_as_its_path(tmp_path: Path, lightning_calls: list[str]) -> None:  # noqa: F811
    """Before: ``file://`` skipped the guards entirely, and DDP's load then failed on the folder."""
    folder = sharded_folder(tmp_path / "run.ckpt")
    with pytest.raises(PresetConfigError) as raised:
        _trainer_strategy().load_checkpoint(f"file://{folder}")  # type: ignore[attr-defined]
    assert raised.value.codes == ("LP801",)
    assert lightning_calls == []
    _trainer_strategy("fsdp2").load_checkpoint(f"file://{folder}")  # type: ignore[attr-defined]
    assert lightning_calls == ["load_checkpoint"]  # the accepted neighbour: Lightning loads it
    model = torch.nn.Linear(2, 2)
    torch.save({"state_dict": model.state_dict(), "optimizer_states": [{}], "pytorch-lightning_version": "2.6.6"},
               tmp_path / "plain.ckpt")  # fmt: skip
    _trainer_strategy().load_checkpoint(f"file://{tmp_path / 'plain.ckpt'}")  # type: ignore[attr-defined]
    assert lightning_calls == ["load_checkpoint", "load_checkpoint"]


def test_check_resume_from_a_file_url(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    folder = sharded_folder(tmp_path / "run.ckpt")
    argv = ("check", "--strategy", "ddp_static_graph", "--accelerator", "cpu", "--devices", "2", "--json")
    code, out, _ = run_cli(capsys, *argv, "--resume-from", f"file://{folder}")
    assert code == 1
    assert "LP801" in [each["code"] for each in json.loads(out)["findings"]]
    code, out, _ = run_cli(capsys, *argv, "--resume-from", f"file://{tmp_path / 'missing.ckpt'}")
    assert code == 2  # as for the plain path: nothing there
    code, out, _ = run_cli(capsys, *argv[:2], "fsdp2", *argv[3:], "--resume-from", f"file://{folder}")
    assert code == 0, out


def test_a_symbolic_link_loop_is_lp809_in_check_as_in_fit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Before: ``check`` said "no such file" (a usage error) while ``fit`` warned LP809 and let Lightning fail."""
    loop = tmp_path / "loop.ckpt"
    loop.symlink_to(tmp_path / "loop.ckpt")
    with (
        pytest.warns(PresetWarning, match=r"LP809.*symbolic link loop"),
        pytest.raises(FileNotFoundError, match="Checkpoint file not found"),  # Lightning's own load, after the warning
    ):
        _trainer_strategy().load_checkpoint(str(loop))  # type: ignore[attr-defined]
    code, out, err = run_cli(capsys, "check", "--strategy", "ddp_static_graph", "--accelerator", "cpu", "--devices",
                             "2", "--json", "--resume-from", str(loop))  # fmt: skip
    assert code == 0, out + err
    (finding,) = [each for each in json.loads(out)["findings"] if each["code"] == "LP809"]
    assert "symbolic link loop" in finding["message"]
