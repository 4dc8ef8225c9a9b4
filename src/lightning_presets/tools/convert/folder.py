"""A checkpoint in the Trainer's single-file layout written as the Trainer's sharded folder, the one
``ModelParallelStrategy`` (``fsdp2``, ``tp2d_hybrid``) loads at any world size: ``torch.distributed.checkpoint``
shards of ``state_dict`` and of each optimizer (``optimizer_0``...), keyed by parameter names, and Lightning's
``meta.pt`` (everything else: loops, callbacks, schedulers, hyper-parameters), as its ``save_checkpoint`` writes them.

A plain optimizer's ``state_dict()`` keys the state by the parameters' positions in its ``param_groups``; the sharded
layout keys it by name, and only the model says which parameter each position is: the model's own
``configure_optimizers`` builds the optimizers (on the meta device: no memory), and torch's
``FullyShardedDataParallel.rekey_optim_state_dict`` re-keys each state through them. Each re-keyed tensor is checked
against its parameter's shape, so a model that is not the checkpoint's is refused rather than written.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

STATE_DICT = "state_dict"
OPTIMIZER_STATES = "optimizer_states"
META = "meta.pt"
"""Lightning's ``_METADATA_FILENAME``: the Trainer's state beside the shards."""


class ModelMismatch(ValueError):
    """The model given cannot re-key the checkpoint's optimizer state (the message says where it differs)."""


def needs_model(checkpoint: Mapping[str, Any]) -> bool:
    """Whether the checkpoint holds optimizer state keyed by position (what only the model can name)."""
    return any(isinstance(each, Mapping) and each.get("state") for each in checkpoint.get(OPTIMIZER_STATES) or [])


def build_model(spec: str) -> tuple[Any, list[Any]]:
    """(the module ``spec`` builds, its optimizers by ``configure_optimizers``), built on the meta device when the
    factory allows it (no memory for the weights), else on the CPU."""
    import torch

    from lightning_presets.tools.simulation.user_model import build, load_factory, optimizers

    factory = load_factory(spec)
    try:
        with torch.device("meta"):
            model = build(factory, spec)
    except Exception:  # a factory that reads real tensors (a pretrained file): built as it is
        model = build(factory, spec)
    return model, optimizers(model, spec, "adamw")


def by_name(
    checkpoint: Mapping[str, Any], model: Any, optimizers: list[Any], weights_key: str = STATE_DICT
) -> list[dict[str, Any]]:
    """Each optimizer state of the Trainer's file (``optimizer_states``), keyed by parameter names through
    ``optimizers`` (the model's own); raises :class:`ModelMismatch` where the model is not the checkpoint's."""
    states = list(checkpoint.get(OPTIMIZER_STATES) or [])
    weights = checkpoint.get(weights_key) or {}
    names = {name for name, _ in model.named_parameters()}
    missing = sorted(names - set(weights))
    if missing:
        raise ModelMismatch(
            f"the model's parameters {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} are not in the "
            f"checkpoint's {weights_key!r}"
        )
    if len(states) != len(optimizers):
        raise ModelMismatch(
            f"the checkpoint holds {len(states)} optimizer states, the model's configure_optimizers builds "
            f"{len(optimizers)}"
        )
    parameters = dict(model.named_parameters())
    renamed = []
    for index, (state, optimizer) in enumerate(zip(states, optimizers, strict=True)):
        groups = [len(group["params"]) for group in state.get("param_groups", [])]
        built = [len(group["params"]) for group in optimizer.param_groups]
        if groups != built:
            raise ModelMismatch(
                f"optimizer {index}: the checkpoint's parameter groups hold {groups} parameters, the model's "
                f"optimizer {built}"
            )
        keyed = _rekeyed(dict(state), model, optimizer)
        for name, values in keyed["state"].items():
            shape = tuple(parameters[name].shape)
            for key, value in values.items():
                found = tuple(getattr(value, "shape", ()))
                if found and found != shape:
                    raise ModelMismatch(
                        f"optimizer {index}: the state {key!r} of the parameter {name!r} has shape {found}, the "
                        f"parameter {shape}"
                    )
        renamed.append(keyed)
    return renamed


def _rekeyed(state: dict[str, Any], model: Any, optimizer: Any) -> dict[str, Any]:
    """torch's ``FullyShardedDataParallel.rekey_optim_state_dict`` through ``optimizer`` (what Lightning's own load of
    a full file calls); where a torch release no longer has FSDP1's class, the same mapping by hand: the positions
    count the optimizer's parameters group by group, each named as the model names it."""
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel, OptimStateKeyType
    except ImportError:
        pass
    else:
        keyed: dict[str, Any] = FullyShardedDataParallel.rekey_optim_state_dict(
            state, OptimStateKeyType.PARAM_NAME, model, optim=optimizer
        )
        return keyed
    names = {id(parameter): name for name, parameter in model.named_parameters()}
    ordered = [names[id(parameter)] for group in optimizer.param_groups for parameter in group["params"]]
    groups, position = [], 0
    for group in state.get("param_groups", []):
        count = len(group["params"])
        groups.append({**group, "params": ordered[position : position + count]})
        position += count
    return {**state, "state": {ordered[int(k)]: v for k, v in state.get("state", {}).items()}, "param_groups": groups}


def save(checkpoint: Mapping[str, Any], named_optimizers: list[dict[str, Any]], path: Path, model_key: str) -> None:
    """Write the sharded layout into the new folder ``path``: torch's ``dcp.save`` without a process group (one
    writer, the whole checkpoint), then Lightning's ``meta.pt``."""
    import torch
    from torch.distributed.checkpoint.state_dict_saver import save as dcp_save

    path.mkdir()
    shards: dict[str, Any] = {model_key: dict(checkpoint[STATE_DICT])}
    shards.update({f"optimizer_{index}": state for index, state in enumerate(named_optimizers)})
    with warnings.catch_warnings():  # "assuming the intent is to save in a single process": it is
        warnings.filterwarnings("ignore", message=".*torch.distributed is disabled.*", category=UserWarning)
        dcp_save(shards, checkpoint_id=str(path))
    meta = {key: value for key, value in checkpoint.items() if key not in (STATE_DICT, OPTIMIZER_STATES)}
    torch.save(meta, path / META)


def read_back(path: Path) -> dict[str, Any]:
    """The written folder read back whole from disk by Lightning's reader of sharded checkpoints (torch's loader
    without a process group, then ``meta.pt``), not taken from the writer's memory."""
    from lightning_presets.tools.convert.loading import read_folder

    return read_folder(path)
