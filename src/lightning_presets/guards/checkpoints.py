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
calls nothing (every class the pickle names becomes an inert placeholder) and keys dictionaries so that no pickle can
make them quadratic. Every file is opened without blocking and read only if it is a regular file (a FIFO would block
forever); the zip is read as ``torch.load`` reads it (its central directory and local headers; neither CRCs, names
in local headers nor "version needed" checked), and so is the legacy (not zip) format. The work is bounded, not only
the bytes: pickles, zip indexes and folder listings above fixed sizes, compression above a fixed ratio, pickles that
run more than a fixed number of opcodes, create more than a fixed number of objects or take more than a fixed CPU
time, symbolic-link loops and tags that leave the folder are refused with :class:`CheckpointReadError`. Whatever the
reader cannot classify is left unknown: :func:`read_checkpoint` raises nothing but :class:`CheckpointReadError` and
:class:`FileNotFoundError`, whatever the files hold (its own failure included: ``CheckpointReadError.internal``).
Texts read from a checkpoint (keys, class names) reach facts and messages through :func:`clean` (no escape
sequences).
"""

from __future__ import annotations

import collections
import errno
import io
import os
import pickle
import re
import stat
import struct
import sys
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, ClassVar, Literal

from lightning_presets.core.rules import error_text

MAX_PICKLE_BYTES = 256 * 2**20
"""The largest pickle read (``data.pkl`` of a file, ``.metadata`` of a distributed checkpoint; a real Lightning
checkpoint's is well under 16 MB, a distributed checkpoint's metadata grows with the shards)."""
MAX_PICKLE_OPCODES = 4_000_000
"""The most opcodes one pickle may run (the work of reading it, under a microsecond each: a Lightning checkpoint runs
about 125 per parameter tensor with Adam's state, 500,000 for 4,000 tensors)."""
MAX_PICKLE_OBJECTS = 2_000_000
"""The most objects one pickle may create while it is read, counted as the memory blocks the process allocates
meanwhile (``sys.getallocatedblocks``; a Lightning checkpoint creates about 40 per parameter tensor with Adam's
state)."""
MAX_PICKLE_SECONDS = 5.0
"""The most CPU time one pickle may cost to read, whatever else bounds it."""
MAX_PICKLE_CLASSES = 10_000
"""The most distinct classes one pickle may name (real ones name a few dozen)."""
MAX_COMPRESSION_RATIO = 50
"""The most a compressed ``data.pkl`` may expand (``torch.save`` stores it uncompressed)."""
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
    """The checkpoint's facts cannot be read safely: what was refused, and why. ``internal``: the reader itself
    failed on it (a bug here, not in the checkpoint)."""

    def __init__(self, message: str, *, internal: bool = False) -> None:
        super().__init__(message)
        self.internal = internal


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
    unknown_entries: tuple[str, ...] = ()
    """Top-level mappings that are neither weights nor a state shaped like an optimizer's (a custom optimizer's,
    a scheduler's, the user's own): what they hold is unknown."""

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
        keys = "optimizer state" + (
            f" keyed by parameter {self.optimizer_keys}" if self.optimizer_keys != "none" else ""
        )
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


FILE_URL = "file://"


def local_path(path: object) -> str | None:
    """The local path ``path`` names: itself, or the path of a ``file://`` URL (which Lightning, through fsspec,
    loads from the local file system as well); ``None`` for other URLs (``s3://``: not read) and non-paths."""
    if not isinstance(path, (str, os.PathLike)):
        return None
    text = os.fspath(path)
    if not isinstance(text, str):
        return None
    if text.startswith(FILE_URL):
        return text[len(FILE_URL) :] or None
    return None if "://" in text else text


def read_checkpoint(path: str | os.PathLike[str]) -> CheckpointFacts:
    """The facts of the checkpoint at ``path``; :class:`CheckpointReadError` when they cannot be read safely (or the
    reader fails on them, whatever the error) and :class:`FileNotFoundError` when there is nothing at ``path``."""
    where = Path(path)
    try:
        kind = _stat(where)
        if kind == "file":
            return _file_facts(where)
        entries = _list(where)
        if ".metadata" in entries:
            return _distributed_facts(where, entries)
        return _deepspeed_facts(where, entries)
    except (CheckpointReadError, FileNotFoundError, KeyboardInterrupt):
        raise
    except BaseException as error:  # the reader's own failure, on anything the files hold: never raised raw
        raise CheckpointReadError(
            f"{clean(repr(os.fspath(where)))}: the checkpoint reader of lightning-presets failed on it "
            f"({clean(error_text(error))}); a bug of lightning-presets, not of the checkpoint",
            internal=True,
        ) from None


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


def _open(path: Path, where: str | None = None) -> IO[bytes]:
    """``path`` opened for reading without blocking (a FIFO or a device would never answer), if a regular file."""
    where = where or repr(os.fspath(path))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        raise _unreadable(where, error) from None
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise CheckpointReadError(f"{where} is {kind}: not read")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def _read_bounded(path: Path, limit: int, what: str) -> bytes:
    try:
        with _open(path) as handle:
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


_CHUNK = 16 * 2**10
"""How much compressed data is inflated at a time."""
_CHECK_EVERY = 2**14
"""How many opcodes run between two checks of the objects a pickle has created."""
_STOP: type[BaseException] = getattr(pickle, "_Stop")  # noqa: B009 (private: typeshed does not declare them)
_UNFRAMER: Any = getattr(pickle, "_Unframer")  # noqa: B009


class _Bounded:
    """A pickle's bytes from ``source``, at most ``limit`` of them."""

    def __init__(self, source: IO[bytes], where: str, limit: int) -> None:
        self._source = source
        self._where = where
        self._limit = limit
        self._used = 0

    def _spend(self, size: int) -> None:
        self._used += size
        if self._used > self._limit:
            raise CheckpointReadError(f"{self._where}: its pickle is larger than {self._limit:,} bytes: not read")

    def read(self, size: int = -1) -> bytes:
        size = self._limit - self._used + 1 if size < 0 else size
        self._spend(size)  # before reading: a pickle's length field may claim anything
        return self._source.read(size)

    def readline(self) -> bytes:
        data = self._source.readline(min(self._limit - self._used + 1, MAX_TEXT_LINE))
        self._spend(len(data))
        return data


MAX_TEXT_LINE = 2**16
"""The longest line of a text opcode (protocol 0) read."""


class _Key:
    """A dictionary key or set member other than a text, bytes or a plain int: hashed by identity, so that no
    pickle can make its keys collide (equal hashes would make building the dictionary quadratic)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_PLAIN_KEYS = (str, bytes, bool, type(None))


def _safe(key: Any) -> Any:
    if type(key) in _PLAIN_KEYS or (type(key) is int and -(2**60) < key < 2**60):
        return key  # ints of different values below 2**61 - 1 never share a hash; texts' hashes are keyed
    return _Key(key)


def _pairs(items: list[Any]) -> Any:
    return ((_safe(items[index]), items[index + 1]) for index in range(0, len(items) - 1, 2))


class _Unpickler(pickle._Unpickler):
    """Python's own unpickler (not the C one: this one can be bounded opcode by opcode) that imports nothing, calls
    nothing of the pickle's, counts its opcodes and the objects it creates, and keys dictionaries and sets so that
    no pickle can make them quadratic."""

    dispatch: ClassVar[dict[int, Any]] = dict(pickle._Unpickler.dispatch)

    def __init__(self, source: _Bounded | io.BytesIO, *, framed: bool = True) -> None:
        super().__init__(source, encoding="utf-8", errors="replace")
        self._classes: dict[str, type[_Object]] = {}
        self._framed = framed
        self.stack: list[Any] = []

    def load(self) -> Any:
        unframer = _UNFRAMER(self._file_read, self._file_readline)  # type: ignore[attr-defined]
        self._unframer = unframer
        self.readinto = unframer.readinto
        if self._framed:
            self.read = read = unframer.read
            self.readline = unframer.readline
        else:  # protocols 0-3 have no frames: the bytes' own read, opcode by opcode (4 times faster)
            self.read = read = self._file_read  # type: ignore[attr-defined]
            self.readline = self._file_readline  # type: ignore[attr-defined]
        self.metastack: list[Any] = []
        self.stack = []
        self.append = self.stack.append
        self.proto = 0
        dispatch = self.dispatch
        blocks = sys.getallocatedblocks()
        start = time.thread_time()
        count = 0
        try:
            while True:
                key = read(1)
                if not key:
                    raise EOFError("the pickle ends before its STOP")
                dispatch[key[0]](self)
                count += 1
                if count % _CHECK_EVERY == 0:
                    self._within(count, sys.getallocatedblocks() - blocks, time.thread_time() - start)
        except _STOP as stop:
            return getattr(stop, "value", None)

    def _within(self, opcodes: int, objects: int, seconds: float) -> None:
        if opcodes > MAX_PICKLE_OPCODES:
            raise CheckpointReadError(f"its pickle runs more than {MAX_PICKLE_OPCODES:,} opcodes: not read")
        if objects > MAX_PICKLE_OBJECTS:
            raise CheckpointReadError(f"its pickle creates more than {MAX_PICKLE_OBJECTS:,} objects: not read")
        if seconds > MAX_PICKLE_SECONDS:
            raise CheckpointReadError(f"its pickle takes more than {MAX_PICKLE_SECONDS:g} s of CPU time: not read")

    # dictionaries, sets and the memo, keyed safely
    def _setitems(self) -> None:
        items = self.pop_mark()  # type: ignore[attr-defined]
        target = self.stack[-1]
        for key, value in _pairs(items):
            target[key] = value

    def _setitem(self) -> None:
        value = self.stack.pop()
        key = self.stack.pop()
        self.stack[-1][_safe(key)] = value

    def _dict(self) -> None:
        self.append(dict(_pairs(self.pop_mark())))  # type: ignore[attr-defined]

    def _additems(self) -> None:
        items = [_safe(item) for item in self.pop_mark()]  # type: ignore[attr-defined]
        target = self.stack[-1]
        add = getattr(target, "add", None)
        if add is None:
            raise TypeError("ADDITEMS on something that is not a set")
        for item in items:
            add(item)

    def _frozenset(self) -> None:
        self.append(frozenset(_safe(item) for item in self.pop_mark()))  # type: ignore[attr-defined]

    def _put(self) -> None:
        index = int(self.readline()[:-1])
        if not 0 <= index < 2**32:
            raise ValueError(f"PUT argument {index} out of range")
        self.memo[index] = self.stack[-1]  # type: ignore[attr-defined]

    def _extension(self) -> None:
        raise ValueError("the pickle names an extension code (copyreg): not read")

    for _code, _method in (
        (pickle.SETITEMS, _setitems), (pickle.SETITEM, _setitem), (pickle.DICT, _dict),
        (pickle.ADDITEMS, _additems), (pickle.FROZENSET, _frozenset), (pickle.PUT, _put),
        (pickle.EXT1, _extension), (pickle.EXT2, _extension), (pickle.EXT4, _extension),
    ):  # fmt: skip
        dispatch[_code[0]] = _method
    del _code, _method

    def find_class(self, module: str, name: str) -> Any:
        qualname = f"{module}.{name}"
        if qualname == "collections.OrderedDict":  # a plain mapping, filled by SETITEMS (its arguments are ignored)
            return _ordered_dict
        found = self._classes.get(qualname)
        if found is None:
            if len(self._classes) >= MAX_PICKLE_CLASSES:
                raise CheckpointReadError(f"its pickle names more than {MAX_PICKLE_CLASSES:,} classes: not read")
            found = self._classes[qualname] = type(
                "Placeholder", (_Object,), {"__slots__": (), "qualname": clean(qualname)}
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        kind = pid[1] if isinstance(pid, tuple) and len(pid) > 1 else None
        name = str(getattr(kind, "qualname", "")).rpartition(".")[2]
        return _Storage(_STORAGE_DTYPES.get(name, name.removesuffix("Storage").lower() or "unknown"))


def _ordered_dict(*args: Any, **kwargs: Any) -> collections.OrderedDict[Any, Any]:
    return collections.OrderedDict()


def _loads(source: IO[bytes] | bytes, where: str) -> Any:
    """One pickle: all of ``source`` (bytes, already bounded in size), or from a file at its position (at most
    :data:`MAX_PICKLE_BYTES` of it), within the budget."""
    try:
        if isinstance(source, bytes):
            framed = source[:1] == pickle.PROTO and source[1:2] >= b"\x04"
            return _Unpickler(io.BytesIO(source), framed=framed).load()
        return _Unpickler(_Bounded(source, where, MAX_PICKLE_BYTES)).load()
    except CheckpointReadError as error:
        message = str(error)
        raise CheckpointReadError(message if message.startswith(where) else f"{where}: {message}") from None
    except OSError as error:
        raise _unreadable(where, error) from None
    except Exception as error:  # a damaged or foreign pickle (of any error type): reported, never raised raw
        raise CheckpointReadError(f"{where}: not a readable pickle ({clean(error_text(error))})") from None


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_TEXT = 200
"""The most characters of a text read from a checkpoint (a key, a class's name) that a message repeats."""


def clean(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` read from a checkpoint, safe for a terminal: control characters (escape sequences) written as
    ``\\xNN``, at most ``limit`` characters."""
    text = _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)
    return text if len(text) <= limit else text[:limit] + "..."


def label(key: Any) -> str:
    """A key read from a checkpoint as text for facts and messages (a huge int is not printed)."""
    key = key.value if isinstance(key, _Key) else key
    if isinstance(key, str):
        return clean(key)
    if (type(key) is int and key.bit_length() <= 64) or type(key) in (bool, float) or key is None:
        return str(key)
    return f"<a {key.qualname if isinstance(key, _Object) else clean(type(key).__name__)} key>"


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
    """A mapping shaped like an optimizer's ``state_dict()``: ``param_groups`` (torch.optim's, and the wrappers that
    keep them, such as Lookahead's ``fast_state``/``slow_state``/``param_groups``), or a ``state`` of mappings."""
    mapping = _mapping(value)
    if mapping is None:
        return False
    return "param_groups" in mapping or ("state" in mapping and _mapping(mapping["state"]) is not None)


def _has_tensors(value: Any) -> bool:
    mapping = _mapping(value)
    return mapping is not None and any(_dtype(item) is not None for item in mapping.values())


def _key_style(state: Any) -> KeyStyle:
    """How an optimizer's state is keyed; ``none`` when there is none or its shape is not torch.optim's."""
    mapping = _mapping(state)
    if mapping is None:
        return "none"
    keys = list(_mapping(mapping.get("state")) or ())
    if not keys:  # no step taken yet: the parameter groups still name the parameters
        groups = mapping.get("param_groups")
        keys = [
            param
            for group in (groups if isinstance(groups, list) else [])
            for param in _listed((_mapping(group) or {}).get("params"))
        ]
    if not keys:
        return "none"
    return "ids" if all(type(key) is int for key in keys) else "names"


def _listed(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else []


# --------------------------------------------------------------------------- one torch.save file


_END = b"PK\x05\x06"
_END64_LOCATOR = b"PK\x06\x07"
_END64 = b"PK\x06\x06"
_CENTRAL = b"PK\x01\x02"
_LOCAL = b"PK\x03\x04"
_CENTRAL_ENTRY = struct.Struct("<4s4H4x3I5H4xI")  # signature .. method, crc (skipped), sizes, lengths, offset
_LOCAL_HEADER = struct.Struct("<4s22xHH")
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19."
"""The first pickle of the legacy (not zip) ``torch.save`` format: its magic number, 0x1950a86a20f9469cfc6c."""


@dataclass(frozen=True, slots=True)
class _Member:
    name: str
    method: int
    flags: int
    compressed: int
    size: int
    offset: int


def _zip_directory(handle: IO[bytes], where: str) -> list[_Member] | None:
    """The members of a zip, read from its end records and central directory as ``torch.load`` (miniz) reads them;
    ``None`` when the file has no zip directory at its end."""
    handle.seek(0, os.SEEK_END)
    size = handle.tell()
    tail_length = min(size, 22 + 65_535 + 20)
    handle.seek(size - tail_length)
    tail = handle.read(tail_length)
    end = tail.rfind(_END)
    if end < 0 or end + 22 > len(tail):
        return None
    entries, index_bytes, index_offset = struct.unpack_from("<HII", tail, end + 10)
    zip64 = entries == 0xFFFF or 0xFFFFFFFF in (index_bytes, index_offset)
    if zip64 and end >= 20 and tail[end - 20 : end - 16] == _END64_LOCATOR:
        (record_offset,) = struct.unpack_from("<Q", tail, end - 20 + 8)
        handle.seek(min(record_offset, size))
        record = handle.read(56)
        if len(record) < 56 or record[:4] != _END64:
            raise CheckpointReadError(f"{where}: its zip64 directory record is damaged")
        entries, index_bytes, index_offset = struct.unpack_from("<QQQ", record, 32)
    if index_bytes > MAX_ZIP_INDEX_BYTES or entries > MAX_FOLDER_ENTRIES:
        raise CheckpointReadError(
            f"{where}: its zip index holds {entries:,} entries in {index_bytes:,} bytes, above the "
            f"{MAX_FOLDER_ENTRIES:,} entries / {MAX_ZIP_INDEX_BYTES:,} bytes read: not read"
        )
    if index_offset + index_bytes > size:
        raise CheckpointReadError(f"{where}: its zip directory lies beyond the end of the file (truncated?)")
    handle.seek(index_offset)
    index = handle.read(index_bytes)
    members = []
    at = 0
    for _ in range(entries):
        if at + _CENTRAL_ENTRY.size > len(index) or index[at : at + 4] != _CENTRAL:
            raise CheckpointReadError(f"{where}: its zip directory is damaged")
        _, _, _, flags, method, _, compressed, length, name_length, extra_length, comment_length, _, _, offset = (
            _CENTRAL_ENTRY.unpack_from(index, at)
        )
        at += _CENTRAL_ENTRY.size
        raw_name = index[at : at + name_length]
        extra = index[at + name_length : at + name_length + extra_length]
        at += name_length + extra_length + comment_length
        length, compressed, offset = _zip64_sizes(extra, length, compressed, offset)
        name = raw_name.decode("utf-8" if flags & 0x800 else "cp437", errors="replace")
        members.append(_Member(name, method, flags, compressed, length, offset))
    return members


def _zip64_sizes(extra: bytes, size: int, compressed: int, offset: int) -> tuple[int, int, int]:
    """The sizes and offset a zip64 extra field holds for those its entry marks 0xFFFFFFFF."""
    at = 0
    while at + 4 <= len(extra):
        kind, length = struct.unpack_from("<HH", extra, at)
        body = extra[at + 4 : at + 4 + length]
        at += 4 + length
        if kind != 1:
            continue
        values = [value for (value,) in struct.iter_unpack("<Q", body[: len(body) // 8 * 8])]
        if size == 0xFFFFFFFF and values:
            size = values.pop(0)
        if compressed == 0xFFFFFFFF and values:
            compressed = values.pop(0)
        if offset == 0xFFFFFFFF and values:
            offset = values.pop(0)
    return size, compressed, offset


def _data_pickle(members: list[_Member], where: str) -> _Member:
    """``<archive>/data.pkl``, the archive being the folder of the zip's first member (as ``torch.load`` finds it)."""
    prefix = members[0].name.partition("/")[0] if members and "/" in members[0].name else None
    found = [member for member in members if prefix is not None and member.name == f"{prefix}/data.pkl"]
    if not found:
        raise CheckpointReadError(f"{where}: a zip file, but not one torch.save wrote (no data.pkl)")
    return found[0]


def _member_bytes(handle: IO[bytes], member: _Member, where: str) -> bytes:
    """A member's bytes (stored or deflated, the methods ``torch.load`` reads), bounded in size and expansion."""
    if member.flags & 0x1:
        raise CheckpointReadError(f"{where}: its data.pkl is encrypted: not read")
    if member.size > MAX_PICKLE_BYTES:
        raise CheckpointReadError(
            f"{where}: its pickle is {member.size:,} bytes, above the {MAX_PICKLE_BYTES:,} read: not read"
        )
    handle.seek(member.offset)
    header = handle.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or header[:4] != _LOCAL:
        raise CheckpointReadError(f"{where}: the zip header of its data.pkl is damaged")
    _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    handle.seek(member.offset + _LOCAL_HEADER.size + name_length + extra_length)
    if member.method == 0:
        data = handle.read(min(member.size, MAX_PICKLE_BYTES + 1))
    elif member.method == 8:
        data = _inflate(handle, member, where)
    else:
        raise CheckpointReadError(
            f"{where}: its data.pkl is compressed with zip method {member.method}, which torch.load does not read"
        )
    if len(data) < member.size:
        raise CheckpointReadError(f"{where}: its data.pkl ends early (the file is truncated or damaged)")
    return data[: member.size]


def _inflate(handle: IO[bytes], member: _Member, where: str) -> bytes:
    inflater = zlib.decompressobj(-zlib.MAX_WBITS)
    out = bytearray()
    read = 0
    while len(out) < member.size and not inflater.eof:
        chunk = inflater.unconsumed_tail or handle.read(min(_CHUNK, max(member.compressed - read, 0)))
        if not chunk:
            break
        if not inflater.unconsumed_tail:
            read += len(chunk)
        try:
            out += inflater.decompress(chunk, _CHUNK)
        except zlib.error as error:
            raise CheckpointReadError(f"{where}: its data.pkl does not decompress ({error})") from None
        if len(out) > MAX_COMPRESSION_RATIO * max(read, 1) + _CHUNK:
            raise CheckpointReadError(
                f"{where}: its data.pkl expands more than {MAX_COMPRESSION_RATIO} times (torch.save stores it "
                "uncompressed): not read"
            )
    return bytes(out)


def _zip_pickle(path: Path, where: str | None = None) -> Any:
    """The unpickled ``data.pkl`` of a ``torch.save`` zip (tensors as placeholders), or the pickled object of the
    legacy format."""
    where = where or repr(os.fspath(path))
    try:
        with _open(path, where) as handle:
            members = _zip_directory(handle, where)
            if members is None:
                handle.seek(0)
                if handle.read(len(_LEGACY_MAGIC)) == _LEGACY_MAGIC:
                    return _legacy_pickle(handle, where)
                raise CheckpointReadError(f"{where}: not a torch.save zip file (no zip directory at its end)")
            data = _member_bytes(handle, _data_pickle(members, where), where)
    except OSError as error:
        raise _unreadable(where, error) from None
    except (struct.error, ValueError, OverflowError, EOFError, MemoryError) as error:
        if isinstance(error, CheckpointReadError):
            raise
        raise CheckpointReadError(f"{where} is damaged ({clean(error_text(error))})") from None
    return _loads(data, where)


def _legacy_pickle(handle: IO[bytes], where: str) -> Any:
    """The object of a legacy ``torch.save`` file: after its magic number, its protocol version and system
    information, each one pickle (the storages' bytes that follow are not read)."""
    for _ in range(2):
        _loads(handle, where)
    return _loads(handle, where)


_TRAINER_KEYS = ("pytorch-lightning_version", "loops")


def _file_facts(path: Path) -> CheckpointFacts:
    top = _mapping(_zip_pickle(path)) or {}
    keys = tuple(label(key) for key in top)
    trainer = any(key in top for key in _TRAINER_KEYS)
    unknown: tuple[str, ...] = ()
    if trainer:
        states = top.get("optimizer_states")
        optimizer_states = list(states) if isinstance(states, (list, tuple)) else []
        entries: tuple[str, ...] = ("optimizer_states",) if "optimizer_states" in top else ()
        model_key: str | None = "state_dict" if "state_dict" in top else None
    else:
        found = [key for key, value in top.items() if _is_optimizer_state(value)]
        entries = tuple(label(key) for key in found)
        optimizer_states = [top[key] for key in found]
        mappings = [key for key, value in top.items() if _mapping(value) is not None and key not in found]
        modules = [key for key in mappings if _has_tensors(top[key])] or mappings
        unknown = tuple(label(key) for key in mappings if key not in modules)
        model_key = "state_dict" if "state_dict" in top else label(modules[0]) if len(modules) == 1 else None
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
        unknown_entries=unknown,
    )


# --------------------------------------------------------------------------- a torch.distributed.checkpoint folder

_SHARD_FILE = re.compile(r"__(\d{1,9})_\d+\.distcp")
_DCP_METADATA = "torch.distributed.checkpoint.metadata.Metadata"


def _distributed_facts(folder: Path, entries: frozenset[str]) -> CheckpointFacts:
    where = repr(os.fspath(folder / ".metadata"))
    metadata = _loads(_read_bounded(folder / ".metadata", MAX_PICKLE_BYTES, "metadata"), where)
    if not isinstance(metadata, _Object) or metadata.qualname != _DCP_METADATA:
        raise CheckpointReadError(f"{where}: not the metadata torch.distributed.checkpoint writes")
    tensors = _mapping(metadata.field("state_dict_metadata")) or {}
    paths = _mapping(metadata.field("planner_data")) or {}
    storage = _mapping(metadata.field("storage_data")) or {}
    files = {
        name
        for info in storage.values()
        if isinstance(info, _Object) and isinstance(name := info.field("relative_path"), str)
    }
    ranks = {int(m.group(1)) for name in (files or entries) if (m := _SHARD_FILE.fullmatch(name))}
    keyed = [
        (entry, _path_of(label(fqn), paths.get(fqn) if isinstance(fqn, str) else None))
        for fqn, entry in tensors.items()
    ]
    optimizers = sorted({label(path[0]) for _, path in keyed if len(path) > 1 and path[1] == "param_groups"})
    top = {label(path[0]) for _, path in keyed}
    modules = sorted(top - set(optimizers))
    meta = _mapping(_zip_pickle(folder / "meta.pt")) if "meta.pt" in entries else None
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
    properties = entry.field("properties") if isinstance(entry, _Object) else None
    if not isinstance(properties, _Object):
        return None
    state = properties.state
    dtype = state[0] if isinstance(state, tuple) and state else properties.field("dtype")
    return dtype.qualname[6:] if isinstance(dtype, type) and issubclass(dtype, _Object) else None


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
    shards = [match for name in sorted(files) if (match := _OPTIM_STATES.fullmatch(name))]
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
        top_level=tuple(label(key) for key in states),
        weight_dtypes=_dtypes(states.get("module")),
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
    state = _mapping(_mapping(_zip_pickle(path)) or {})
    optimizer = _mapping((state or {}).get("optimizer_state_dict")) or {}
    return _int(optimizer.get("zero_stage"))


def _int(value: Any) -> int | None:
    """An int, or an enum member pickled as its class and value (DeepSpeed's ``ZeroStageEnum``)."""
    if isinstance(value, _Object) and len(value.args) == 1:
        value = value.args[0]
    return value if type(value) is int else None
