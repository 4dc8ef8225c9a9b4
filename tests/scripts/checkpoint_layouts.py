"""Checkpoint folders and files in the layouts other strategies write, built without those strategies.

DeepSpeed and FSDP1 need CUDA to save; their layouts are written here from what DeepSpeed and Lightning document and
their code writes (file names, ``dp_world_size``, ``mp_world_size``, the ZeRO stage, one optimizer shard per
data-parallel rank), with small real tensors. ``benchmarks/gpu/resume_checks.py`` writes real ones on a GPU.

    deepspeed_folder(root, stage=2, data_parallel=8)   # Lightning's layout: root/latest, root/checkpoint/...
    fsdp_folder(root, full_checkpoint)                  # the Trainer's FSDPStrategy sharded layout ("model")
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from pathlib import Path
from typing import Any

import torch

LIGHTNING_STATE = {"epoch": 0, "global_step": 3, "pytorch-lightning_version": "2.6.6", "loops": {}, "callbacks": {}}


class ZeroStage(IntEnum):
    """Pickled like DeepSpeed's ``ZeroStageEnum``: an enum member, not an int."""

    disabled = 0
    optimizer_states = 1
    gradients = 2
    weights = 3


def small_state_dict(dtype: torch.dtype = torch.bfloat16) -> dict[str, torch.Tensor]:
    return {"layer.weight": torch.zeros(4, 4, dtype=dtype), "layer.bias": torch.zeros(4, dtype=dtype)}


def deepspeed_folder(
    root: Path,
    *,
    stage: int,
    data_parallel: int,
    model_parallel: int = 1,
    tag: str | None = "checkpoint",
    lightning: bool = True,
    bf16: bool = True,
    config_stage: bool = True,
    universal: bool = False,
) -> Path:
    """A DeepSpeed checkpoint at ``root``: ``latest`` naming ``tag`` (Lightning saves with the tag ``checkpoint``),
    the model states of each model-parallel rank (ZeRO-3: of every rank) and one optimizer shard per data-parallel
    rank. ``tag=None`` writes the files into ``root`` itself. Returns the folder to pass as ``ckpt_path``."""
    folder = root / tag if tag is not None else root
    folder.mkdir(parents=True)
    if tag is not None:
        (root / "latest").write_text(tag)
    config: dict[str, Any] = {"bf16": {"enabled": bf16}, "train_micro_batch_size_per_gpu": 1}
    if config_stage:
        config["zero_optimization"] = {"stage": stage}
    states: dict[str, Any] = {
        "module": small_state_dict(torch.bfloat16 if bf16 else torch.float16) if stage < 3 else {},
        "buffer_names": [],
        "optimizer": None,
        "dp_world_size": data_parallel,
        "mp_world_size": model_parallel,
        "ds_config": config,
        "ds_version": "0.19.8",
        **(LIGHTNING_STATE if lightning else {}),
    }
    prefix = "bf16_" if bf16 else ""
    for mp_rank in range(model_parallel):
        if stage < 3:
            torch.save(states, folder / f"mp_rank_{mp_rank:02d}_model_states.pt")
        for dp_rank in range(data_parallel):
            if stage == 3:
                torch.save(states, folder / f"zero_pp_rank_{dp_rank}_mp_rank_{mp_rank:02d}_model_states.pt")
            shard = {"optimizer_state_dict": {"zero_stage": ZeroStage(stage), "partition_count": data_parallel}}
            torch.save(shard, folder / f"{prefix}zero_pp_rank_{dp_rank}_mp_rank_{mp_rank:02d}_optim_states.pt")
    if universal:
        converted = root / f"{tag}_universal"
        (converted / "zero").mkdir(parents=True)
        torch.save(states, converted / "mp_rank_00_model_states.pt")
        (root / "latest_universal").write_text(converted.name)
    return root if tag is not None else folder


def fsdp_folder(root: Path, checkpoint: Mapping[str, Any]) -> Path:
    """The Trainer's ``FSDPStrategy`` sharded layout of a full Lightning checkpoint (``FSDPStrategy.save_checkpoint``
    with ``state_dict_type="sharded"``): weights under ``model``, each optimizer under ``optimizer_N`` keyed by
    parameter name, everything else in ``meta.pt``. Written by one process."""
    import torch.distributed.checkpoint as dcp

    full = dict(checkpoint)
    weights = full.pop("state_dict")
    names = list(weights)
    shards: dict[str, Any] = {"model": weights}
    for index, optimizer in enumerate(full.pop("optimizer_states", [])):
        shards[f"optimizer_{index}"] = by_name(optimizer, names)
    dcp.save(shards, checkpoint_id=str(root))
    torch.save(full, root / "meta.pt")
    return root


def by_name(optimizer: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """A plain optimizer's ``state_dict()`` keyed by parameter name, as FSDP and ``get_optimizer_state_dict`` key it
    (the parameters in the order of ``names``)."""
    groups = [{**group, "params": [names[index] for index in group["params"]]} for group in optimizer["param_groups"]]
    return {"state": {names[index]: value for index, value in optimizer["state"].items()}, "param_groups": groups}
