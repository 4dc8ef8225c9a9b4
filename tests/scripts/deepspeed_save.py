"""DeepSpeed's own engine on CPU (its CPU accelerator, gloo): trains two steps at ZeRO-2 and at ZeRO-3 and saves each
checkpoint, as DeepSpeed writes them, plus the weights the engine holds (gathered), for ``tests/test_convert.py``.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=... python tests/scripts/deepspeed_save.py OUT_FOLDER
"""

from __future__ import annotations

import os
import sys

import deepspeed
import deepspeed.ops
import torch

# The shared-memory all-reduce kernel DeepSpeed compiles for CPU on first use (minutes of gcc) is an optimisation of
# its collectives; gloo's own run without it, and the checkpoints are the same.
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def main(out: str) -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    rank = int(os.environ["RANK"])
    for stage in (2, 3):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
        config = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": stage},
                  "zero_allow_untested_optimizer": True}  # fmt: skip
        engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
        for step in range(2):
            loss = engine(torch.full((2, 4), float(rank + step))).sum()
            engine.backward(loss)
            engine.step()
        engine.save_checkpoint(f"{out}/zero{stage}")
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), enabled=stage == 3):
            held = {name: value.detach().clone() for name, value in engine.module.state_dict().items()}
        if rank == 0:
            torch.save(held, f"{out}/zero{stage}.held.pt")
    print("SAVED", rank, flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
