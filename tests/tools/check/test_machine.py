"""``lightning_presets.tools.check.machine``: LP735's executed proof (``proves``: Lightning refuses more devices than
the GPUs SLURM leaves visible), its accepted neighbours (``check`` commands, run and the rule widened by
``neighbours.neighbour_tests``) and the step they are about, run: the Trainer built on the GPUs SLURM assigned. The
rules' verdicts: ``tests/test_machine_build.py``.
"""

from __future__ import annotations

import pytest
from proof import Proof

from lightning_presets.tools.simulation import simulated_cuda
from neighbours import _C, CHECK, Neighbour, adder, n, neighbour_tests

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_SLURM = _C + "--cluster slurm "
_add(
    "LP735",
    n(_SLURM + "--devices 2 --env SLURM_STEP_GPUS=0,1", "2 devices on the 2 GPUs SLURM assigned"),
    n(_SLURM + "--devices 2 --env SLURM_STEP_GPUS=0,1,2,3", "2 devices of the 4 assigned"),
    n(_SLURM + "--devices 4", "no SLURM GPU variable: nothing says fewer (LP710 compares the node's GPUs)"),
    n(_SLURM + "--devices 4 --env SLURM_GPUS_ON_NODE=4", "SLURM's count: 4 = 4"),
    n(_SLURM + "--devices auto --env SLURM_STEP_GPUS=0,1", "'auto': every GPU SLURM left visible, 2"),
    n(_SLURM + "--env SLURM_STEP_GPUS=0,1", "no devices given: Trainer's 'auto'"),
    n(f"{CHECK} --accelerator cpu --cluster slurm --devices 4 --env SLURM_STEP_GPUS=0,1",
      "a CPU job: its devices are processes, not SLURM's GPUs"),
    n(_SLURM + "--devices 4 --env SLURM_STEP_GPUS=0,1 --env CUDA_VISIBLE_DEVICES=0,1,2,3",
      "CUDA_VISIBLE_DEVICES set over SLURM's: 4 GPUs seen (LP710's to compare; LP124 warns that 2 were not assigned)"),
)  # fmt: skip


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


@pytest.mark.parametrize(("assigned", "devices"), [(2, 2), (4, 2), (2, "auto"), (2, -1)])
def test_the_trainer_builds_on_the_gpus_slurm_assigned(assigned: int, devices: int | str) -> None:
    """The step LP735 is about, run for its neighbours: with the GPUs SLURM assigned visible (SLURM sets
    CUDA_VISIBLE_DEVICES to them), Lightning's device parsing accepts the devices and 'auto' takes them all."""
    from lightning.pytorch import Trainer

    with simulated_cuda(assigned):
        trainer = Trainer(strategy="ddp", accelerator="cuda", devices=devices, logger=False)
    assert trainer.num_devices == (assigned if devices in ("auto", -1) else devices)


# --- executed proofs ----------------------------------------------------------------------------------------------


@pytest.mark.proves("LP735")
def test_lp735_slurm_assigns_fewer_gpus_than_devices(proof: Proof) -> None:
    """SLURM sets CUDA_VISIBLE_DEVICES to the GPUs it assigned (SLURM_STEP_GPUS=0,1: two); with two visible GPUs,
    Lightning's own device parsing refuses devices=4 when the Trainer is built."""
    from lightning.pytorch import Trainer

    with simulated_cuda(2), proof.raises(Exception, r"But your machine only has", code="LP735"):
        Trainer(strategy="ddp", accelerator="cuda", devices=4, logger=False)
