"""Reading what a failed run left: files, folders, standard input; ranks, torchrun's log folder, torchelastic's error
files and its failure summary.

Everything read becomes :class:`Stream` objects: the text one rank wrote in one place (a rank's ``stderr.log``, the
``[rank1]:`` lines of a SLURM output file, a torchelastic error file, one entry of torchrun's failure summary), with
the time it was written when the place says so. :mod:`.analysis` matches the signatures on them.
"""

from __future__ import annotations

import datetime
import errno
import itertools
import json
import os
import re
import stat
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, TextIO

from lightning_presets.core.findings import UsageError

MAX_BYTES = 32 << 20
"""Of a larger file (or standard input, a pipe) only the last 32 MiB are kept (a failure is at the end of a log); the
lines before them are counted, so that line numbers stay true, and the report says where its window starts."""
CHUNK = 4 << 20
"""What is read at a time: what one command holds is at most a window and a chunk, one place at a time."""
MAX_FILES = 2000
"""A folder with more files than this is a usage error (the wrong folder)."""

_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b\n]{0,4096}(?:\x07|\x1b\\)?"  # OSC: window titles, OSC 8 hyperlinks
    r"|\x1b\[[0-9;:?<=>!]{0,64}[ -/]{0,4}[@-~]"  # CSI: colours, cursor moves
    r"|\x1b[ -/]{0,4}[0-~]?"  # the rest: resets (ESC c), character sets
    r"|[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f]"  # what else a terminal acts on (bell, backspace)
)
"""Terminal escape sequences and control characters: taken out of what is read, so that none reaches the output."""
_CONTROLS = bytes([*range(0x00, 0x09), 0x0B, 0x0C, *range(0x0E, 0x20), 0x7F])
_PREFIX = re.compile(
    r"^(?:(?:\[(?:default|rank)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d{1,5}: |\(\w{1,64} pid=\d+(?:, ip=[\d.]+)?\)) ?)+"
)
"""torchrun's ``[rankN]:``/``[defaultN]:`` (``--tee``), mpirun's ``[job,rank]<stderr>:``, srun's ``--label`` ``N: ``,
Ray's worker prefix ``(RayTrainWorker pid=123, ip=10.0.0.1)`` (no rank: its lines stay with the place's)."""
_PREFIX_PART = re.compile(r"\[(default|rank)(\d+)\]:|\[\d+,(\d+)\]<std(?:out|err)>:|^\s*(\d{1,5}): ")
_TORCHRUN_FILE = re.compile(r"attempt_\d+/(?P<rank>\d+)/(?:stdout\.log|stderr\.log|error\.json)$")
_RANK_NAME = re.compile(r"(?:^|[^a-z])rank[_-]?(?P<rank>\d+)(?:\D|$)", re.IGNORECASE)
_SUMMARY_ENTRY = re.compile(
    r"^\[\d+\]:[ \t]*\n"
    r"[ \t]*time[ \t]*:[ \t]*(?P<time>\S+)[ \t]*\n"
    r"[ \t]*host[ \t]*:[^\n]*\n"
    r"[ \t]*rank[ \t]*:[ \t]*(?P<rank>\d+)[^\n]*\n"
    r"[ \t]*exitcode[ \t]*:[ \t]*(?P<exitcode>-?\d+)[^\n]*\n"
    r"(?:[ \t]*error_file[ \t]*:[^\n]*\n)?"
    r"[ \t]*traceback[ \t]*:[ \t]?(?P<traceback>.*?)(?=\n[ \t]*[-=]{8,}|\n\[\d+\]:|\Z)",
    re.MULTILINE | re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class Stream:
    """The text one rank wrote in one place."""

    source: str
    """Where it was read (the path as given, or ``<stdin>``)."""
    text: str
    rank: int | None
    """The global rank, when the place or the lines' prefixes say; ``None`` for the launcher or an unknown rank."""
    line_numbers: tuple[int, ...]
    """For each line of ``text``, its line number in ``source`` (1-based); empty: the lines follow each other from
    ``first_line``."""
    order: int
    """The place's position among everything read (files in the order given, a folder's files sorted)."""
    timestamp: float | None = None
    """When the failure in it was recorded (torchelastic's error files and summary), seconds since the epoch."""
    summary: bool = False
    """One entry of torchrun's failure summary (the launcher's view of a rank)."""
    first_line: int = 1
    """The line number of the text's first line where ``line_numbers`` is empty."""

    def line_of(self, offset: int) -> int:
        return self.lines_of([offset])[0]

    def lines_of(self, offsets: Sequence[int]) -> list[int]:
        """The line numbers of the offsets, counted once through the text (not once per offset)."""
        result: dict[int, int] = {}
        index, position = 0, 0
        for offset in sorted(set(offsets)):
            index += self.text.count("\n", position, offset)
            position = max(position, offset)
            if self.line_numbers:
                result[offset] = self.line_numbers[index] if index < len(self.line_numbers) else index + 1
            else:
                result[offset] = self.first_line + index
        return [result[offset] for offset in offsets]


@dataclass(frozen=True, slots=True)
class Read:
    """Everything read: the streams and, per place, how many lines it had."""

    streams: tuple[Stream, ...]
    places: tuple[tuple[str, int], ...]
    windows: tuple[tuple[str, int], ...] = ()
    """The places read in part: their path and the line number the part read starts at."""
    skipped: tuple[tuple[str, str], ...] = ()
    """Files of a folder that were not read, and why (a dangling link, a FIFO, a device, unreadable)."""


@dataclass(frozen=True, slots=True)
class Place:
    """One place's text as read: its name, text, the rank its path names, whether it is an error file, its line count
    and the line number its text starts at (more than 1 where only its end was kept)."""

    name: str
    text: str
    rank: int | None
    error_file: bool
    first_line: int = 1

    @property
    def lines(self) -> int:
        return self.first_line - 1 + self.text.count("\n") + (1 if self.text and not self.text.endswith("\n") else 0)

    def streams(self, order: int) -> list[Stream]:
        if self.error_file:
            return _error_file(self.name, self.text, self.rank, order)
        return _log_streams(self.name, self.text, self.rank, order, self.first_line)


def read(paths: Sequence[str], stdin: TextIO | None = None) -> Read:
    """Read the given files, folders (recursively) and ``-`` (standard input, once); a path that does not exist or
    cannot be read is a usage error."""
    streams: list[Stream] = []
    counts: list[tuple[str, int]] = []
    windows: list[tuple[str, int]] = []
    skipped: list[tuple[str, str]] = []
    for order, place in enumerate(places(paths, stdin, skipped)):
        counts.append((place.name, place.lines))
        if place.first_line > 1:
            windows.append((place.name, place.first_line))
        streams.extend(place.streams(order))
    return Read(tuple(streams), tuple(counts), tuple(windows), tuple(skipped))


def places(paths: Sequence[str], stdin: TextIO | None, skipped: list[tuple[str, str]]) -> Iterator[Place]:
    """Each place's text, one at a time (the caller keeps what it needs of one before the next is read); files of a
    folder that cannot be read are added to ``skipped`` with the reason."""
    if not paths:
        raise UsageError("name at least one log file, folder or - (standard input)")
    if list(paths).count("-") > 1:
        raise UsageError("- (standard input) can be given once")
    checked = [(given, _kind(given)) for given in paths]  # every path is checked before any is read
    for given, kind in checked:
        if given == "-":
            if stdin is None:
                raise UsageError("no standard input to read")
            text, first = _stream_text(_chunks_of(stdin), "<stdin>", "standard input")
            yield Place("<stdin>", text, None, False, first)
        elif kind == "folder":
            files = sorted(itertools.islice(_files(Path(given)), MAX_FILES + 1))
            if not files:
                raise UsageError(f"{given}: the folder has no files")
            if len(files) > MAX_FILES:
                raise UsageError(f"{given}: more than {MAX_FILES} files; name the run's log folder")
            for file in files:
                name = str(file)
                why = _not_readable(file)
                if why is not None:
                    skipped.append((name, why))
                    continue
                try:
                    found = _file_text(file, name, in_folder=True)
                except UsageError as error:
                    skipped.append((name, str(error).removeprefix(f"{name}: ")))
                    continue
                if found is not None:
                    yield Place(name, found[0], _rank_of_path(name), file.name == "error.json", found[1])
        else:
            found = _file_text(Path(given), given, in_folder=False)
            if found is not None:
                yield Place(given, found[0], _rank_of_path(given), Path(given).name == "error.json", found[1])


def _kind(given: str) -> str:
    """``folder``, ``file`` (a regular file, a FIFO or a pipe) or ``-``; anything else is a usage error that says what
    the path is."""
    if given == "-":
        return "-"
    try:
        mode = os.stat(given).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise UsageError(f"{given}: a symbolic link that loops (it leads back to itself)") from None
        if os.path.islink(given):
            target = os.readlink(given)
            raise UsageError(f"{given}: a dangling symbolic link (to {target}, which does not exist)") from None
        if error.errno in (errno.ENOENT, errno.ENOTDIR):
            raise UsageError(f"{given}: no such file or folder") from None
        raise UsageError(f"{given}: cannot be read ({error.strerror or error})") from None
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISREG(mode) or stat.S_ISFIFO(mode):
        return "file"
    what = "a character device" if stat.S_ISCHR(mode) else "a block device" if stat.S_ISBLK(mode) else "a socket"
    raise UsageError(f"{given}: {what}, not a log file (a log is a regular file, a pipe or -)")


def _not_readable(file: Path) -> str | None:
    """Why a file found in a folder is not read, or None: only regular files are (a FIFO there may never end)."""
    try:
        mode = os.stat(file).st_mode
    except OSError as error:
        if error.errno == errno.ELOOP:
            return "a symbolic link that loops"
        if os.path.islink(file):
            return "a dangling symbolic link"
        return f"cannot be read ({error.strerror or error})"
    if not stat.S_ISREG(mode):
        return "not a regular file (a FIFO, a device or a socket)"
    return None


def _file_text(file: Path, given: str, *, in_folder: bool) -> tuple[str, int] | None:
    """A file's text (a large file's last :data:`MAX_BYTES`, from a line's start) and the line number it starts at;
    ``None`` for a binary file inside a folder. A FIFO is read like standard input: to its end, keeping its tail."""
    try:
        descriptor = os.open(file, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO with no writer: no wait
    except IsADirectoryError:
        raise UsageError(f"{given}: is a folder that cannot be listed") from None
    except OSError as error:
        raise UsageError(f"{file}: cannot be read ({error.strerror or error})") from None
    try:
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        with open(descriptor, "rb", closefd=False) as handle:
            mode = os.fstat(descriptor).st_mode
            if stat.S_ISREG(mode):
                data, first = _regular_tail(handle, os.fstat(descriptor).st_size)
            else:
                data, first = _tail(iter(lambda: handle.read(CHUNK), b""))
    except OSError as error:
        raise UsageError(f"{file}: cannot be read ({error.strerror or error})") from None
    finally:
        os.close(descriptor)
    if b"\0" in data[:8192]:
        if not in_folder:
            raise UsageError(f"{given}: not a text file")
        return None
    return _decoded(data), first


def _decoded(data: bytes) -> str:
    """The bytes as text, one character a byte (Latin-1): offsets are the bytes', the text is as compact as the
    bytes and ``str.find`` runs at memory speed on it; :func:`text_of` turns a piece of it back into UTF-8 text."""
    if b"\r" in data:
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    if len(data.translate(None, _CONTROLS)) != len(data):  # an escape sequence or a control character somewhere
        return _ESCAPES.sub("", data.decode("latin-1"))
    return data.decode("latin-1")


def text_of(piece: str) -> str:
    """A piece of what :func:`_decoded` gave, as the UTF-8 text it was (a piece with other characters: as it is)."""
    try:
        return piece.encode("latin-1").decode("utf-8", errors="replace")
    except UnicodeEncodeError:
        return piece


def _regular_tail(handle: BinaryIO, size: int) -> tuple[bytes, int]:
    """The last :data:`MAX_BYTES` of a regular file from a line's start, and its first line's number (the newlines
    of the part skipped are counted a chunk at a time)."""
    if size <= MAX_BYTES:
        return handle.read(), 1
    start, newlines = size - MAX_BYTES, 0
    while handle.tell() < start:
        newlines += handle.read(min(CHUNK, start - handle.tell())).count(b"\n")
    data = handle.read()
    cut = data.find(b"\n")
    if cut < 0:
        return data, newlines + 1
    return data[cut + 1 :], newlines + 2


def _tail(chunks: Iterator[bytes]) -> tuple[bytes, int]:
    """What a stream gave, its last :data:`MAX_BYTES` only (from a line's start), and its first line's number: read
    to its end a chunk at a time, never whole. A stream whose first chunk holds a NUL is refused at once (a binary,
    ``/dev/zero``)."""
    kept, newlines, first = bytearray(), 0, True
    for chunk in chunks:
        if first and b"\0" in chunk[:8192]:
            return bytes(chunk[:8192]), 1
        first = False
        kept += chunk
        if len(kept) > MAX_BYTES + CHUNK:
            drop = len(kept) - MAX_BYTES
            cut = kept.find(b"\n", drop)
            drop = cut + 1 if cut >= 0 else drop
            newlines += kept.count(b"\n", 0, drop)
            del kept[:drop]
    return bytes(kept), newlines + 1


def _chunks_of(stdin: TextIO) -> Iterator[bytes]:
    buffer = getattr(stdin, "buffer", None)
    if buffer is not None:
        yield from iter(lambda: buffer.read1(CHUNK) if hasattr(buffer, "read1") else buffer.read(CHUNK), b"")
        return
    for text in iter(lambda: stdin.read(CHUNK), ""):
        yield text.encode("utf-8", errors="replace")


def _stream_text(chunks: Iterator[bytes], name: str, what: str) -> tuple[str, int]:
    data, first = _tail(chunks)
    if b"\0" in data[:8192]:
        raise UsageError(f"{what}: not text (it holds NUL bytes: a binary, or /dev/zero)")
    return _decoded(data), first


def _files(folder: Path) -> Iterator[Path]:
    for root, directories, names in os.walk(folder):
        directories[:] = sorted(d for d in directories if not d.startswith("."))
        for name in names:
            if not name.startswith("."):
                yield Path(root) / name


def _rank_of_path(name: str) -> int | None:
    posix = name.replace(os.sep, "/")
    found = _TORCHRUN_FILE.search(posix) or _RANK_NAME.search(os.path.basename(posix))
    return int(found.group("rank")) if found else None


def _error_file(name: str, text: str, rank: int | None, order: int) -> list[Stream]:
    """A torchelastic error file (``@record``): the message, the Python call stack and the time of the failure."""
    try:
        data = json.loads(text)
    except ValueError:
        return _log_streams(name, text, rank, order)
    message: Any = data.get("message") if isinstance(data, dict) else None
    body, timestamp = "", None
    if isinstance(message, dict):
        found = message.get("extraInfo")
        extra: dict[str, Any] = found if isinstance(found, dict) else {}
        stack, said = extra.get("py_callstack"), message.get("message")
        body = stack if isinstance(stack, str) and stack.strip() else str(said or "")
        try:
            timestamp = float(str(extra.get("timestamp")))
        except ValueError:
            timestamp = None
    elif isinstance(message, str):
        body = message
    if not body.strip():
        return []
    lines = body.splitlines()
    return [Stream(name, "\n".join(lines), rank, tuple(range(1, len(lines) + 1)), order, timestamp)]


_ANY_PREFIX = re.compile(
    r"^(?:\[(?:default|rank)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d{1,5}: |\(\w{1,64} pid=\d+)", re.MULTILINE
)


def _log_streams(name: str, text: str, rank: int | None, order: int, first_line: int = 1) -> list[Stream]:
    """One stream per rank of a log: a line's rank is its prefix's (``[rank1]:``, ``[default1]:``, mpirun's
    ``[1,1]<stderr>:``), else the place's; the entries of torchrun's failure summary become streams of their own."""
    prefixed = list(_ANY_PREFIX.finditer(text))
    if not prefixed:  # no line names a rank: the text is one stream as it is
        streams = [Stream(name, text, rank, (), order, first_line=first_line)] if text.strip() else []
    else:  # the lines that name a rank go to its stream; the others stay, the moved ones left blank
        by_rank: dict[int | None, tuple[list[str], list[int]]] = {}
        rest: list[str] = []
        last = counted = 0
        number = first_line
        for found in prefixed:
            start = found.start()
            stop = text.find("\n", start)
            stop = len(text) if stop < 0 else stop
            number += text.count("\n", counted, start)
            counted = start
            line = text[start:stop]
            head = _PREFIX.match(line)
            owner = _prefix_rank(head.group(0), rank) if head else rank
            lines, numbers = by_rank.setdefault(owner, ([], []))
            lines.append(line[head.end() :] if head else line)
            numbers.append(number)
            rest.append(text[last:start])
            last = stop
        rest.append(text[last:])
        remaining = "".join(rest)
        streams = [Stream(name, remaining, rank, (), order, first_line=first_line)] if remaining.strip() else []
        streams += [
            Stream(name, "\n".join(lines), owner, tuple(numbers), order)
            for owner, (lines, numbers) in by_rank.items()
            if any(line.strip() for line in lines)
        ]
    for stream in list(streams):
        streams.extend(_summary_entries(stream))
    return streams


def _prefix_rank(prefix: str, default: int | None) -> int | None:
    """The global rank a line's prefixes name: ``[rankN]`` over ``[defaultN]`` (torchrun's local rank)."""
    ranks: dict[str, int] = {}
    for kind, number, mpi, srun in _PREFIX_PART.findall(prefix):
        name = kind or ("mpi" if mpi else "srun")
        ranks.setdefault(name, int(number or mpi or srun))
    if "rank" in ranks:
        return ranks["rank"]
    for name in ("mpi", "srun"):
        if name in ranks:
            return ranks[name]
    return ranks.get("default", default)


def _summary_entries(stream: Stream) -> Iterator[Stream]:
    """The entries of torchrun's ``ChildFailedError`` summary (``Failures:`` and ``Root Cause``): per rank, its exit
    code, when it failed and its traceback (or ``Signal 9 (SIGKILL) received by PID ...``)."""
    if "exitcode" not in stream.text:
        return
    for found in _SUMMARY_ENTRY.finditer(stream.text):
        block = found.group("traceback")
        head, _, rest = block.partition("\n")
        body = head.strip() + ("\n" + textwrap.dedent(rest) if rest else "")
        text = f"exitcode  : {found.group('exitcode')}\ntraceback :\n{body}"
        first = stream.line_of(found.start())
        numbers = tuple(first + index for index in range(text.count("\n") + 1))
        yield Stream(
            stream.source, text, int(found.group("rank")), numbers, stream.order, _summary_time(found.group("time")),
            summary=True,
        )  # fmt: skip


def summary_spans(stream: Stream) -> list[tuple[int, int]]:
    """Where torchrun's summary entries are in a stream's text (what they say is read from the entries instead)."""
    if "exitcode" not in stream.text:
        return []
    return [(found.start(), found.end()) for found in _SUMMARY_ENTRY.finditer(stream.text)]


def _summary_time(value: str) -> float | None:
    try:
        return datetime.datetime.strptime(value, "%Y-%m-%d_%H:%M:%S").timestamp()  # the launcher's local time
    except ValueError:
        return None
