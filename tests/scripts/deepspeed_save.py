"""DeepSpeed's own engine on CPU (its CPU accelerator, gloo): trains two steps at ZeRO-2 and at ZeRO-3 and saves each
checkpoint, as DeepSpeed writes them, plus the weights the engine holds (gathered), for ``tests/test_convert.py``.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=... python tests/scripts/deepspeed_save.py OUT_FOLDER
    RANK=0 WORLD_SIZE=1 ... python tests/scripts/deepspeed_save.py --load-universal FOLDER2 FOLDER3 HELD_FOLDER

``--load-universal`` loads universal checkpoints (``lightning-presets convert --to universal`` of the ZeRO-2 and ZeRO-3
folders) into a fresh engine on this world size, with ``checkpoint.load_universal`` set as LP802's hint says, and
prints ``LOADED <stage> EQUAL <bool> STEP <n>``: whether the weights the engine holds after loading equal those it
held when it saved at the other world size, and the optimizer's step count restored.
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
        engine = _engine(stage, seed=0)
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


def _engine(stage: int, seed: int, universal: bool = False) -> deepspeed.DeepSpeedEngine:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    config: dict[str, object] = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": stage},
                                 "zero_allow_untested_optimizer": True}  # fmt: skip
    if universal:
        config["checkpoint"] = {"load_universal": True}
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    return engine


def load_universal(folders: list[str], held: str) -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    for stage, folder in zip((2, 3), folders, strict=True):
        engine = _engine(stage, seed=1, universal=True)  # other initial weights: the load must replace them
        engine.load_checkpoint(folder)
        with deepspeed.zero.GatheredParameters(list(engine.module.parameters()), enabled=stage == 3):
            loaded = {name: value.detach().clone() for name, value in engine.module.state_dict().items()}
        reference = torch.load(f"{held}/zero{stage}.held.pt", weights_only=True)
        equal = loaded.keys() == reference.keys() and all(torch.equal(loaded[k], v) for k, v in reference.items())
        steps = {int(each.get("step", 0)) for each in engine.optimizer.optimizer.state.values()} or {0}
        print("LOADED", stage, "EQUAL", equal, "STEP", max(steps), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "--load-universal":
        load_universal(sys.argv[2:4], sys.argv[4])
    else:
        main(sys.argv[1])
