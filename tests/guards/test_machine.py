"""``lightning_presets.guards.machine``: LP123's executed proof (``proves``), its accepted neighbours (``check``
commands whose ``--torch-*`` flags give the target's build, run and the rule widened by ``neighbours.neighbour_tests``)
and the step they are about, run: the process group forming with gloo. The verdicts of LP120-LP125 on simulated
machine facts are ``tests/test_machine_build.py``'s.
"""

from __future__ import annotations

import warnings

import pytest
from proof import Proof

import lightning_presets
from neighbours import CHECK, Neighbour, adder, n, neighbour_tests

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_BUILD = "--torch-cuda 12.8 --torch-arch-list sm_90"  # the target's torch: a CUDA 12.8 build for Hopper
_NO_NCCL = f"{_BUILD} --torch-without-nccl"
_add(
    "LP123",
    n(f"{CHECK} --accelerator cpu --devices 2 --strategy ddp_static_graph {_NO_NCCL}",
      "no backend given on the CPU: Lightning's default there is gloo (formed: test_the_process_group_forms)"),
    n(f"{CHECK} --accelerator cpu --devices 2 --strategy ddp_static_graph {_NO_NCCL} --set process_group_backend=gloo",
      "process_group_backend='gloo' said, on a build without NCCL (the fixed example; formed below)"),
    n(f"{CHECK} --accelerator cpu --devices 2 --strategy fsdp2 {_NO_NCCL}",
      "another family on the CPU, its default gloo"),
    n(f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --strategy ddp_static_graph {_BUILD}",
      "the CUDA default nccl on a build that has NCCL"),
)  # fmt: skip


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


def _fabric(backend: str | None) -> object:
    from lightning.fabric import Fabric

    options = {} if backend is None else {"process_group_backend": backend}
    strategy = lightning_presets.strategy("ddp_static_graph", target="fabric", **options)
    return Fabric(strategy=strategy, accelerator="cpu", devices=1)


@pytest.mark.parametrize("backend", [None, "gloo"], ids=["cpu-default", "gloo"])
def test_the_process_group_forms(backend: str | None, process_group: None) -> None:
    """The step LP123 is about, run for its CPU neighbours on this torch (built without NCCL where the proof runs):
    no LP123, and ``Fabric.launch`` sets up a gloo process group."""
    import torch.distributed as dist

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fabric = _fabric(backend)
        fabric.launch()  # type: ignore[attr-defined]
    assert dist.is_initialized()
    assert dist.get_backend() == "gloo"
    assert not [each for each in caught if "LP123" in str(each.message)]


# --- executed proofs ----------------------------------------------------------------------------------------------


@pytest.mark.proves("LP123")
def test_lp123_an_nccl_process_group_on_a_torch_built_without_nccl(proof: Proof, process_group: None) -> None:
    """The guard refuses it at construction; with the guard off, Lightning's own process-group set-up
    (``Fabric.launch`` -> ``DDPStrategy.setup_environment`` -> ``torch.distributed.init_process_group('nccl')``)
    raises on this CPU-only torch."""
    import torch.distributed as dist

    if dist.is_nccl_available():
        pytest.skip("this torch has NCCL: the failure needs a build without it")
    proof.refused("LP123", lambda: _fabric("nccl"))
    with proof.guard_off("LP123"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's "NCCL support is not compiled" timeout note
        fabric = _fabric("nccl")
        with proof.raises(RuntimeError, r"Distributed package doesn't have NCCL built in", code="LP123"):
            fabric.launch()  # type: ignore[attr-defined]
