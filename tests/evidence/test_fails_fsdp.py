"""FSDP1 presets: the proofs that read the shared 2-process run (``scripts/two_ranks.py``); the others live with their
rules' tests (``tests/strategies/fsdp/``, ``tests/strategies/fsdp_family/``). FSDP1 needs CUDA to run, so each proof
executes the part of Lightning's or torch's code path that fails without a GPU: torch's device mesh, and the
initialisation helpers ``FullyShardedDataParallel.__init__`` runs after its device check (on 2 gloo processes)."""

from __future__ import annotations

from typing import Any

import pytest
from jobs import one_gloo_process, trainer
from proof import Proof

import lightning_presets
from lightning_presets.tools.simulation import simulated_cuda

pytestmark = pytest.mark.usefixtures("process_group")


@pytest.mark.proves("LP112")
def test_lp112_a_mesh_that_is_not_the_world_fails_when_lightning_builds_it(
    proof: Proof, two_ranks: dict[str, Any]
) -> None:
    from torch.distributed.device_mesh import init_device_mesh

    def build() -> object:
        strategy = lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 4))
        with simulated_cuda(8):
            return trainer(strategy, accelerator="cuda", devices=8, num_nodes=2)

    proof.refused("LP112", build)
    one_gloo_process()  # a world of 1, meshed (2, 1): the mesh (2, 4) of a world of 16, scaled
    with proof.raises(RuntimeError, r"Mesh should not be bigger than default world size 1", code="LP112"):
        init_device_mesh("cpu", (2, 1))
    # A smaller mesh, (1, 1) on 2 processes: torch builds it, and the rank left out fails when FSDP asks for its group.
    proof.child(two_ranks["reports"], "lp112_mesh_smaller_than_world", "IndexError", "list index out of range",
                code="LP112")  # fmt: skip


@pytest.mark.proves("LP116")
def test_lp116_hybrid_shards_of_one_device_never_reduce_across_replicas(
    proof: Proof, two_ranks: dict[str, Any]
) -> None:
    def build() -> object:
        with simulated_cuda(8):
            return trainer("fsdp_hybrid_shard", accelerator="cuda", devices=1, num_nodes=4)

    proof.refused("LP116", build)
    for rank in (0, 1):
        state = two_ranks["states"][("lp116_hybrid_one_device_shards", rank)]
        assert state["replica_ranks"] == [0, 1]  # torch kept the replica group...
        proof.wrong(f"rank {rank}: the sharding strategy torch runs for a shard group of one device", "HYBRID_SHARD",
                    state["sharding_strategy"], code="LP116")  # fmt: skip
        proof.wrong(f"rank {rank}: the ranks its gradients are reduced over", [0, 1], state["reduce_ranks"],
                    code="LP116")  # fmt: skip
        assert any("switching to use `NO_SHARD`" in text for text in state["warnings"])


@pytest.mark.proves("LP117")
def test_lp117_a_2d_mesh_without_hybrid_sharding_reduces_over_dim_0(proof: Proof, two_ranks: dict[str, Any]) -> None:
    proof.refused("LP117", lambda: lightning_presets.strategy("fsdp_grad_op", device_mesh=(1, 2)))
    for rank in (0, 1):
        state = two_ranks["states"][("lp117_two_dimensional_mesh", rank)]
        proof.wrong(f"rank {rank}: the ranks SHARD_GRAD_OP reduces gradients over on a (1, 2) mesh of 2 processes",
                    [0, 1], state["reduce_ranks"], code="LP117")  # fmt: skip
        assert state["reduce_ranks"] == [rank]
