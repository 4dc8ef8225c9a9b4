"""Executed proofs of the machine-against-build errors (``guards.machine``, ``tools.check.machine``): the torch and
Lightning code paths that fail, run on this CPU machine. Their verdicts and accepted neighbours:
``tests/test_machine_build.py``."""

from __future__ import annotations

import warnings

import pytest
from proof import Proof

import lightning_presets
from lightning_presets.tools.simulation import simulated_cuda


def _fabric(backend: str) -> object:
    from lightning.fabric import Fabric

    strategy = lightning_presets.strategy("ddp_static_graph", target="fabric", process_group_backend=backend)
    return Fabric(strategy=strategy, accelerator="cpu", devices=1)


@pytest.mark.proves("LP123")
def test_lp123_an_nccl_process_group_on_a_torch_built_without_nccl(proof: Proof, process_group: None) -> None:
    """The guard refuses it at construction; with the guard off, Lightning's own process-group set-up
    (``Fabric.launch`` -> ``DDPStrategy.setup_environment`` -> ``torch.distributed.init_process_group('nccl')``)
    raises on this CPU-only torch. A neighbour: the same job with gloo sets its process group up
    (test_machine_build)."""
    import torch.distributed as dist

    if dist.is_nccl_available():
        pytest.skip("this torch has NCCL: the failure needs a build without it")
    proof.refused("LP123", lambda: _fabric("nccl"))
    with proof.guard_off("LP123"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "NCCL support is not compiled" timeout note
        fabric = _fabric("nccl")
        with proof.raises(RuntimeError, r"Distributed package doesn't have NCCL built in", code="LP123"):
            fabric.launch()  # type: ignore[attr-defined]


@pytest.mark.proves("LP735")
def test_lp735_slurm_assigns_fewer_gpus_than_devices(proof: Proof) -> None:
    """SLURM sets CUDA_VISIBLE_DEVICES to the GPUs it assigned (SLURM_STEP_GPUS=0,1: two); with two visible GPUs,
    Lightning's own device parsing refuses devices=4 when the Trainer is built."""
    from lightning.pytorch import Trainer

    with simulated_cuda(2), proof.raises(Exception, r"But your machine only has", code="LP735"):
        Trainer(strategy="ddp", accelerator="cuda", devices=4, logger=False)


def test_lp123_neighbour_gloo_sets_the_process_group_up(process_group: None) -> None:
    """The accepted neighbour runs the very step: the same job with gloo, no LP123, and its process group forms."""
    import torch.distributed as dist

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fabric = _fabric("gloo")
        fabric.launch()  # type: ignore[attr-defined]
    assert dist.is_initialized()
    assert dist.get_backend() == "gloo"
    assert not [each for each in caught if "LP123" in str(each.message)]


def test_lp735_neighbour_devices_within_the_assignment() -> None:
    """With the two GPUs SLURM assigned visible, devices=2 builds (the step LP735 is about) and check says nothing."""
    from lightning.pytorch import Trainer

    with simulated_cuda(2):
        trainer = Trainer(strategy="ddp", accelerator="cuda", devices=2, logger=False)
    assert trainer.num_devices == 2
