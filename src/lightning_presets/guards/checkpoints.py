"""What a checkpoint is, read without loading it: its format, the processes that wrote it, its weights' precision and
its optimizer state.

Three formats are recognised, by their files:

- ``file``: one ``torch.save`` zip (DDP, one device, FSDP with ``state_dict_type="full"``, a consolidated checkpoint);
- ``distributed``: a ``torch.distributed.checkpoint`` folder (``.metadata`` and ``__RANK_N.distcp`` files; Lightning
  adds ``meta.pt``), written by FSDP (``FSDPStrategy``) and ``ModelParallelStrategy`` (FSDP2, tensor parallel);
- ``deepspeed``: a DeepSpeed folder (``latest`` naming a tag folder of ``mp_rank_XX_model_states.pt`` and one
  ``[bf16_]zero_pp_rank_R_mp_rank_XX_optim_states.pt`` per data-parallel rank); Lightning's layout is the same with
  the tag ``checkpoint``.

Bounded and safe: only pickles are read (never a tensor's bytes), through an unpickler that imports nothing and
calls nothing (every class the pickle names becomes an inert placeholder); pickles, zip indexes and folder listings
above fixed sizes, symbolic-link loops and tags that leave the folder are refused with :class:`CheckpointReadError`.
"""

from __future__ import annotations

import collections
import errno
import io
import os
import pickle
import re
import struct
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

MAX_PICKLE_BYTES = 256 * 2**20
"""The largest pickle read (``data.pkl`` of a file, ``.metadata`` of a distributed checkpoint)."""
MAX_ZIP_INDEX_BYTES = 64 * 2**20
"""The largest zip central directory read."""
MAX_FOLDER_ENTRIES = 100_000
"""The most entries listed in a checkpoint folder."""
MAX_SMALL_FILE_BYTES = 4096
"""DeepSpeed's ``latest`` file names a tag: a few bytes."""
_DEPTH = 64

Format = Literal["file", "distributed", "deepspeed"]
KeyStyle = Literal["ids", "names", "none"]


class CheckpointReadError(ValueError):
    """The checkpoint's facts cannot be read safely: what was refused, and why."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointFacts:
    """What a checkpoint is, as read from its files without loading it."""

    path: str
    format: Format
    writer: str
    """Who wrote it, as far as the files tell: ``trainer`` (Lightning's Trainer), ``fabric``/``torch`` (a state of
    the user's own keys), ``deepspeed``."""
    world_size: int | None = None
    """Processes that wrote it (``None`` for a single file, which any number of processes can load)."""
    model_key: str | None = None
    """The top-level key holding the weights: ``state_dict`` (Trainer: DDP, ``ModelParallelStrategy``), ``model``
    (the Trainer's ``FSDPStrategy`` sharded layout) or the user's own."""
    top_level: tuple[str, ...] = ()
    """Top-level keys (for a distributed checkpoint: of the shards and of Lightning's ``meta.pt``)."""
    weight_dtypes: tuple[str, ...] = ()
    """Dtypes of the weights, e.g. ``("float32",)``."""
    optimizers: int = 0
    """Optimizer states present (0: weights only)."""
    optimizer_entries: tuple[str, ...] = ()
    """The top-level keys holding them: ``optimizer_states`` (the Trainer's file, a list), ``optimizer_0``... (the
    Trainer's sharded folders), the user's own (Fabric)."""
    optimizer_keys: KeyStyle = "none"
    """How the optimizer state is keyed: ``ids`` (a plain optimizer's ``state_dict()``), ``names`` (FSDP's and
    ``torch.distributed.checkpoint``'s fully qualified parameter names)."""
    data_parallel_size: int | None = None
    """DeepSpeed: ``dp_world_size`` recorded in the model states."""
    model_parallel_size: int | None = None
    """DeepSpeed: ``mp_world_size``."""
    zero_stage: int | None = None
    """DeepSpeed: the ZeRO stage of the run that wrote it."""
    zero_shards: int = 0
    """DeepSpeed: ZeRO optimizer shard files (one per data-parallel rank and model-parallel rank)."""
    tag: str | None = None
    """DeepSpeed: the tag folder the ``latest`` file names; ``None`` when the path is the tag folder itself."""
    universal: bool = False
    """DeepSpeed: a universal checkpoint (``ds_to_universal``) is present (``latest_universal``)."""

    def describe(self) -> str:
        """One phrase for messages: ``a sharded checkpoint (torch.distributed.checkpoint) of 2 processes (...)``."""
        details = [_WRITERS.get(self.writer, self.writer)]
        if self.format == "deepspeed":
            stage = f"ZeRO-{self.zero_stage}" if self.zero_stage is not None else "ZeRO"
            universal = ", a universal copy beside it" if self.universal else ""
            return (
                f"a DeepSpeed {stage} checkpoint of data-parallel size {self.data_parallel_size} "
                f"({details[0]}, {self.zero_shards} optimizer shard files{universal})"
            )
        if self.format == "distributed" and self.model_key is not None:
            details.append(f"weights under {self.model_key!r}")
        details.append(f"{'/'.join(self.weight_dtypes) or 'unknown-precision'} weights")
        keys = f"optimizer state keyed by parameter {self.optimizer_keys}"
        details.append(keys if self.optimizers else "no optimizer state")
        if self.format == "distributed":
            processes = f"{self.world_size} process{'es' if self.world_size != 1 else ''}"
            return f"a sharded checkpoint (torch.distributed.checkpoint) of {processes} ({'; '.join(details)})"
        return f"a single-file checkpoint ({'; '.join(details)})"


_WRITERS = {
    "trainer": "saved by Lightning's Trainer",
    "fabric": "saved by Fabric or torch.save",
    "torch": "saved by torch.distributed.checkpoint directly",
    "deepspeed": "saved by DeepSpeed",
}


def is_local(path: object) -> bool:
    """Whether ``path`` names the local file system (URLs such as ``s3://`` are not read)."""
    return isinstance(path, (str, os.PathLike)) and "://" not in os.fspath(path)


def read_checkpoint(path: str | os.PathLike[str]) -> CheckpointFacts:
    """The facts of the checkpoint at ``path``; :class:`CheckpointReadError` when they cannot be read safely and
    :class:`FileNotFoundError` when there is nothing at ``path``."""
    where = Path(path)
    kind = _stat(where)
    if kind == "file":
        return _file_facts(where)
    entries = _list(where)
    if ".metadata" in entries:
        return _distributed_facts(where, entries)
    return _deepspeed_facts(where, entries)


# --------------------------------------------------------------------------- the file system, bounded


def _unreadable(where: str, error: OSError, verb: str = "read") -> CheckpointReadError:
    reason = "is a symbolic link loop" if error.errno == errno.ELOOP else f"cannot be {verb}: {error.strerror or error}"
    return CheckpointReadError(f"{where} {reason}")


def _stat(path: Path) -> Literal["file", "folder"]:
    try:
        size = path.stat().st_size  # follows links: a loop raises ELOOP
    except FileNotFoundError:
        raise
    except OSError as error:
        raise _unreadable(repr(os.fspath(path)), error) from None
    if path.is_dir():
        return "folder"
    if not path.is_file() or size == 0:
        raise CheckpointReadError(f"{os.fspath(path)!r} is neither a checkpoint file nor a folder")
    return "file"


def _list(folder: Path) -> frozenset[str]:
    names = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) > MAX_FOLDER_ENTRIES:
                    raise CheckpointReadError(
                        f"{os.fspath(folder)!r} holds more than {MAX_FOLDER_ENTRIES:,} entries: not read"
                    )
    except OSError as error:
        raise _unreadable(repr(os.fspath(folder)), error, "listed") from None
    return frozenset(names)


def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise _unreadable(repr(os.fspath(path)), error) from None
    if len(data) > limit:
        raise CheckpointReadError(f"{os.fspath(path)!r}: its {what} is larger than {limit:,} bytes: not read")
    return data


# --------------------------------------------------------------------------- an unpickler that runs nothing


@dataclass(frozen=True, slots=True)
class _Storage:
    """A tensor's storage as the pickle names it; its bytes are never read."""

    dtype: str


class _Object:
    """An instance of a class the pickle names, never imported: the class's name, its arguments and its state."""

    __slots__ = ("args", "items", "state")
    qualname: ClassVar[str] = "?"
    args: tuple[Any, ...]
    items: dict[Any, Any]
    state: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> _Object:
        instance = object.__new__(cls)
        instance.args = args
        instance.state = None
        instance.items = {}
        return instance

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items[key] = value

    def append(self, value: Any) -> None:
        self.items[len(self.items)] = value

    def extend(self, values: Any) -> None:
        for value in values:
            self.append(value)

    def field(self, name: str) -> Any:
        """A dataclass field from the pickled state (``None`` when absent)."""
        state = self.state[-1] if isinstance(self.state, tuple) and self.state else self.state
        return state.get(name) if isinstance(state, dict) else None


_STORAGE_DTYPES = {
    "DoubleStorage": "float64", "FloatStorage": "float32", "HalfStorage": "float16", "BFloat16Storage": "bfloat16",
    "LongStorage": "int64", "IntStorage": "int32", "ShortStorage": "int16", "CharStorage": "int8",
    "ByteStorage": "uint8", "BoolStorage": "bool", "ComplexDoubleStorage": "complex128",
    "ComplexFloatStorage": "complex64",
}  # fmt: skip
_DTYPE_NAMES = frozenset(_STORAGE_DTYPES.values())


class _Unpickler(pickle.Unpickler):
    def __init__(self, data: bytes) -> None:
        super().__init__(io.BytesIO(data))
        self._classes: dict[str, type[_Object]] = {}

    def find_class(self, module: str, name: str) -> Any:
        qualname = f"{module}.{name}"
        if qualname == "collections.OrderedDict":  # a plain mapping; constructing one runs no code of the pickle's
            return collections.OrderedDict
        found = self._classes.get(qualname)
        if found is None:
            found = self._classes[qualname] = type("Placeholder", (_Object,), {"__slots__": (), "qualname": qualname})
        return found

    def persistent_load(self, pid: Any) -> Any:
        kind = pid[1] if isinstance(pid, tuple) and len(pid) > 1 else None
        name = getattr(kind, "qualname", "").rpartition(".")[2]
        return _Storage(_STORAGE_DTYPES.get(name, name.removesuffix("Storage").lower() or "unknown"))


def _loads(data: bytes, where: str) -> Any:
    try:
        return _Unpickler(data).load()
    except Exception as error:  # a damaged or foreign pickle: reported, never raised raw
        raise CheckpointReadError(f"{where}: not a readable pickle ({type(error).__name__}: {error})") from None


def _dtype(value: Any, depth: int = 0) -> str | None:
    """The dtype of a pickled tensor (``None``: not a tensor)."""
    if isinstance(value, _Storage):
        return value.dtype
    if not isinstance(value, _Object) or depth > 3 or not value.qualname.startswith("torch."):
        return None
    for argument in value.args:
        if isinstance(argument, _Storage):
            return argument.dtype
        if type(argument) is type and issubclass(argument, _Object) and argument.qualname[6:] in _DTYPE_NAMES:
            return argument.qualname[6:]
        found = _dtype(argument, depth + 1)
        if found is not None:
            return found
    return None


def _mapping(value: Any) -> Mapping[Any, Any] | None:
    if isinstance(value, Mapping):
        return value
    if isinstance(value, _Object) and value.items and value.qualname.startswith("collections."):
        return value.items
    return None


def _dtypes(value: Any) -> tuple[str, ...]:
    """Dtypes of the tensors in a (nested) state dict, most frequent first."""
    counts: collections.Counter[str] = collections.Counter()
    seen: set[int] = set()

    def walk(item: Any, depth: int) -> None:
        if depth > _DEPTH or id(item) in seen:
            return
        seen.add(id(item))
        dtype = _dtype(item)
        if dtype is not None:
            counts[dtype] += 1
            return
        mapping = _mapping(item)
        children = mapping.values() if mapping is not None else item if isinstance(item, (list, tuple)) else ()
        for child in children:
            walk(child, depth + 1)

    walk(value, 0)
    return tuple(dtype for dtype, _ in counts.most_common())


def _is_optimizer_state(value: Any) -> bool:
    mapping = _mapping(value)
    return mapping is not None and "state" in mapping and "param_groups" in mapping


def _key_style(state: Any) -> KeyStyle:
    mapping = _mapping(state)
    if mapping is None:
        return "none"
    keys = list(_mapping(mapping["state"]) or ())
    if not keys:  # no step taken yet: the parameter groups still name the parameters
        groups = mapping["param_groups"] if isinstance(mapping["param_groups"], list) else []
        keys = [param for group in groups for param in (_mapping(group) or {}).get("params", [])]
    if not keys:
        return "none"
    return "ids" if all(type(key) is int for key in keys) else "names"


# --------------------------------------------------------------------------- one torch.save file


def _zip_index_size(handle: Any, where: str) -> tuple[int, int]:
    """(entries, bytes) of a zip's central directory, read from its end records before anything else."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    tail_length = min(size, 22 + 65_535 + 20)
    handle.seek(size - tail_length)
    tail = handle.read(tail_length)
    end = tail.rfind(b"PK\x05\x06")
    if end < 0 or end + 22 > len(tail):
        raise CheckpointReadError(f"{where}: not a torch.save zip file (no zip directory at its end)")
    entries, index_bytes = struct.unpack_from("<HI", tail, end + 10)
    if (entries == 0xFFFF or index_bytes == 0xFFFFFFFF) and end >= 20 and tail[end - 20 : end - 16] == b"PK\x06\x07":
        (record_offset,) = struct.unpack_from("<Q", tail, end - 20 + 8)
        handle.seek(record_offset)
        record = handle.read(56)
        if len(record) < 56 or record[:4] != b"PK\x06\x06":
            raise CheckpointReadError(f"{where}: its zip64 directory record is damaged")
        entries, index_bytes = struct.unpack_from("<QQ", record, 32)
    return entries, index_bytes


def _zip_pickle(path: Path, where: str | None = None) -> Any:
    """The unpickled ``data.pkl`` of a ``torch.save`` zip (tensors as placeholders)."""
    where = where or repr(os.fspath(path))
    try:
        with open(path, "rb") as handle:
            entries, index_bytes = _zip_index_size(handle, where)
            if index_bytes > MAX_ZIP_INDEX_BYTES or entries > MAX_FOLDER_ENTRIES:
                raise CheckpointReadError(
                    f"{where}: its zip index holds {entries:,} entries in {index_bytes:,} bytes, above the "
                    f"{MAX_FOLDER_ENTRIES:,} entries / {MAX_ZIP_INDEX_BYTES:,} bytes read: not read"
                )
            handle.seek(0)
            with zipfile.ZipFile(handle) as archive:
                names = [name for name in archive.namelist() if name.endswith("/data.pkl") and name.count("/") == 1]
                if len(names) != 1:
                    raise CheckpointReadError(f"{where}: a zip file, but not one torch.save wrote (no data.pkl)")
                info = archive.getinfo(names[0])
                if info.file_size > MAX_PICKLE_BYTES:
                    raise CheckpointReadError(
                        f"{where}: its pickle is {info.file_size:,} bytes, above the {MAX_PICKLE_BYTES:,} read: "
                        "not read"
                    )
                with archive.open(info) as member:
                    data = member.read(MAX_PICKLE_BYTES + 1)
    except zipfile.BadZipFile as error:
        raise CheckpointReadError(f"{where} cannot be read as a torch.save zip: {error}") from None
    except OSError as error:
        raise _unreadable(where, error) from None
    if len(data) > MAX_PICKLE_BYTES:
        raise CheckpointReadError(f"{where}: its pickle is larger than {MAX_PICKLE_BYTES:,} bytes: not read")
    return _loads(data, where)


_TRAINER_KEYS = ("pytorch-lightning_version", "loops")


def _file_facts(path: Path) -> CheckpointFacts:
    top = _mapping(_zip_pickle(path)) or {}
    keys = tuple(str(key) for key in top)
    trainer = any(key in top for key in _TRAINER_KEYS)
    if trainer:
        states = top.get("optimizer_states")
        optimizer_states = list(states) if isinstance(states, list) else []
        entries: tuple[str, ...] = ("optimizer_states",) if optimizer_states else ()
        model_key: str | None = "state_dict" if "state_dict" in top else None
    else:
        entries = tuple(str(key) for key, value in top.items() if _is_optimizer_state(value))
        optimizer_states = [top[key] for key in entries]
        modules = [key for key, value in top.items() if _mapping(value) is not None and not _is_optimizer_state(value)]
        model_key = "state_dict" if "state_dict" in top else modules[0] if len(modules) == 1 else None
    weights = top.get(model_key) if model_key is not None else top
    styles = {_key_style(state) for state in optimizer_states} - {"none"}
    return CheckpointFacts(
        path=os.fspath(path),
        format="file",
        writer="trainer" if trainer else "fabric",
        model_key=model_key,
        top_level=keys,
        weight_dtypes=_dtypes(weights),
        optimizers=len(optimizer_states),
        optimizer_entries=entries,
        optimizer_keys=styles.pop() if len(styles) == 1 else "names" if styles else "none",
    )


# --------------------------------------------------------------------------- a torch.distributed.checkpoint folder

_SHARD_FILE = re.compile(r"__(\d+)_\d+\.distcp")
_DCP_METADATA = "torch.distributed.checkpoint.metadata.Metadata"


def _distributed_facts(folder: Path, entries: frozenset[str]) -> CheckpointFacts:
    where = repr(os.fspath(folder / ".metadata"))
    metadata = _loads(_read_bounded(folder / ".metadata", MAX_PICKLE_BYTES, "metadata"), where)
    if not isinstance(metadata, _Object) or metadata.qualname != _DCP_METADATA:
        raise CheckpointReadError(f"{where}: not the metadata torch.distributed.checkpoint writes")
    tensors = _mapping(metadata.field("state_dict_metadata")) or {}
    paths = _mapping(metadata.field("planner_data")) or {}
    storage = _mapping(metadata.field("storage_data")) or {}
    files = {info.field("relative_path") for info in storage.values() if isinstance(info, _Object)}
    ranks = {int(m.group(1)) for name in (files or entries) if (m := _SHARD_FILE.fullmatch(str(name)))}
    keyed = {str(fqn): _path_of(str(fqn), paths.get(fqn)) for fqn in tensors}
    optimizers = sorted({path[0] for path in keyed.values() if len(path) > 1 and path[1] == "param_groups"})
    top = {path[0] for path in keyed.values()}
    modules = sorted(top - set(optimizers))
    meta = _mapping(_zip_pickle(folder / "meta.pt")) if "meta.pt" in entries else None
    trainer = meta is not None and any(key in meta for key in _TRAINER_KEYS)
    model_key = modules[0] if len(modules) == 1 else None
    weight_dtypes = collections.Counter(
        dtype for fqn, path in keyed.items() if path[0] == model_key and (dtype := _tensor_dtype(tensors[fqn]))
    )
    styles: set[KeyStyle] = {
        "ids" if _is_id(path[2]) else "names"
        for path in keyed.values()
        if path[0] in optimizers and len(path) > 2 and path[1] == "state"
    }
    return CheckpointFacts(
        path=os.fspath(folder),
        format="distributed",
        writer="trainer" if trainer else "fabric" if meta is not None else "torch",
        world_size=max(ranks) + 1 if ranks else None,
        model_key=model_key,
        top_level=tuple(sorted(top | {str(key) for key in meta or ()})),
        weight_dtypes=tuple(dtype for dtype, _ in weight_dtypes.most_common()),
        optimizers=len(optimizers),
        optimizer_entries=tuple(str(key) for key in optimizers),
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
    properties = entry.field("properties") if isinstance(entry, _Object) else None
    if not isinstance(properties, _Object):
        return None
    state = properties.state
    dtype = state[0] if isinstance(state, tuple) and state else properties.field("dtype")
    return dtype.qualname[6:] if type(dtype) is type and issubclass(dtype, _Object) else None


# --------------------------------------------------------------------------- a DeepSpeed folder

_MODEL_STATES = re.compile(r"(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt")
_OPTIM_STATES = re.compile(r"(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_?optim_states\.pt")


def _tag(folder: Path, name: str) -> str:
    raw = _read_bounded(folder / name, MAX_SMALL_FILE_BYTES, "content")
    tag = raw.decode("utf-8", errors="replace").strip()
    if not tag or tag in (".", "..") or "/" in tag or os.sep in tag or "\x00" in tag:
        raise CheckpointReadError(f"{os.fspath(folder / name)!r} names the tag {tag!r}, which is not a sub-folder")
    return tag


def _deepspeed_facts(folder: Path, entries: frozenset[str]) -> CheckpointFacts:
    tag = _tag(folder, "latest") if "latest" in entries else None
    universal = "latest_universal" in entries and (folder / _tag(folder, "latest_universal")).is_dir()
    tag_folder = folder / tag if tag is not None else folder
    files = _list(tag_folder) if tag is not None else entries
    model_files = sorted(name for name in files if _MODEL_STATES.fullmatch(name))
    shards = [match for name in files if (match := _OPTIM_STATES.fullmatch(name))]
    if not model_files:
        raise CheckpointReadError(
            f"{os.fspath(folder)!r} is a folder but no checkpoint: no '.metadata' (torch.distributed.checkpoint), no "
            "'latest' file or '*_model_states.pt' (DeepSpeed)"
        )
    states = _mapping(_zip_pickle(tag_folder / model_files[0])) or {}
    config = _mapping(states.get("ds_config")) or {}
    zero = _mapping(config.get("zero_optimization")) or {}
    stage = _int(zero.get("stage"))
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
        top_level=tuple(str(key) for key in states),
        weight_dtypes=_dtypes(states.get("module")),
        optimizers=1 if shards else 0,
        optimizer_keys="ids" if shards else "none",
        data_parallel_size=dp_size if type(dp_size) is int else len({m.group(1) for m in shards}) or None,
        model_parallel_size=mp_size if type(mp_size) is int else None,
        zero_stage=stage,
        zero_shards=len(shards),
        tag=tag,
        universal=universal,
    )


def _shard_stage(path: Path) -> int | None:
    state = _mapping(_mapping(_zip_pickle(path)) or {})
    optimizer = _mapping((state or {}).get("optimizer_state_dict")) or {}
    return _int(optimizer.get("zero_stage"))


def _int(value: Any) -> int | None:
    """An int, or an enum member pickled as its class and value (DeepSpeed's ``ZeroStageEnum``)."""
    if isinstance(value, _Object) and len(value.args) == 1:
        value = value.args[0]
    return value if type(value) is int else None
