"""FSDP1's sharded layout, as Lightning's ``FSDPStrategy(state_dict_type="sharded")`` writes it, produced on CPU:
torch's ``FullyShardedDataParallel`` on ``device_id=cpu`` (2 gloo processes; Lightning's strategy refuses a CPU
accelerator) and Lightning's own state and save code (``lightning_module_state_dict``, ``optimizer_state``,
``save_checkpoint``), by ``tests/convert/fsdp1_save.py``. The resume guards' checkpoint reader detects it and convert
turns it into the file DDP resumes and into the folder fsdp2 resumes."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lightning_presets.checkpoints import read_checkpoint
from lightning_presets.tools.convert import convert

HERE = Path(__file__).resolve().parent


@pytest.mark.distributed
def test_fsdp1_sharded_folder_written_on_cpu_converts_to_a_file_and_a_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from harness import run_job

    out = tmp_path / "fsdp1.ckpt"
    job = run_job(HERE / "fsdp1_save.py", str(out), world_size=2, timeout=180)
    assert "SAVED 0" in job.stdout, job.stdout[-3000:]
    assert "SAVED 1" in job.stdout, job.stdout[-3000:]
    facts = read_checkpoint(out)  # the reader the resume guards use
    assert (facts.format, facts.writer, facts.model_key, facts.world_size) == ("distributed", "trainer", "model", 2)
    assert facts.optimizer_keys == "names"

    full = torch.load(f"{out}.full.pt", weights_only=True)  # FSDP1's own gather of its flat shards
    result = convert(out, tmp_path / "fsdp1.pt")
    assert "Trainer(strategy='ddp_static_graph', devices=1, num_nodes=1) resumes it" in result.guard
    written = torch.load(tmp_path / "fsdp1.pt", weights_only=False)
    assert written["state_dict"].keys() == full.keys()  # FSDP's 'model' is the Trainer's 'state_dict' again
    assert all(torch.equal(written["state_dict"][name], value) for name, value in full.items())
    (optimizer,) = written["optimizer_states"]
    names = list(full)  # AdamW(self.parameters()): the positions in the module's order
    assert optimizer["param_groups"][0]["params"] == list(range(len(names)))
    for position, name in enumerate(names):
        state = optimizer["state"][position]
        assert state["exp_avg"].shape == full[name].shape, name
        assert float(state["step"]) == 1.0

    monkeypatch.syspath_prepend(str(HERE))  # where --model's factory lives
    folder = convert(out, tmp_path / "fsdp2.ckpt", strategy="fsdp2", devices=2, model="fsdp1_save:module")
    assert folder.target == "folder"
    assert "Trainer(strategy='fsdp2', devices=2, num_nodes=1) resumes it" in folder.guard
    assert read_checkpoint(tmp_path / "fsdp2.ckpt").model_key == "state_dict"  # ModelParallelStrategy's key
