"""``lightning_presets.tools.check.launchers``, the launch arithmetic of ``check`` (LP717, LP718, LP728): each error's
executed proof (``proves``, LP096 of ``guards/launch_rules.py`` with it), its accepted neighbours (``check`` commands,
run and each rule widened by ``neighbours.neighbour_tests``).

The job is given to Lightning in this process with the variables its launcher (or the user) sets, one process being
the rank that is wrong. A rank outside the world needs rank 0's store to reach torch's process group: the test hosts
that store itself (a ``TCPStore`` server, as rank 0 of the job would), so the wrong rank fails at once instead of
timing out alone.
"""

from __future__ import annotations

import datetime
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from jobs import Steps, fit
from proof import Proof

from lightning_presets.core.environment import is_cluster_variable
from neighbours import _C, Neighbour, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP717",
    n(_C + "--devices 8 --num-nodes 2 --env MASTER_ADDR=10.0.0.1 --env NODE_RANK=1", "the last node: 1 < 2"),
    n(_C + "--devices 8 --num-nodes 2 --env MASTER_ADDR=10.0.0.1 --env NODE_RANK=0", "the first node"),
    n(_C + "--devices 8 --num-nodes 4 --env MASTER_ADDR=10.0.0.1 --env NODE_RANK=3", "3 < 4 nodes"),
    n(_C + "--devices 8 --num-nodes 2 --cluster torchelastic --env GROUP_RANK=1", "torchrun: RANK decides"),
)
_add(
    "LP718",
    n(_C + "--devices 8 --num-nodes 2 --cluster torchelastic --env RANK=15", "the last rank: 15 < 16"),
    n(_C + "--devices 8 --num-nodes 2 --cluster torchelastic --env RANK=0", "rank 0"),
    n(_C + "--devices 2 --num-nodes 2 --cluster ray --env NODE_RANK=1 --env LOCAL_RANK=1 --env RANK=3", "1×2+1 < 4"),
    n(_C + "--devices 8 --num-nodes 2 --cluster skypilot --env RANK=8 --env GROUP_RANK=1", "SkyPilot's node 1"),
)
_add(
    "LP728",
    n(_C + "--devices 8 --num-nodes 2 --cluster slurm", "srun started the tasks"),
    n(_C + "--devices 8 --num-nodes 1 --env SLURM_JOB_ID=4242 --env SLURM_NNODES=1", "one node: Lightning launches"),
    n(_C + "--devices 8 --num-nodes 2 --env SLURM_JOB_ID=4242 --env MASTER_ADDR=h --env NODE_RANK=0", "NODE_RANK set"),
    n(_C + "--devices 8 --num-nodes 2 --cluster torchelastic --env SLURM_JOB_ID=4242", "torchrun inside the job"),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ddp(seconds: int = 5) -> Any:
    """Plain DDP whose rendezvous gives up after ``seconds``: a hang becomes torch's timeout error."""
    from lightning.pytorch.strategies import DDPStrategy

    return DDPStrategy(timeout=datetime.timedelta(seconds=seconds))


@pytest.fixture
def launch(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Set exactly the given launch variables (every other cluster variable of the test's environment removed)."""
    import os

    for name in [name for name in os.environ if is_cluster_variable(name)]:
        monkeypatch.delenv(name)

    def apply(**variables: str) -> None:
        for key, value in variables.items():
            monkeypatch.setenv(key, value)

    return apply


@pytest.fixture
def rank_zero_store() -> Iterator[int]:
    """The port of a store served as rank 0 of a 2-process job serves it (its process group is never joined)."""
    from torch.distributed import TCPStore

    port = _free_port()
    store = TCPStore("127.0.0.1", port, world_size=2, is_master=True, wait_for_workers=False,
                     timeout=datetime.timedelta(seconds=10))  # fmt: skip
    yield port
    del store


@pytest.mark.proves("LP717", "LP096")
def test_lp717_a_node_rank_outside_the_nodes(proof: Proof, launch: Any, rank_zero_store: int) -> None:
    """Nodes numbered from 1: on the second of 2 nodes NODE_RANK=2, so Lightning's own environment gives its process
    the global rank 2 × devices + 0 = 2 in a world of 2."""
    launch(NODE_RANK="2", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(rank_zero_store))
    with proof.raises(RuntimeError, r"rank < size", code=("LP717", "LP096")):
        fit(_ddp(), Steps(), devices=1, num_nodes=2)


@pytest.mark.proves("LP718", "LP096")
def test_lp718_a_rank_outside_the_world(proof: Proof, launch: Any, rank_zero_store: int) -> None:
    """torchrun's variables with RANK=2 in WORLD_SIZE=2 (devices × num_nodes = 2, so Lightning's own check passes)."""
    launch(TORCHELASTIC_RUN_ID="evidence", WORLD_SIZE="2", LOCAL_WORLD_SIZE="1", RANK="2", LOCAL_RANK="0",
           GROUP_RANK="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(rank_zero_store))  # fmt: skip
    with proof.raises(RuntimeError, r"rank < size", code=("LP718", "LP096")):
        fit(_ddp(), Steps(), devices=1, num_nodes=2)


@pytest.mark.proves("LP728", "LP096")
def test_lp728_a_batch_job_started_without_srun_hangs(proof: Proof, launch: Any) -> None:
    """``python train.py`` in an sbatch script of 2 nodes (SLURM_JOB_ID and SLURM_NNODES, no srun task variables):
    Lightning selects its own environment, this node is node 0 and waits for node 1."""
    launch(SLURM_JOB_ID="4242", SLURM_JOB_NAME="train", SLURM_NNODES="2", SLURM_NODELIST="127.0.0.1",
           MASTER_PORT=str(_free_port()))  # fmt: skip
    joined = r"Timed out after \d+ seconds waiting for clients\. 1/2 clients joined"
    with proof.raises(Exception, joined, code=("LP728", "LP096")):
        fit(_ddp(seconds=2), Steps(), devices=1, num_nodes=2)
