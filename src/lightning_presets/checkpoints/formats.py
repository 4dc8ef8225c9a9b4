"""Format detection and the facts of each format: one ``torch.save`` file, a ``torch.distributed.checkpoint`` folder,
a DeepSpeed folder."""

from __future__ import annotations

import collections
import os
import re
from pathlib import Path
from typing import Any

from lightning_presets.checkpoints import limits
from lightning_presets.checkpoints.facts import CheckpointFacts, CheckpointReadError, KeyStyle, clean
from lightning_presets.checkpoints.paths import list_folder, read_bounded, stat_kind
from lightning_presets.checkpoints.state import (
    as_int,
    dtypes_of,
    has_tensors,
    is_optimizer_state,
    key_style,
    mapping_of,
)
from lightning_presets.checkpoints.torch_file import zip_pickle
from lightning_presets.checkpoints.unpickler import PickledObject, label, loads
from lightning_presets.core.rules import error_text


def read_checkpoint(path: str | os.PathLike[str]) -> CheckpointFacts:
    """The facts of the checkpoint at ``path``; :class:`CheckpointReadError` when they cannot be read safely (or the
    reader fails on them, whatever the error) and :class:`FileNotFoundError` when there is nothing at ``path``."""
    where = Path(path)
    try:
        kind = stat_kind(where)
        if kind == "file":
            return file_facts(where)
        entries = list_folder(where)
        if ".metadata" in entries:
            return distributed_facts(where, entries)
        return deepspeed_facts(where, entries)
    except (CheckpointReadError, FileNotFoundError, KeyboardInterrupt):
        raise
    except BaseException as error:  # the reader's own failure, on anything the files hold: never raised raw
        raise CheckpointReadError(
            f"{clean(repr(os.fspath(where)))}: the checkpoint reader of lightning-presets failed on it "
            f"({clean(error_text(error))}); a bug of lightning-presets, not of the checkpoint",
            internal=True,
        ) from None


_TRAINER_KEYS = ("pytorch-lightning_version", "loops")


def file_facts(path: Path) -> CheckpointFacts:
    top = mapping_of(zip_pickle(path)) or {}
    keys = tuple(label(key) for key in top)
    trainer = any(key in top for key in _TRAINER_KEYS)
    unknown: tuple[str, ...] = ()
    if trainer:
        states = top.get("optimizer_states")
        optimizer_states = list(states) if isinstance(states, (list, tuple)) else []
        entries: tuple[str, ...] = ("optimizer_states",) if "optimizer_states" in top else ()
        model_key: str | None = "state_dict" if "state_dict" in top else None
    else:
        found = [key for key, value in top.items() if is_optimizer_state(value)]
        entries = tuple(label(key) for key in found)
        optimizer_states = [top[key] for key in found]
        mappings = [key for key, value in top.items() if mapping_of(value) is not None and key not in found]
        modules = [key for key in mappings if has_tensors(top[key])] or mappings
        unknown = tuple(label(key) for key in mappings if key not in modules)
        model_key = "state_dict" if "state_dict" in top else label(modules[0]) if len(modules) == 1 else None
    weights = top.get(model_key) if model_key is not None else top
    styles = {key_style(state) for state in optimizer_states} - {"none"}
    return CheckpointFacts(
        path=os.fspath(path),
        format="file",
        writer="trainer" if trainer else "fabric",
        model_key=model_key,
        top_level=keys,
        weight_dtypes=dtypes_of(weights),
        optimizers=len(optimizer_states),
        optimizer_entries=entries,
        optimizer_keys=styles.pop() if len(styles) == 1 else "names" if styles else "none",
        unknown_entries=unknown,
    )


# --------------------------------------------------------------------------- a torch.distributed.checkpoint folder

_SHARD_FILE = re.compile(r"__(\d{1,9})_\d+\.distcp")
_DCP_METADATA = "torch.distributed.checkpoint.metadata.Metadata"


def distributed_facts(folder: Path, entries: frozenset[str]) -> CheckpointFacts:
    where = repr(os.fspath(folder / ".metadata"))
    metadata = loads(read_bounded(folder / ".metadata", limits.MAX_PICKLE_BYTES, "metadata"), where)
    if not isinstance(metadata, PickledObject) or metadata.qualname != _DCP_METADATA:
        raise CheckpointReadError(f"{where}: not the metadata torch.distributed.checkpoint writes")
    tensors = mapping_of(metadata.field("state_dict_metadata")) or {}
    paths = mapping_of(metadata.field("planner_data")) or {}
    storage = mapping_of(metadata.field("storage_data")) or {}
    files = {
        name
        for info in storage.values()
        if isinstance(info, PickledObject) and isinstance(name := info.field("relative_path"), str)
    }
    ranks = {int(m.group(1)) for name in (files or entries) if (m := _SHARD_FILE.fullmatch(name))}
    keyed = [
        (entry, _path_of(label(fqn), paths.get(fqn) if isinstance(fqn, str) else None))
        for fqn, entry in tensors.items()
    ]
    optimizers = sorted({label(path[0]) for _, path in keyed if len(path) > 1 and path[1] == "param_groups"})
    top = {label(path[0]) for _, path in keyed}
    modules = sorted(top - set(optimizers))
    meta = mapping_of(zip_pickle(folder / "meta.pt")) if "meta.pt" in entries else None
    trainer = meta is not None and any(key in meta for key in _TRAINER_KEYS)
    model_key = modules[0] if len(modules) == 1 else None
    weight_dtypes = collections.Counter(
        dtype for entry, path in keyed if label(path[0]) == model_key and (dtype := _tensor_dtype(entry))
    )
    styles: set[KeyStyle] = {
        "ids" if _is_id(path[2]) else "names"
        for _, path in keyed
        if len(path) > 2 and path[1] == "state" and label(path[0]) in optimizers
    }
    return CheckpointFacts(
        path=os.fspath(folder),
        format="distributed",
        writer="trainer" if trainer else "fabric" if meta is not None else "torch",
        world_size=max(ranks) + 1 if ranks else None,
        model_key=model_key,
        top_level=tuple(sorted(top | {label(key) for key in meta or ()})),
        weight_dtypes=tuple(dtype for dtype, _ in weight_dtypes.most_common()),
        optimizers=len(optimizers),
        optimizer_entries=tuple(optimizers),
        optimizer_keys=styles.pop() if len(styles) == 1 else "names" if styles else "none",
    )


def _path_of(fqn: str, planned: Any) -> tuple[Any, ...]:
    """The nested keys a flattened name stands for (``planner_data`` keeps their types), else the dotted parts."""
    if isinstance(planned, tuple) and planned:
        return planned
    return tuple(int(part) if part.isdigit() else part for part in fqn.split("."))


def _is_id(key: Any) -> bool:
    """An optimizer state key that is a parameter's index (``planner_data`` keeps it as a string of digits; a
    parameter's name is never only digits in a module's state dict)."""
    return type(key) is int or (isinstance(key, str) and key.isdigit())


def _tensor_dtype(entry: Any) -> str | None:
    properties = entry.field("properties") if isinstance(entry, PickledObject) else None
    if not isinstance(properties, PickledObject):
        return None
    state = properties.state
    dtype = state[0] if isinstance(state, tuple) and state else properties.field("dtype")
    return dtype.qualname[6:] if isinstance(dtype, type) and issubclass(dtype, PickledObject) else None


# --------------------------------------------------------------------------- a DeepSpeed folder

_MODEL_STATES = re.compile(r"(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt")
_OPTIM_STATES = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_?optim_states\.pt")


def _tag(folder: Path, name: str) -> str:
    raw = read_bounded(folder / name, limits.MAX_SMALL_FILE_BYTES, "content")
    tag = raw.decode("utf-8", errors="replace").strip()
    if not tag or tag in (".", "..") or "/" in tag or os.sep in tag or "\x00" in tag:
        raise CheckpointReadError(f"{os.fspath(folder / name)!r} names the tag {tag!r}, which is not a sub-folder")
    return tag


def deepspeed_facts(folder: Path, entries: frozenset[str]) -> CheckpointFacts:
    tag = _tag(folder, "latest") if "latest" in entries else None
    universal = "latest_universal" in entries and (folder / _tag(folder, "latest_universal")).is_dir()
    tag_folder = folder / tag if tag is not None else folder
    files = list_folder(tag_folder) if tag is not None else entries
    model_files = sorted(name for name in files if _MODEL_STATES.fullmatch(name))
    shards = [match for name in sorted(files) if (match := _OPTIM_STATES.fullmatch(name))]
    if not model_files:
        raise CheckpointReadError(
            f"{os.fspath(folder)!r} is a folder but no checkpoint: no '.metadata' (torch.distributed.checkpoint), no "
            "'latest' file or '*_model_states.pt' (DeepSpeed)"
        )
    states = mapping_of(zip_pickle(tag_folder / model_files[0])) or {}
    config = mapping_of(states.get("ds_config")) or {}
    zero = mapping_of(config.get("zero_optimization")) or {}
    stage = as_int(zero.get("stage"))
    if stage is None and shards:
        stage = _shard_stage(tag_folder / shards[0].group(0))
    dp_size = states.get("dp_world_size")
    mp_size = states.get("mp_world_size")
    trainer = any(key in states for key in _TRAINER_KEYS)
    return CheckpointFacts(
        path=os.fspath(folder),
        format="deepspeed",
        writer="trainer" if trainer else "deepspeed",
        world_size=len({m.group(1) for m in shards}) * len({m.group(2) for m in shards}) or None,
        model_key="module",
        top_level=tuple(label(key) for key in states),
        weight_dtypes=dtypes_of(states.get("module")),
        optimizers=1 if shards else 0,
        optimizer_keys="ids" if shards else "none",
        data_parallel_size=dp_size if type(dp_size) is int else len({m.group(1) for m in shards}) or None,
        model_parallel_size=mp_size if type(mp_size) is int else None,
        zero_stage=stage,
        zero_shards=len(shards),
        tag=clean(tag) if tag is not None else None,
        universal=universal,
    )


def _shard_stage(path: Path) -> int | None:
    state = mapping_of(mapping_of(zip_pickle(path)) or {})
    optimizer = mapping_of((state or {}).get("optimizer_state_dict")) or {}
    return as_int(optimizer.get("zero_stage"))
