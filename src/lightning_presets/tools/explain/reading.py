"""Reading what a failed run left: files, folders, standard input; ranks, torchrun's log folder, torchelastic's error
files and its failure summary.

Everything read becomes :class:`Stream` objects: the text one rank wrote in one place (a rank's ``stderr.log``, the
``[rank1]:`` lines of a SLURM output file, a torchelastic error file, one entry of torchrun's failure summary), with
the time it was written when the place says so. :mod:`.analysis` matches the signatures on them.
"""

from __future__ import annotations

import datetime
import itertools
import json
import os
import re
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from lightning_presets.core.findings import UsageError

MAX_BYTES = 32 << 20
"""Of a larger file only the last 32 MiB are read (a failure is at the end of a log)."""
MAX_FILES = 2000
"""A folder with more files than this is a usage error (the wrong folder)."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_PREFIX = re.compile(r"^(?:(?:\[(?:default|rank)\d+\]:|\[\d+,\d+\]<std(?:out|err)>:|\d{1,5}: ) ?)+")
"""torchrun's ``[rankN]:``/``[defaultN]:`` (``--tee``), mpirun's ``[job,rank]<stderr>:``, srun's ``--label`` ``N: ``."""
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
    """For each line of ``text``, its line number in ``source`` (1-based)."""
    order: int
    """The place's position among everything read (files in the order given, a folder's files sorted)."""
    timestamp: float | None = None
    """When the failure in it was recorded (torchelastic's error files and summary), seconds since the epoch."""
    summary: bool = False
    """One entry of torchrun's failure summary (the launcher's view of a rank)."""

    def line_of(self, offset: int) -> int:
        index = self.text.count("\n", 0, offset)
        return self.line_numbers[index] if index < len(self.line_numbers) else index + 1


@dataclass(frozen=True, slots=True)
class Read:
    """Everything read: the streams and, per place, how many lines it had."""

    streams: tuple[Stream, ...]
    places: tuple[tuple[str, int], ...]


def read(paths: Sequence[str], stdin: TextIO | None = None) -> Read:
    """Read the given files, folders (recursively) and ``-`` (standard input, once); a path that does not exist or
    cannot be read is a usage error."""
    if not paths:
        raise UsageError("name at least one log file, folder or - (standard input)")
    if list(paths).count("-") > 1:
        raise UsageError("- (standard input) can be given once")
    places: list[tuple[str, str, int | None, bool]] = []  # (name, text, rank from the place, error file)
    for given in paths:
        if given == "-":
            if stdin is None:
                raise UsageError("no standard input to read")
            places.append(("<stdin>", stdin.read()[-MAX_BYTES:], None, False))
            continue
        path = Path(given)
        if not path.exists():
            raise UsageError(f"{given}: no such file or folder")
        files = sorted(itertools.islice(_files(path), MAX_FILES + 1)) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise UsageError(f"{given}: the folder has no files")
        if len(files) > MAX_FILES:
            raise UsageError(f"{given}: more than {MAX_FILES} files; name the run's log folder")
        for file in files:
            text = _text(file, given)
            if text is None:
                continue
            name = str(file)
            places.append((name, text, _rank_of_path(name), file.name == "error.json"))
    streams: list[Stream] = []
    counts: list[tuple[str, int]] = []
    for order, (name, text, rank, error_file) in enumerate(places):
        counts.append((name, text.count("\n") + (1 if text and not text.endswith("\n") else 0)))
        if error_file:
            streams.extend(_error_file(name, text, rank, order))
        else:
            streams.extend(_log_streams(name, text, rank, order))
    return Read(streams=tuple(streams), places=tuple(counts))


def _files(folder: Path) -> Iterator[Path]:
    for root, directories, names in os.walk(folder):
        directories[:] = sorted(d for d in directories if not d.startswith("."))
        for name in names:
            if not name.startswith("."):
                yield Path(root) / name


def _text(file: Path, given: str) -> str | None:
    """The file's text (its last :data:`MAX_BYTES`); ``None`` for a binary file inside a folder."""
    try:
        with open(file, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_BYTES:
                handle.seek(size - MAX_BYTES)
            data = handle.read()
    except IsADirectoryError:
        raise UsageError(f"{given}: is a folder that cannot be listed") from None
    except OSError as error:
        raise UsageError(f"{file}: cannot be read ({error.strerror or error})") from None
    if b"\0" in data[:8192]:
        if str(file) == given:
            raise UsageError(f"{given}: not a text file")
        return None
    return _ANSI.sub("", data.decode("utf-8", errors="replace")).replace("\r\n", "\n").replace("\r", "\n")


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


def _log_streams(name: str, text: str, rank: int | None, order: int) -> list[Stream]:
    """One stream per rank of a log: a line's rank is its prefix's (``[rank1]:``, ``[default1]:``, mpirun's
    ``[1,1]<stderr>:``), else the place's; the entries of torchrun's failure summary become streams of their own."""
    by_rank: dict[int | None, tuple[list[str], list[int]]] = {}
    for number, line in enumerate(text.split("\n"), start=1):
        owner, content = rank, line
        found = _PREFIX.match(line)
        if found:
            owner = _prefix_rank(found.group(0), rank)
            content = line[found.end() :]
        lines, numbers = by_rank.setdefault(owner, ([], []))
        lines.append(content)
        numbers.append(number)
    streams = [
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
    return [(found.start(), found.end()) for found in _SUMMARY_ENTRY.finditer(stream.text)]


def _summary_time(value: str) -> float | None:
    try:
        return datetime.datetime.strptime(value, "%Y-%m-%d_%H:%M:%S").timestamp()  # the launcher's local time
    except ValueError:
        return None
