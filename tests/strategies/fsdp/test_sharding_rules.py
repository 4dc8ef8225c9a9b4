"""``lightning_presets.strategies.fsdp.sharding_rules`` (hybrid sharding's mesh): each error rule's executed proof
(``proves``; LP112's and LP116's read the shared 2-process run of ``tests/evidence/`` and stay there), its accepted
neighbours (run, and each rule widened, by ``neighbours.neighbour_tests``).
"""

from __future__ import annotations

import pytest
from jobs import one_gloo_process
from proof import Proof

import lightning_presets
from neighbours import Neighbour, _hybrid, _t, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP111",
    n(_t(_hybrid.format("device_mesh=(2, 4)")), "a 2-D mesh of 2 replicas × 4 shards on one node"),
    n(_t(_hybrid.format("device_mesh=(1, 8)")), "one replica of 8 shards"),
    n(_t(_hybrid.format("device_mesh=(2, 8)"), "cuda", ", num_nodes=2"), "(replicas, shard size) = (nodes, devices)"),
    n(_t(_hybrid.format('device_mesh="auto"')), "'auto' = (num_nodes, devices per node)"),
    n(
        _t(_hybrid.format('device_mesh=(2, 4), sharding_strategy="_HYBRID_SHARD_ZERO2"')),
        "the other hybrid sharding, also 2-D",
    ),
)
_add(
    "LP112",
    n(_t(_hybrid.format("device_mesh=(2, 4)"), "cuda", ", num_nodes=2", 4), "2 × 4 = 4 devices × 2 nodes"),
    n(_t(_hybrid.format("device_mesh=(1, 8)")), "1 × 8 = 8 devices × 1 node"),
    n(_t(_hybrid.format("device_mesh=(4, 2)")), "4 × 2 = 8 devices × 1 node, the other split"),
    n(_t(_hybrid.format("device_mesh=(2, 8)"), "cuda", ", num_nodes=2"), "2 × 8 = 8 devices × 2 nodes"),
)
_add(
    "LP116",
    n(_t('"fsdp_hybrid_shard"', "cuda", ", num_nodes=4", 2), "shard groups of 2 devices on each of 4 nodes"),
    n(_t('"fsdp_hybrid_shard"', "cuda", ", num_nodes=2", 4), "shard groups of 4 devices on each of 2 nodes"),
    n(
        _t(_hybrid.format("device_mesh=(2, 2)"), "cuda", ", num_nodes=4", 1),
        "one device per node, but shard groups of 2 across nodes",
    ),
    n(_t('"fsdp_hybrid_shard"', "cuda", ", num_nodes=1", 1), "a world of one: no replica to reduce across"),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@pytest.mark.proves("LP111")
def test_lp111_a_three_dimensional_mesh_fails_when_fsdp_wraps_the_model(proof: Proof) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp._common_utils import _FSDPState
    from torch.distributed.fsdp._init_utils import _init_process_group_state

    proof.refused("LP111", lambda: lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 4, 2)))
    one_gloo_process()
    mesh = init_device_mesh("cpu", (1, 1, 1))  # Lightning builds the tuple's mesh this way, on "cuda"
    with proof.raises(ValueError, r"Expected device_mesh to have ndim=2 but got 3", code="LP111"):
        _init_process_group_state(_FSDPState(), None, ShardingStrategy.HYBRID_SHARD, None, mesh)
