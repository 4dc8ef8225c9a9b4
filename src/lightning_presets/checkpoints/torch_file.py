"""One ``torch.save`` file read as ``torch.load`` reads it: the zip's central directory and local headers (neither
CRCs, names in local headers nor "version needed" checked) or the legacy (not zip) format, and only its pickle."""

from __future__ import annotations

import os
import struct
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from lightning_presets.checkpoints import limits
from lightning_presets.checkpoints.facts import CheckpointReadError, clean
from lightning_presets.checkpoints.paths import open_regular, unreadable
from lightning_presets.checkpoints.unpickler import loads
from lightning_presets.core.rules import error_text

_CHUNK = 16 * 2**10
"""How much compressed data is inflated at a time."""

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
    if index_bytes > limits.MAX_ZIP_INDEX_BYTES or entries > limits.MAX_FOLDER_ENTRIES:
        raise CheckpointReadError(
            f"{where}: its zip index holds {entries:,} entries in {index_bytes:,} bytes, above the "
            f"{limits.MAX_FOLDER_ENTRIES:,} entries / {limits.MAX_ZIP_INDEX_BYTES:,} bytes read: not read"
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


def member_bytes(handle: IO[bytes], member: _Member, where: str) -> bytes:
    """A member's bytes (stored or deflated, the methods ``torch.load`` reads), bounded in size and expansion."""
    if member.flags & 0x1:
        raise CheckpointReadError(f"{where}: its data.pkl is encrypted: not read")
    if member.size > limits.MAX_PICKLE_BYTES:
        raise CheckpointReadError(
            f"{where}: its pickle is {member.size:,} bytes, above the {limits.MAX_PICKLE_BYTES:,} read: not read"
        )
    handle.seek(member.offset)
    header = handle.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or header[:4] != _LOCAL:
        raise CheckpointReadError(f"{where}: the zip header of its data.pkl is damaged")
    _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    handle.seek(member.offset + _LOCAL_HEADER.size + name_length + extra_length)
    if member.method == 0:
        data = handle.read(min(member.size, limits.MAX_PICKLE_BYTES + 1))
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
        if len(out) > limits.MAX_COMPRESSION_RATIO * max(read, 1) + _CHUNK:
            raise CheckpointReadError(
                f"{where}: its data.pkl expands more than {limits.MAX_COMPRESSION_RATIO} times (torch.save stores it "
                "uncompressed): not read"
            )
    return bytes(out)


def zip_pickle(path: Path, where: str | None = None) -> Any:
    """The unpickled ``data.pkl`` of a ``torch.save`` zip (tensors as placeholders), or the pickled object of the
    legacy format."""
    where = where or repr(os.fspath(path))
    try:
        with open_regular(path, where) as handle:
            members = _zip_directory(handle, where)
            if members is None:
                handle.seek(0)
                if handle.read(len(_LEGACY_MAGIC)) == _LEGACY_MAGIC:
                    return _legacy_pickle(handle, where)
                raise CheckpointReadError(f"{where}: not a torch.save zip file (no zip directory at its end)")
            data = member_bytes(handle, _data_pickle(members, where), where)
    except OSError as error:
        raise unreadable(where, error) from None
    except (struct.error, ValueError, OverflowError, EOFError, MemoryError) as error:
        if isinstance(error, CheckpointReadError):
            raise
        raise CheckpointReadError(f"{where} is damaged ({clean(error_text(error))})") from None
    return loads(data, where)


def _legacy_pickle(handle: IO[bytes], where: str) -> Any:
    """The object of a legacy ``torch.save`` file: after its magic number, its protocol version and system
    information, each one pickle (the storages' bytes that follow are not read)."""
    for _ in range(2):
        loads(handle, where)
    return loads(handle, where)
