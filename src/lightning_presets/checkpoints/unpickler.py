"""An unpickler that runs nothing: every class a pickle names becomes an inert placeholder, dictionaries are keyed so
that no pickle can make them quadratic, and each pickle is bounded in bytes, opcodes, objects and CPU time."""

from __future__ import annotations

import collections
import io
import pickle
import sys
import time
from dataclasses import dataclass
from typing import IO, Any, ClassVar

from lightning_presets.checkpoints import limits
from lightning_presets.checkpoints.facts import CheckpointReadError, clean
from lightning_presets.checkpoints.paths import unreadable
from lightning_presets.core.rules import error_text


@dataclass(frozen=True, slots=True)
class Storage:
    """A tensor's storage as the pickle names it; its bytes are never read."""

    dtype: str


class PickledObject:
    """An instance of a class the pickle names, never imported: the class's name, its arguments and its state."""

    __slots__ = ("args", "items", "state")
    qualname: ClassVar[str] = "?"
    args: tuple[Any, ...]
    items: dict[Any, Any]
    state: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> PickledObject:
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
DTYPE_NAMES = frozenset(_STORAGE_DTYPES.values())


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
        data = self._source.readline(min(self._limit - self._used + 1, limits.MAX_TEXT_LINE))
        self._spend(len(data))
        return data


class SafeKey:
    """A dictionary key or set member other than a text, bytes or a plain int: hashed by identity, so that no
    pickle can make its keys collide (equal hashes would make building the dictionary quadratic)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


_PLAIN_KEYS = (str, bytes, bool, type(None))


def _safe(key: Any) -> Any:
    if type(key) in _PLAIN_KEYS or (type(key) is int and -(2**60) < key < 2**60):
        return key  # ints of different values below 2**61 - 1 never share a hash; texts' hashes are keyed
    return SafeKey(key)


def _pairs(items: list[Any]) -> Any:
    return ((_safe(items[index]), items[index + 1]) for index in range(0, len(items) - 1, 2))


class _Unpickler(pickle._Unpickler):
    """Python's own unpickler (not the C one: this one can be bounded opcode by opcode) that imports nothing, calls
    nothing of the pickle's, counts its opcodes and the objects it creates, and keys dictionaries and sets so that
    no pickle can make them quadratic."""

    dispatch: ClassVar[dict[int, Any]] = dict(pickle._Unpickler.dispatch)

    def __init__(self, source: _Bounded | io.BytesIO, *, framed: bool = True) -> None:
        super().__init__(source, encoding="utf-8", errors="replace")
        self._classes: dict[str, type[PickledObject]] = {}
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
        if opcodes > limits.MAX_PICKLE_OPCODES:
            raise CheckpointReadError(f"its pickle runs more than {limits.MAX_PICKLE_OPCODES:,} opcodes: not read")
        if objects > limits.MAX_PICKLE_OBJECTS:
            raise CheckpointReadError(f"its pickle creates more than {limits.MAX_PICKLE_OBJECTS:,} objects: not read")
        if seconds > limits.MAX_PICKLE_SECONDS:
            raise CheckpointReadError(
                f"its pickle takes more than {limits.MAX_PICKLE_SECONDS:g} s of CPU time: not read"
            )

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
            if len(self._classes) >= limits.MAX_PICKLE_CLASSES:
                raise CheckpointReadError(f"its pickle names more than {limits.MAX_PICKLE_CLASSES:,} classes: not read")
            found = self._classes[qualname] = type(
                "Placeholder", (PickledObject,), {"__slots__": (), "qualname": clean(qualname)}
            )
        return found

    def persistent_load(self, pid: Any) -> Any:
        kind = pid[1] if isinstance(pid, tuple) and len(pid) > 1 else None
        name = str(getattr(kind, "qualname", "")).rpartition(".")[2]
        return Storage(_STORAGE_DTYPES.get(name, name.removesuffix("Storage").lower() or "unknown"))


def _ordered_dict(*args: Any, **kwargs: Any) -> collections.OrderedDict[Any, Any]:
    return collections.OrderedDict()


def loads(source: IO[bytes] | bytes, where: str) -> Any:
    """One pickle: all of ``source`` (bytes, already bounded in size), or from a file at its position (at most
    :data:`~lightning_presets.checkpoints.limits.MAX_PICKLE_BYTES` of it), within the budget."""
    try:
        if isinstance(source, bytes):
            framed = source[:1] == pickle.PROTO and source[1:2] >= b"\x04"
            return _Unpickler(io.BytesIO(source), framed=framed).load()
        return _Unpickler(_Bounded(source, where, limits.MAX_PICKLE_BYTES)).load()
    except CheckpointReadError as error:
        message = str(error)
        raise CheckpointReadError(message if message.startswith(where) else f"{where}: {message}") from None
    except OSError as error:
        raise unreadable(where, error) from None
    except Exception as error:  # a damaged or foreign pickle (of any error type): reported, never raised raw
        raise CheckpointReadError(f"{where}: not a readable pickle ({clean(error_text(error))})") from None


def label(key: Any) -> str:
    """A key read from a checkpoint as text for facts and messages (a huge int is not printed)."""
    key = key.value if isinstance(key, SafeKey) else key
    if isinstance(key, str):
        return clean(key)
    if (type(key) is int and key.bit_length() <= 64) or type(key) in (bool, float) or key is None:
        return str(key)
    return f"<a {key.qualname if isinstance(key, PickledObject) else clean(type(key).__name__)} key>"
