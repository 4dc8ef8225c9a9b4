"""``lightning_presets.tools.check.cluster``: each error rule's executed proof (``proves``: Lightning's own launcher and
cluster environments fail, hang or train another world with the cluster's variables set), its accepted neighbours
(``check`` commands, run and each rule widened by ``neighbours.neighbour_tests``), and the rules' tests.
"""

from __future__ import annotations

import datetime
import socket
from pathlib import Path
from typing import Any

import pytest
from jobs import Steps, fit, trainer
from proof import Proof

from lightning_presets.tools.simulation import simulated_cuda
from neighbours import _C, CHECK, Neighbour, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP705",
    n(_C + "--devices 4 --cluster slurm --env SLURM_NTASKS_PER_NODE=4", "4 = 4"),
    n(_C + "--devices 8 --cluster slurm --env SLURM_NTASKS_PER_NODE=8", "8 = 8"),
    n(_C + "--devices 2 --cluster slurm --env SLURM_NTASKS_PER_NODE=2", "2 = 2"),
    n(_C + "--devices 1 --cluster slurm --env SLURM_NTASKS_PER_NODE=1", "1 = 1"),
)
_add(
    "LP706",
    n(_C + "--devices 8 --num-nodes 2 --cluster slurm --env SLURM_NNODES=2", "2 = 2"),
    n(_C + "--devices 8 --num-nodes 4 --cluster slurm --env SLURM_NNODES=4", "4 = 4"),
    n(_C + "--devices 8 --num-nodes 1 --cluster slurm --env SLURM_NNODES=1", "1 = 1"),
)
_add(
    "LP707",
    n(_C + "--devices 8 --num-nodes 4 --cluster slurm --env SLURM_NTASKS=32", "32 = 8 × 4"),
    n(_C + "--devices 8 --num-nodes 2 --cluster slurm --env SLURM_NTASKS=16", "16 = 8 × 2"),
    n(_C + "--devices 4 --num-nodes 1 --cluster slurm --env SLURM_NTASKS=4", "4 = 4 × 1"),
)
_add(
    "LP708",
    n(_C + "--devices 8 --num-nodes 4 --cluster torchelastic", "torchrun's own world size"),
    n(_C + "--devices 4 --num-nodes 4 --cluster torchelastic --env WORLD_SIZE=16", "16 = 4 × 4"),
    n(_C + "--devices 8 --num-nodes 2 --cluster torchelastic --env WORLD_SIZE=16", "16 = 8 × 2"),
)
_add(
    "LP710",
    n(_C + "--devices 4 --env CUDA_VISIBLE_DEVICES=0,1,2,3", "4 of 4 visible"),
    n(_C + "--devices 8", "8 of 8"),
    n(_C + "--devices 2 --env CUDA_VISIBLE_DEVICES=0,1,2,3", "2 of 4 visible"),
    n(_C + "--devices auto --env CUDA_VISIBLE_DEVICES=0,1", "'auto': every visible GPU"),
)
_add(
    "LP711",
    n(f"{CHECK} --accelerator cpu --devices 2 --strategy ddp_notebook --interactive", "ddp_notebook forks"),
    n(f"{CHECK} --accelerator cpu --devices 2 --strategy ddp_fork --interactive", "ddp_fork forks too"),
    n(f"{CHECK} --accelerator cpu --devices 2 --strategy ddp", "ddp from a script"),
    n(f"{CHECK} --accelerator cpu --devices 1 --strategy auto --interactive", "one process, nothing launched"),
)
_add(
    "LP712",
    n(_C + "--devices 8 --num-nodes 4 --cluster slurm", "a batch job's name"),
    n(_C + "--devices 8 --num-nodes 1 --cluster slurm --env SLURM_JOB_NAME=interactive", "interactive, one node"),
    n(_C + "--devices 4 --num-nodes 2 --cluster slurm --env SLURM_JOB_NAME=train", "a job named train, 4 × 2"),
    n(
        f"{CHECK} --accelerator cpu --devices 1 --num-nodes 2 --cluster slurm --env SLURM_JOB_NAME=interactive "
        "--env MASTER_ADDR=node001 --env MASTER_PORT=29500 --env NODE_RANK=1",
        "Lightning's manual multi-node launch inside the interactive allocation (trained as two nodes of one CPU "
        "process: tests/test_launchers.py::test_a_manual_launch_in_an_interactive_allocation_trains_as_two_nodes)",
    ),
)
_add(
    "LP734",
    n(_C + "--devices 4 --num-nodes 2 --cluster slurm", "srun with --ntasks-per-node=4 on 2 nodes"),
    n(
        _C + "--devices 2 --num-nodes 4 --cluster slurm --env SLURM_NTASKS=8 --env SLURM_NTASKS_PER_NODE=2",
        "--ntasks=8 beside --ntasks-per-node=2 on 4 nodes",
    ),
    n(
        _C + "--devices 1 --env SLURM_JOB_ID=4242 --env SLURM_NTASKS=1 --env SLURM_NNODES=1 --env SLURM_PROCID=0 "
        "--env SLURM_LOCALID=0 --env SLURM_NODEID=0",
        "one task: Lightning needs no tasks per node",
    ),
    n(
        _C + "--devices 4 --cluster torchelastic --env SLURM_JOB_ID=4242 --env SLURM_NTASKS=8",
        "torchrun in a --ntasks=8 allocation: Lightning follows torchrun",
    ),
    n(
        _C + "--devices 4 --env SLURM_JOB_ID=4242 --env SLURM_NTASKS=8 --env SLURM_JOB_NAME=interactive",
        "an interactive allocation: Lightning does not use SLURM",
    ),
)
_add(
    "LP714",
    n(_C + "--devices 8 --num-nodes 2 --cluster lsf", "LSF's own size"),
    n(_C + "--devices 4 --num-nodes 2 --cluster lsf --env JSM_NAMESPACE_SIZE=8", "8 = 4 × 2"),
    n(_C + "--devices 8 --num-nodes 1 --cluster lsf --env JSM_NAMESPACE_SIZE=8", "8 = 8 × 1"),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------

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


@pytest.mark.proves("LP734")
def test_lp734_a_slurm_job_with_ntasks_and_no_tasks_per_node(proof: Proof, monkeypatch: pytest.MonkeyPatch) -> None:
    """``#SBATCH --nodes=2 --ntasks=4``: SLURM sets no SLURM_NTASKS_PER_NODE, and building the Trainer raises on every
    task, before the strategy (or any guard) exists."""
    _environment(monkeypatch, **{**SLURM, "SLURM_NTASKS": "4", "SLURM_NNODES": "2"})
    monkeypatch.delenv("SLURM_NTASKS_PER_NODE")
    with proof.raises(RuntimeError, r"You set `--ntasks=4` in your SLURM bash script", code="LP734"):
        trainer("ddp", devices=2, num_nodes=2)


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
