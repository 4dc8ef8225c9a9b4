"""The checkpoint reader: each format's facts, read without loading tensors, and what it refuses to read."""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from lightning_presets.checkpoints import CheckpointReadError, limits, read_checkpoint, torch_file

sys.path.insert(0, str(Path(__file__).resolve().parent / "scripts"))

from checkpoint_layouts import LIGHTNING_STATE, by_name, deepspeed_folder, fsdp_folder


def stepped(dtype: torch.dtype = torch.float32) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2)).to(dtype)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4, dtype=dtype)).sum().backward()
    optimizer.step()
    return model, optimizer


def trainer_checkpoint(dtype: torch.dtype = torch.float32, optimizer: bool = True) -> dict[str, Any]:
    model, adam = stepped(dtype)
    state = {"state_dict": model.state_dict(), **LIGHTNING_STATE, "lr_schedulers": []}
    if optimizer:
        state["optimizer_states"] = [adam.state_dict()]
    return state


def test_a_trainer_file(tmp_path: Path) -> None:
    torch.save(trainer_checkpoint(), tmp_path / "last.ckpt")
    facts = read_checkpoint(tmp_path / "last.ckpt")
    assert (facts.format, facts.writer, facts.model_key, facts.world_size) == ("file", "trainer", "state_dict", None)
    assert (facts.optimizers, facts.optimizer_keys, facts.weight_dtypes) == (1, "ids", ("float32",))
    assert "a single-file checkpoint (saved by Lightning's Trainer; float32 weights" in facts.describe()


def test_weights_only_bf16_and_name_keyed_files(tmp_path: Path) -> None:
    torch.save(trainer_checkpoint(torch.bfloat16, optimizer=False), tmp_path / "weights.ckpt")
    weights = read_checkpoint(tmp_path / "weights.ckpt")
    assert (weights.optimizers, weights.optimizer_keys, weights.weight_dtypes) == (0, "none", ("bfloat16",))
    full = trainer_checkpoint()
    full["optimizer_states"] = [by_name(full["optimizer_states"][0], list(full["state_dict"]))]
    torch.save(full, tmp_path / "fsdp-full.ckpt")  # FSDPStrategy(state_dict_type="full") keys the state by name
    assert read_checkpoint(tmp_path / "fsdp-full.ckpt").optimizer_keys == "names"


def test_a_fabric_file(tmp_path: Path) -> None:
    model, optimizer = stepped()
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": 7}, tmp_path / "f.pt")
    facts = read_checkpoint(tmp_path / "f.pt")
    assert (facts.writer, facts.model_key, facts.optimizers, facts.top_level) == (
        "fabric", "model", 1, ("model", "optimizer", "step")
    )  # fmt: skip


def test_a_sharded_folder_of_torch_and_of_the_trainers_fsdp(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model, optimizer = stepped()
    dcp.save(
        {"weights": model.state_dict(), "opt": get_optimizer_state_dict(model, optimizer)},
        checkpoint_id=str(tmp_path / "a"),
    )
    facts = read_checkpoint(tmp_path / "a")
    assert (facts.format, facts.writer, facts.world_size, facts.model_key) == ("distributed", "torch", 1, "weights")
    assert (facts.optimizers, facts.optimizer_keys, facts.weight_dtypes) == (1, "names", ("float32",))
    fsdp = read_checkpoint(fsdp_folder(tmp_path / "b", trainer_checkpoint()))
    assert (fsdp.writer, fsdp.model_key, fsdp.optimizer_keys) == ("trainer", "model", "names")
    assert "pytorch-lightning_version" in fsdp.top_level


def test_an_id_keyed_optimizer_in_a_sharded_folder(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    model, optimizer = stepped()
    dcp.save({"state_dict": model.state_dict(), "optimizer_0": optimizer.state_dict()}, checkpoint_id=str(tmp_path))
    assert read_checkpoint(tmp_path).optimizer_keys == "ids"


@pytest.mark.parametrize(("stage", "data_parallel"), [(2, 8), (3, 4), (1, 2)])
def test_deepspeed_folders_in_lightnings_layout(tmp_path: Path, stage: int, data_parallel: int) -> None:
    facts = read_checkpoint(deepspeed_folder(tmp_path / "run.ckpt", stage=stage, data_parallel=data_parallel))
    assert (facts.format, facts.writer, facts.tag, facts.universal) == ("deepspeed", "trainer", "checkpoint", False)
    assert (facts.zero_stage, facts.data_parallel_size, facts.zero_shards) == (stage, data_parallel, data_parallel)
    assert (facts.world_size, facts.model_parallel_size) == (data_parallel, 1)
    assert facts.weight_dtypes == (() if stage == 3 else ("bfloat16",))


def test_deepspeed_stage_from_a_shard_tag_folder_model_parallel_and_universal(tmp_path: Path) -> None:
    plain = deepspeed_folder(tmp_path / "a", stage=2, data_parallel=2, model_parallel=2, config_stage=False, tag=None)
    facts = read_checkpoint(plain)
    assert (facts.zero_stage, facts.tag, facts.writer) == (2, None, "trainer")  # stage read from the shard's enum
    assert (facts.data_parallel_size, facts.model_parallel_size, facts.world_size) == (2, 2, 4)
    universal = read_checkpoint(deepspeed_folder(tmp_path / "b", stage=2, data_parallel=2, universal=True))
    assert universal.universal


def test_only_the_pickle_is_opened_never_a_tensor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.save(trainer_checkpoint(), tmp_path / "last.ckpt")
    opened: list[str] = []
    original = torch_file.member_bytes

    def recording(handle: Any, member: Any, where: str) -> bytes:
        opened.append(member.name)
        return original(handle, member, where)

    monkeypatch.setattr(torch_file, "member_bytes", recording)
    read_checkpoint(tmp_path / "last.ckpt")
    assert [name.rpartition("/")[2] for name in opened] == ["data.pkl"]


class Payload:
    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))

    def __init__(self, marker: Path) -> None:
        self.marker = marker


def test_a_pickle_that_would_run_code_is_read_inert(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    torch.save({"state_dict": {}, "payload": Payload(marker), **LIGHTNING_STATE}, tmp_path / "evil.ckpt")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / ".metadata").write_bytes(pickle.dumps(Payload(marker)))
    assert read_checkpoint(tmp_path / "evil.ckpt").writer == "trainer"
    with pytest.raises(CheckpointReadError, match="not the metadata"):
        read_checkpoint(tmp_path / "folder")
    assert not marker.exists()


def test_symbolic_link_loops_are_refused(tmp_path: Path) -> None:
    os.symlink(tmp_path / "loop.ckpt", tmp_path / "loop.ckpt")
    with pytest.raises(CheckpointReadError, match="symbolic link loop"):
        read_checkpoint(tmp_path / "loop.ckpt")
    folder = deepspeed_folder(tmp_path / "ds", stage=2, data_parallel=1)
    (folder / "checkpoint").rename(folder / "moved")
    os.symlink(folder / "checkpoint", folder / "checkpoint")  # the tag folder 'latest' names is a loop
    with pytest.raises(CheckpointReadError, match="symbolic link loop"):
        read_checkpoint(folder)


@pytest.mark.parametrize(
    ("limit", "value", "message"),
    [
        ("MAX_PICKLE_BYTES", 100, "its pickle is"),
        ("MAX_ZIP_INDEX_BYTES", 100, "its zip index holds"),
    ],
)
def test_huge_headers_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str, value: int, message: str
) -> None:
    torch.save(trainer_checkpoint(), tmp_path / "last.ckpt")
    monkeypatch.setattr(limits, limit, value)
    with pytest.raises(CheckpointReadError, match=message):
        read_checkpoint(tmp_path / "last.ckpt")


def test_huge_metadata_and_folders_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch.distributed.checkpoint as dcp

    dcp.save({"w": torch.zeros(2)}, checkpoint_id=str(tmp_path / "a"))
    monkeypatch.setattr(limits, "MAX_PICKLE_BYTES", 10)
    with pytest.raises(CheckpointReadError, match="larger than 10 bytes"):
        read_checkpoint(tmp_path / "a")
    monkeypatch.setattr(limits, "MAX_FOLDER_ENTRIES", 1)
    with pytest.raises(CheckpointReadError, match="more than 1 entries"):
        read_checkpoint(tmp_path / "a")


def test_a_tag_that_leaves_the_folder_and_foreign_files_are_refused(tmp_path: Path) -> None:
    folder = deepspeed_folder(tmp_path / "ds", stage=2, data_parallel=1)
    (folder / "latest").write_text("../elsewhere")
    with pytest.raises(CheckpointReadError, match="not a sub-folder"):
        read_checkpoint(folder)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(CheckpointReadError, match=r"not a torch\.save zip"):
        read_checkpoint(tmp_path / "notes.txt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointReadError, match=r"no '\.metadata'"):
        read_checkpoint(tmp_path / "empty")
    with pytest.raises(FileNotFoundError):
        read_checkpoint(tmp_path / "missing.ckpt")
