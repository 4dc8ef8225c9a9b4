"""DeepSpeed's own engine on CPU (its CPU accelerator, gloo) with the DeepSpeed presets' configs, for
``tests/tools/check/rehearsal/test_deepspeed.py``: a harness job (``run_job("ds_engine:presets", ...)``) on 2 ranks.

Each rank, for each DeepSpeed preset, builds the engine with ``deepspeed.initialize`` over the config the preset's
strategy holds (``lightning_presets.strategy(name).config``, the micro-batch added as Lightning's ``_format_config``
adds it) and a torch ``AdamW``, trains two steps and prints ``RESULT {json}``: what the engine holds (its optimizer,
whether it offloads the optimizer and the parameters, this rank's share of the parameters) and the losses. Then the
config of LP417 (the optimizer offloaded, ``zero_force_ds_cpu_optimizer`` left at its default): the engine's refusal
is printed as a ``PROOF`` line.
"""

from __future__ import annotations

import copy
import json
import os
from typing import Any

import deepspeed
import deepspeed.ops
import torch

# The shared-memory all-reduce kernel DeepSpeed compiles for CPU on first use (minutes of gcc) is an optimisation of its
# collectives; gloo's own run without it.
deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False

PRESETS = ("deepspeed_zero2_offload", "deepspeed_zero3_offload_ckpt")


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


def preset_config(name: str) -> dict[str, Any]:
    import lightning_presets

    config: dict[str, Any] = copy.deepcopy(dict(lightning_presets.strategy(name).config))
    config["train_micro_batch_size_per_gpu"] = 2
    return config


def _train(config: dict[str, Any]) -> dict[str, Any]:
    model = _model()
    total = sum(p.numel() for p in model.parameters())
    engine, *_ = deepspeed.initialize(model=model, optimizer=torch.optim.AdamW(model.parameters(), lr=0.1),
                                      config=config)  # fmt: skip
    rank = int(os.environ["RANK"])
    losses = []
    for step in range(2):
        loss = engine(torch.full((2, 8), float(rank + step + 1))).pow(2).mean()
        engine.backward(loss)
        engine.step()
        losses.append(float(loss))
    local = sum(getattr(p, "ds_tensor", p).numel() for p in engine.module.parameters())
    return {
        "rank": rank,
        "world": torch.distributed.get_world_size(),
        "optimizer": type(engine.optimizer).__name__,
        "inner": type(getattr(engine.optimizer, "optimizer", None)).__name__,
        "offload_optimizer": bool(engine.zero_cpu_offload()),
        "offload_param": bool(engine.zero_offload_param()),
        "stage": engine.zero_optimization_stage(),
        "local_numel": local,
        "numel": total,
        "losses": losses,
    }


def presets() -> None:
    deepspeed.init_distributed(dist_backend="gloo")
    for name in PRESETS:
        print("RESULT", json.dumps({"preset": name, **_train(preset_config(name))}), flush=True)
    from deepspeed.runtime.zero.utils import ZeRORuntimeException
    from proof import report

    refused = {"train_micro_batch_size_per_gpu": 2, "zero_optimization": {"stage": 2, "offload_optimizer":
               {"device": "cpu"}}}  # fmt: skip
    try:
        _train(refused)
    except ZeRORuntimeException as error:
        report("lp417", error)
