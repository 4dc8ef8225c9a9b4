"""``lightning_presets.guards.launch_rules``: each error rule's executed proof (``proves``; LP096's are the launch
arithmetic's, ``tests/tools/check/test_launchers.py``), its accepted neighbours (run, and each rule widened, by
``neighbours.neighbour_tests``).
"""

from __future__ import annotations

from typing import Any

import pytest
from jobs import QUIET
from lightning.pytorch import Trainer
from proof import Proof

from lightning_presets.core.codes import Setting
from neighbours import CPU, Neighbour, _t, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

SLURM_4X2 = Setting(gpus=4, nodes=2, cluster="slurm")  # SLURM's variables for 4 tasks on each of 2 nodes
_add(
    "LP095",
    n(_t('"ddp_static_graph"', "cpu", ", num_nodes=2", 4), "devices=4 per node = --ntasks-per-node=4", SLURM_4X2),
    n(_t('"ddp_static_graph"', "cuda", ", num_nodes=2", 4), "the same on the 4 GPUs of each node", SLURM_4X2),
    n(_t('"fsdp2"', "cpu", ", num_nodes=2", 4), "another family, the same launch arithmetic", SLURM_4X2),
    n(_t('"ddp_static_graph"', "cuda", ", num_nodes=2", [0, 1, 2, 3]), "the 4 GPUs listed", SLURM_4X2),
)
_LP096 = (
    "import os\nos.environ.update(%s)\nTrainer(strategy='ddp_static_graph', accelerator='cpu', devices=%d, num_nodes=2)"
)
_TORCHRUN_LAST = 'TORCHELASTIC_RUN_ID="x", RANK="1", WORLD_SIZE="2", LOCAL_RANK="0", GROUP_RANK="1", MASTER_ADDR="h"'
_add(
    "LP096",
    n(_LP096 % ('NODE_RANK="1", LOCAL_RANK="0", MASTER_ADDR="10.0.0.1"', 1), "the last node: 1 < 2", CPU),
    n(_LP096 % ('NODE_RANK="0", LOCAL_RANK="1", MASTER_ADDR="10.0.0.1"', 2), "local rank 1 of 2 devices", CPU),
    n(_LP096 % ('SLURM_JOB_ID="4242", NODE_RANK="0", MASTER_ADDR="10.0.0.1"', 4), "a batch job, a node rank", CPU),
    n(_LP096 % (_TORCHRUN_LAST, 1), "torchrun's last rank", CPU),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@pytest.mark.proves("LP095")
def test_lp095_the_refusal_is_the_environments_own(proof: Proof, simulated_cluster: Any) -> None:
    """Under SLURM with 4 tasks per node, a job of 8 devices builds with the guard off and is refused at launch."""
    simulated_cluster("slurm", nodes=2, tasks_per_node=4)

    def build() -> Trainer:
        return Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=8, num_nodes=2, **QUIET)

    proof.refused("LP095", build)
    with proof.guard_off("LP095"):
        trainer = build()
        assert type(trainer.strategy.cluster_environment).__name__ == "SLURMEnvironment"
        with proof.raises(ValueError, "ntasks-per-node=4"):
            trainer.strategy._launcher.launch(lambda: None)  # the launcher validates first, before it runs anything
    trainer.strategy.cluster_environment.validate_settings(num_devices=4, num_nodes=2)
