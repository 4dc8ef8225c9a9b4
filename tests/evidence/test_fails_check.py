"""``lightning-presets check``'s codes: the same job given to Lightning on this CPU machine, with the cluster's
variables set as its launcher sets them (one process: the rank the job starts here)."""

from __future__ import annotations

import datetime
import socket
from pathlib import Path
from typing import Any

import pytest
from jobs import Steps, fit, trainer
from proof import Proof

from lightning_presets.tools.simulation import simulated_cuda

pytestmark = pytest.mark.usefixtures("process_group")
SLURM = {"SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "1", "SLURM_PROCID": "0",
         "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_JOB_NAME": "train", "SLURM_JOB_ID": "4242",
         "SLURM_NODELIST": "127.0.0.1"}  # fmt: skip


def _free_port() -> str:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return str(probe.getsockname()[1])


def _environment(monkeypatch: pytest.MonkeyPatch, **variables: str) -> None:
    for key, value in variables.items():
        monkeypatch.setenv(key, value)


def _ddp(seconds: int = 5) -> Any:
    """Plain DDP whose rendezvous gives up after ``seconds``: a hang becomes torch's timeout error."""
    from lightning.pytorch.strategies import DDPStrategy

    return DDPStrategy(timeout=datetime.timedelta(seconds=seconds))


@pytest.mark.proves("LP700", "LP701", "LP702", "LP703", "LP704")
def test_lp700_to_lp704_lightning_rejects_these_arguments_itself(proof: Proof) -> None:
    with proof.raises(Exception, r"devices", code="LP700"):
        trainer("ddp", devices=0)
    with proof.raises(ValueError, r"invalid strategy name: `strategy='fsdp_ofload_ckpt'`", code="LP701"):
        trainer("fsdp_ofload_ckpt")
    with proof.raises(ValueError, r"Precision 'bf16-mix' is invalid", code="LP702"):
        trainer("ddp", precision="bf16-mix")
    with proof.raises(ValueError, r"invalid accelerator name: `accelerator='cdua'`", code="LP703"):
        trainer("ddp", accelerator="cdua")
    with proof.raises(Exception, r"fp8_everything", code="LP704"):
        trainer("ddp", plugins=["fp8_everything"])  # a precision preset name given where Lightning reads plugins


@pytest.mark.proves("LP705", "LP706")
def test_lp705_lp706_slurms_own_settings_disagree_with_devices_and_nodes(
    proof: Proof, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lightning's launcher validates them when ``fit`` starts."""
    _environment(monkeypatch, **SLURM)
    with proof.raises(ValueError, r"--ntasks-per-node=1` does not match", code="LP705"):
        fit("ddp", devices=2)
    _environment(monkeypatch, SLURM_NNODES="2")
    with proof.raises(ValueError, r"--nodes=2` does not match", code="LP706"):
        fit("ddp", devices=1, num_nodes=1)


@pytest.mark.proves("LP707")
def test_lp707_slurm_ntasks_decides_the_world_whatever_devices_and_nodes_say(
    proof: Proof, monkeypatch: pytest.MonkeyPatch
) -> None:
    """devices=1 × num_nodes=2, but SLURM_NTASKS=1: Lightning trains with SLURM's world of 1 and ignores the rest."""
    _environment(monkeypatch, **{**SLURM, "SLURM_NNODES": "2", "MASTER_PORT": _free_port()})
    module = fit(_ddp(), Steps(), devices=1, num_nodes=2)
    assert len(module.losses) == 2
    proof.wrong("the world size Lightning trained with (devices × num_nodes asked for)", 2,
                module.trainer.world_size, code="LP707")  # fmt: skip


@pytest.mark.proves("LP708")
def test_lp708_torchelastic_world_size_disagrees_with_devices_and_nodes(
    proof: Proof, monkeypatch: pytest.MonkeyPatch
) -> None:
    _environment(monkeypatch, TORCHELASTIC_RUN_ID="evidence", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1", RANK="0",
                 LOCAL_RANK="0", GROUP_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=_free_port())  # fmt: skip
    with proof.raises(ValueError, r"does not match the world size \(1\)", code="LP708"):
        fit("ddp", devices=2)


@pytest.mark.proves("LP710")
def test_lp710_more_devices_than_visible_gpus(proof: Proof) -> None:
    with simulated_cuda(4), proof.raises(Exception, r"But your machine only has", code="LP710"):
        trainer("ddp", accelerator="cuda", devices=8)


@pytest.mark.proves("LP711")
def test_lp711_a_launcher_that_reruns_the_script_in_a_notebook(proof: Proof, monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.pytorch.trainer.connectors import accelerator_connector

    monkeypatch.setattr(accelerator_connector, "_IS_INTERACTIVE", True)  # what Lightning detects in IPython
    with proof.raises(Exception, r"not compatible with an interactive environment", code="LP711"):
        trainer("ddp", devices=2)


@pytest.mark.proves("LP712")
def test_lp712_interactive_slurm_on_several_nodes_hangs(proof: Proof, monkeypatch: pytest.MonkeyPatch) -> None:
    _environment(monkeypatch, **{**SLURM, "SLURM_JOB_NAME": "interactive", "SLURM_NTASKS": "2", "SLURM_NNODES": "2",
                                 "MASTER_PORT": _free_port()})  # fmt: skip
    with proof.raises(Exception, r"Timed out after \d+ seconds waiting for clients\. 1/2 clients joined", code="LP712"):
        fit(_ddp(), Steps(), devices=1, num_nodes=2)  # SLURM ignored: this node is node 0 and waits for node 1


@pytest.mark.proves("LP714")
def test_lp714_lsf_jsm_namespace_size_decides_the_world(
    proof: Proof, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    rankfile = tmp_path / "rankfile"
    rankfile.write_text(f"{socket.gethostname()}\n{socket.gethostname()}\n")  # the launch node, then one per task
    _environment(monkeypatch, LSB_JOBID="4242", LSB_DJOB_RANKFILE=str(rankfile), JSM_NAMESPACE_LOCAL_RANK="0",
                 JSM_NAMESPACE_RANK="0", JSM_NAMESPACE_SIZE="1", MASTER_PORT=_free_port())  # fmt: skip
    module = fit(_ddp(), Steps(), devices=1, num_nodes=2)
    assert len(module.losses) == 2
    proof.wrong("the world size Lightning trained with (devices × num_nodes asked for)", 2,
                module.trainer.world_size, code="LP714")  # fmt: skip


def test_lp709_torchruns_world_trains_whatever_devices_per_node_says(two_ranks: dict[str, Any]) -> None:
    """Not a failure: torchrun started 2 nodes × 1 process (LOCAL_WORLD_SIZE=1) and the Trainer says devices=2 on 1
    node. Lightning takes the world and ranks from torchrun; both ranks trained 3 steps and ended with the same
    weights. LP709 is therefore a warning."""
    states = [two_ranks["states"][("lp709_elastic", rank)] for rank in (0, 1)]
    assert [state["environment"] for state in states] == ["TorchElasticEnvironment"] * 2
    assert [state["world"] for state in states] == [2, 2]
    for state in states:
        assert len(state["losses"]) == 3
        assert state["losses"][-1] < state["losses"][0]
    assert states[0]["losses"] != states[1]["losses"]  # each rank saw its own batches
    assert states[0]["checksum"] == states[1]["checksum"]  # and the gradients were reduced across them
