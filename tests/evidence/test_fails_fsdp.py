"""FSDP1 presets (fsdp_offload_ckpt, fsdp_hybrid_shard, fsdp_grad_op). FSDP1 needs CUDA to run, so each proof executes
the part of Lightning's or torch's code path that fails without a GPU: Lightning's strategy methods, torch's device
mesh, and the initialisation helpers ``FullyShardedDataParallel.__init__`` runs after its device check (on 2 gloo
processes, ``scripts/two_ranks.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from jobs import fit, trainer
from proof import Proof
from torch import nn

import lightning_presets
from lightning_presets.tools.simulation import simulated_cuda

pytestmark = pytest.mark.usefixtures("process_group")


@pytest.mark.proves("LP101")
def test_lp101_fsdp_on_cpu_fails_when_the_model_is_wrapped(proof: Proof) -> None:
    proof.refused("LP101", lambda: trainer("fsdp_offload_ckpt"))
    with proof.guard_off("LP101"), proof.raises(RuntimeError, r"FSDP needs a non-CPU accelerator device"):
        fit("fsdp_offload_ckpt")


@pytest.mark.proves("LP104")
def test_lp104_an_unknown_sharding_strategy_fails_in_lightnings_constructor(proof: Proof) -> None:
    def strategy() -> object:
        return lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARDED")

    proof.refused("LP104", strategy)
    with proof.guard_off("LP104"), proof.raises(KeyError, r"FULL_SHARDED"):
        strategy()


@pytest.mark.proves("LP105")
def test_lp105_an_unknown_state_dict_type_fails_at_the_first_checkpoint(proof: Proof) -> None:
    def strategy() -> Any:
        return lightning_presets.strategy("fsdp_offload_ckpt", state_dict_type="sharding")

    proof.refused("LP105", strategy)
    with proof.guard_off("LP105"):
        built = strategy()
        built.model = nn.Linear(2, 2)  # what setup leaves there; FSDP itself needs CUDA
        with proof.raises(ValueError, r"Unknown state_dict_type: sharding"):
            built.lightning_module_state_dict()  # what Trainer.save_checkpoint calls first


def _init_process_group(proof: Proof) -> None:
    import os

    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("gloo", rank=0, world_size=1)


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.proves("LP111")
def test_lp111_a_three_dimensional_mesh_fails_when_fsdp_wraps_the_model(proof: Proof) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp._common_utils import _FSDPState
    from torch.distributed.fsdp._init_utils import _init_process_group_state

    proof.refused("LP111", lambda: lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 4, 2)))
    _init_process_group(proof)
    mesh = init_device_mesh("cpu", (1, 1, 1))  # Lightning builds the tuple's mesh this way, on "cuda"
    with proof.raises(ValueError, r"Expected device_mesh to have ndim=2 but got 3", code="LP111"):
        _init_process_group_state(_FSDPState(), None, ShardingStrategy.HYBRID_SHARD, None, mesh)


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
    _init_process_group(proof)  # a world of 1, meshed (2, 1): the mesh (2, 4) of a world of 16, scaled
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
