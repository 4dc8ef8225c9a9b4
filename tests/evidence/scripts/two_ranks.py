"""Two gloo processes, started by the test the way torchrun starts them (RANK, WORLD_SIZE, MASTER_ADDR/PORT).

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ELASTIC_PORT=29501 python two_ranks.py

1. torch FSDP1's own initialisation helpers (``_init_process_group_state``, ``_init_core_state``: what
   ``FullyShardedDataParallel.__init__`` runs after its device check, which needs CUDA) on 2-D meshes: which process
   group each rank would reduce its gradients over, and the sharding strategy torch settles on. One ``STATE`` line
   per scenario.
2. A job torchrun launched over two nodes of one process each, while the Trainer says one node of two devices
   (``LOCAL_WORLD_SIZE=1``, ``devices=2``): a real ``Trainer.fit`` of three steps. One ``STATE`` line.
"""

from __future__ import annotations

import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE.parents[1])]  # tests/evidence (proof), tests/ (models)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from proof import report  # noqa: E402

STATE = "STATE "
SCENARIOS = (
    ("lp116_hybrid_one_device_shards", (2, 1), "HYBRID_SHARD"),
    ("lp117_two_dimensional_mesh", (1, 2), "SHARD_GRAD_OP"),
    ("lp112_mesh_smaller_than_world", (1, 1), "HYBRID_SHARD"),
)


def emit(scenario: str, **values: Any) -> None:
    sys.stdout.write(STATE + json.dumps({"scenario": scenario, "rank": dist.get_rank(), **values}) + "\n")
    sys.stdout.flush()


def fsdp_groups(scenario: str, shape: tuple[int, int], sharding: str) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import ShardingStrategy
    from torch.distributed.fsdp._common_utils import _FSDPState
    from torch.distributed.fsdp._init_utils import _init_core_state, _init_process_group_state

    mesh = init_device_mesh("cpu", shape)
    state = _FSDPState()
    strategy = ShardingStrategy[sharding]
    _init_process_group_state(state, None, strategy, None, mesh)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _init_core_state(state, strategy, None, None, True, False, 1, 1)
    inter = getattr(state, "_inter_node_pg", None)
    emit(
        scenario,
        world=dist.get_world_size(),
        sharding_strategy=state.sharding_strategy.name,
        reduce_ranks=dist.get_process_group_ranks(state.process_group),
        replica_ranks=dist.get_process_group_ranks(inter) if inter is not None else None,
        warnings=[str(each.message) for each in caught],
    )


def elastic_job() -> None:
    """torchrun's variables for 2 nodes × 1 process, and a Trainer that says 1 node × 2 devices."""
    from jobs import Steps, fit

    rank = os.environ["RANK"]
    os.environ.update(TORCHELASTIC_RUN_ID="evidence", LOCAL_WORLD_SIZE="1", LOCAL_RANK="0", GROUP_RANK=rank,
                      MASTER_PORT=os.environ["ELASTIC_PORT"])  # fmt: skip
    module = fit("ddp", Steps(), devices=2, num_nodes=1, max_steps=3)
    checksum = sum(float(p.detach().double().sum()) for p in module.parameters())
    emit("lp709_elastic", world=module.trainer.world_size, losses=module.losses, checksum=checksum,
         environment=type(module.trainer.strategy.cluster_environment).__name__)  # fmt: skip


def main() -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    for scenario, shape, sharding in SCENARIOS:
        try:
            fsdp_groups(scenario, shape, sharding)
        except Exception as error:  # what torch raised is the finding
            report(scenario, error)
        # Rank 0 hosts the store: a rank that is done (lp112 raises before touching it) must not move on, or destroy
        # the group and its store, while the other is still connecting this scenario's subgroups over that store.
        dist.barrier()
    dist.destroy_process_group()
    elastic_job()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
