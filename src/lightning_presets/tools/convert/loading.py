"""Each checkpoint layout the presets write, read whole into CPU memory in the single-file layout of its writer.

Reading is the owners' own: ``torch.load`` for one file, Lightning's loader of ``torch.distributed.checkpoint``
folders (through :mod:`lightning_presets.registry.private`), DeepSpeed's consolidation of ZeRO shards (and Lightning's,
which keeps the Trainer's state beside the weights). What the result cannot hold is listed in :attr:`Loaded.dropped`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_presets.checkpoints import CheckpointFacts
from lightning_presets.registry import private

_TRAINER_OPTIMIZER = re.compile(r"optimizer_(\d+)")
"""The Trainer's sharded layouts keep optimizer ``i`` under ``optimizer_i`` (its file layout: a list)."""
_DEEPSPEED_PREFIX = "_forward_module."
STATE_DICT = "state_dict"
"""Where the Trainer's single file keeps the weights."""


@dataclass(frozen=True, slots=True)
class Loaded:
    """A checkpoint in memory, in the single-file layout its writer uses."""

    checkpoint: dict[str, Any]
    weights_key: str | None
    """Where the model's weights are (``None``: the checkpoint is the weights)."""
    dropped: tuple[str, ...] = ()
    """What the source holds that ``checkpoint`` does not, said to the user."""


def load(facts: CheckpointFacts) -> Loaded:
    """The checkpoint ``facts`` describes, read whole (tensors on the CPU)."""
    if facts.format == "file":
        import torch

        checkpoint = torch.load(facts.path, map_location="cpu", weights_only=False, mmap=True)
        if not isinstance(checkpoint, dict):
            raise ValueError(f"{facts.path} holds a {type(checkpoint).__name__}, not a checkpoint's mapping")
        return Loaded(checkpoint, _weights_key(checkpoint, facts.model_key))
    if facts.format == "distributed":
        checkpoint = read_folder(facts.path)
        if facts.writer == "trainer":
            return Loaded(trainer_layout(checkpoint), STATE_DICT)
        return Loaded(checkpoint, _weights_key(checkpoint, facts.model_key))
    return _load_deepspeed(facts)


def read_folder(path: str | Path) -> dict[str, Any]:
    """A ``torch.distributed.checkpoint`` folder read whole by Lightning's loader (``meta.pt`` merged in)."""
    loaded: dict[str, Any] = private.load_distributed_checkpoint(path)
    return loaded


def _weights_key(checkpoint: Mapping[str, Any], key: str | None) -> str | None:
    return key if key is not None and isinstance(checkpoint.get(key), Mapping) else None


def trainer_layout(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """A Trainer's sharded checkpoint, read whole, in the layout of the Trainer's single file: the weights under
    ``state_dict`` (``FSDPStrategy`` writes ``model``), the optimizers as the list ``optimizer_states``, each keyed by
    the parameters' positions as a plain optimizer's ``state_dict()`` is (the sharded layouts key them by name)."""
    if "model" in checkpoint and STATE_DICT not in checkpoint:
        checkpoint[STATE_DICT] = checkpoint.pop("model")
    indices = sorted(int(m.group(1)) for key in checkpoint if (m := _TRAINER_OPTIMIZER.fullmatch(key)))
    if indices:
        checkpoint["optimizer_states"] = [by_position(checkpoint.pop(f"optimizer_{i}")) for i in indices]
    return checkpoint


def by_position(optimizer: Mapping[str, Any]) -> dict[str, Any]:
    """An optimizer state keyed by parameter names (or by ids written as text) keyed by the parameters' positions
    in its ``param_groups``, in order: what ``torch.optim.Optimizer.state_dict()`` returns and ``load_state_dict``
    matches position by position."""
    state = optimizer.get("state", {})
    groups, positioned, position = [], {}, 0
    for group in optimizer.get("param_groups", []):
        params = []
        for parameter in group.get("params", []):
            value = state.get(parameter, state.get(str(parameter)))
            if value is not None:
                positioned[position] = value
            params.append(position)
            position += 1
        groups.append({**group, "params": params})
    return {**optimizer, "state": positioned, "param_groups": groups}


def _load_deepspeed(facts: CheckpointFacts) -> Loaded:
    """DeepSpeed's fp32 consolidation of the ZeRO shards; for the Trainer's layout, Lightning's, which keeps the
    Trainer's state beside the weights. ZeRO's optimizer shards convert to no other strategy's optimizer state."""
    import tempfile

    from lightning_presets.checkpoints.conversions import deepspeed_root

    dropped = (
        ("the ZeRO optimizer state (DeepSpeed's partitions load into DeepSpeed only)",) if facts.zero_shards else ()
    )
    root, tag = deepspeed_root(facts)
    if facts.writer == "trainer":
        from lightning.pytorch.utilities.deepspeed import convert_zero_checkpoint_to_fp32_state_dict

        with tempfile.TemporaryDirectory() as scratch:  # Lightning's converter writes a file too: not the result
            checkpoint = convert_zero_checkpoint_to_fp32_state_dict(root, Path(scratch) / "state.pt", tag=tag)
        return Loaded(dict(checkpoint), STATE_DICT, dropped)
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    weights = get_fp32_state_dict_from_zero_checkpoint(root, tag)
    return Loaded({key.removeprefix(_DEEPSPEED_PREFIX): value for key, value in weights.items()}, None, dropped)
