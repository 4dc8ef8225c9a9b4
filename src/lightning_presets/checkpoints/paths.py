"""The file system, bounded: which local path a checkpoint argument names, and files and folders opened, listed and
read without blocking and within :mod:`~lightning_presets.checkpoints.limits`."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO, Literal

from lightning_presets.checkpoints import limits
from lightning_presets.checkpoints.facts import CheckpointReadError

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


def unreadable(where: str, error: OSError, verb: str = "read") -> CheckpointReadError:
    reason = "is a symbolic link loop" if error.errno == errno.ELOOP else f"cannot be {verb}: {error.strerror or error}"
    return CheckpointReadError(f"{where} {reason}")


def stat_kind(path: Path) -> Literal["file", "folder"]:
    try:
        size = path.stat().st_size  # follows links: a loop raises ELOOP
    except FileNotFoundError:
        raise
    except OSError as error:
        raise unreadable(repr(os.fspath(path)), error) from None
    if path.is_dir():
        return "folder"
    if not path.is_file() or size == 0:
        raise CheckpointReadError(f"{os.fspath(path)!r} is neither a checkpoint file nor a folder")
    return "file"


def list_folder(folder: Path) -> frozenset[str]:
    names = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                names.append(entry.name)
                if len(names) > limits.MAX_FOLDER_ENTRIES:
                    raise CheckpointReadError(
                        f"{os.fspath(folder)!r} holds more than {limits.MAX_FOLDER_ENTRIES:,} entries: not read"
                    )
    except OSError as error:
        raise unreadable(repr(os.fspath(folder)), error, "listed") from None
    return frozenset(names)


def open_regular(path: Path, where: str | None = None) -> IO[bytes]:
    """``path`` opened for reading without blocking (a FIFO or a device would never answer), if a regular file."""
    where = where or repr(os.fspath(path))
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_BINARY", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError as error:
        raise unreadable(where, error) from None
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


def read_bounded(path: Path, limit: int, what: str) -> bytes:
    try:
        with open_regular(path) as handle:
            data = handle.read(limit + 1)
    except OSError as error:
        raise unreadable(repr(os.fspath(path)), error) from None
    if len(data) > limit:
        raise CheckpointReadError(f"{os.fspath(path)!r}: its {what} is larger than {limit:,} bytes: not read")
    return data
