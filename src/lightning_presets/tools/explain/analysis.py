"""From what was read to the failures: the signatures matched on every stream, grouped into one failure per signature
(or per unrecognised exception), with the ranks and places each was seen in, and which failure came first.

Which came first: the failures that are causes come before those that are consequences (a collective that timed out,
a peer that closed its connection: what a rank reports because another failed). Among them, the earliest recorded
time wins (torchelastic's error files and summary entries say when a rank failed), then the order in which they were
read (a single interleaved log reads in time order). A rank killed with SIGKILL whose own traceback is known is not
reported as killed by the host: its traceback says more.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from lightning_presets.guards.failures import SIGNATURES, UNKNOWN_EXCEPTION, Signature, matches, run_probe
from lightning_presets.guards.failures.signatures import HOST_OUT_OF_MEMORY
from lightning_presets.tools.explain.reading import Read, Stream, read, summary_spans

MAX_EVIDENCE = 6
"""Evidence lines kept per failure (the count of the others is said)."""

_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_EXCEPTION_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::(?P<message>.*))?$")
_LAUNCHER = re.compile(r"(?:ChildFailedError|SignalException|RendezvousClosedError|KeyboardInterrupt|SystemExit)$")
"""Exceptions the launcher raises about its workers (or an interrupt): not a failure of their own."""
_LINE_RANK = re.compile(r"\[(?:PG[^\]]*)?Rank (?P<rank>\d+)\]|local_rank: (?P<local>\d+)")
_COVER = 600
"""Characters after an exception's line that may still belong to it (NCCL's "Last error:" lines)."""


@dataclass(frozen=True, slots=True)
class Event:
    """One place where one failure was seen."""

    signature: Signature
    cause: str
    rank: int | None
    source: str
    line: int
    text: str
    timestamp: float | None
    order: tuple[int, int]
    matched: str


@dataclass(slots=True)
class Failure:
    """One distinct failure: a signature (or an unrecognised exception) and everywhere it was seen."""

    signature: Signature
    cause: str
    events: list[Event] = field(default_factory=list)
    first: bool = False
    probe: str | None = None

    @property
    def code(self) -> str:
        return self.signature.code

    @property
    def category(self) -> str:
        return self.signature.category

    @property
    def role(self) -> str:
        return self.signature.role

    @property
    def ranks(self) -> list[int]:
        return sorted({event.rank for event in self.events if event.rank is not None})

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys(event.source for event in self.events))

    @property
    def timestamp(self) -> float | None:
        known = [event.timestamp for event in self.events if event.timestamp is not None]
        return min(known) if known else None

    def sort_key(self) -> tuple[int, float, tuple[int, int]]:
        stamp = self.timestamp
        return (
            0 if self.role == "cause" else 1,
            stamp if stamp is not None else math.inf,
            min(e.order for e in self.events),
        )

    def evidence(self) -> list[str]:
        lines = []
        for event in self.events[:MAX_EVIDENCE]:
            where = f"rank {event.rank}, " if event.rank is not None else ""
            lines.append(f"{where}{event.source}:{event.line}: {event.text}")
        if len(self.events) > MAX_EVIDENCE:
            lines.append(f"... and {len(self.events) - MAX_EVIDENCE} more")
        return lines

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "code": self.code,
            "category": self.category,
            "cause": self.cause,
            "fix": self.signature.fix,
            "ranks": self.ranks,
            "first": self.first,
            "evidence": self.evidence(),
            "role": self.role,
            "source": self.signature.source,
        }
        if self.probe:
            data["probe"] = self.probe
        return data


@dataclass(frozen=True, slots=True)
class Report:
    """What ``explain`` found: the failures, first one first, and what was read."""

    failures: tuple[Failure, ...]
    places: tuple[tuple[str, int], ...]

    @property
    def explained(self) -> bool:
        """Something was recognised: a failure of a known category (an unrecognised exception alone is not)."""
        return any(failure.category != "unknown" for failure in self.failures)

    @property
    def exit_code(self) -> int:
        return 0 if self.explained else 1

    @property
    def first(self) -> Failure | None:
        return next((failure for failure in self.failures if failure.first), None)

    def as_dict(self) -> dict[str, Any]:
        return {
            "failures": [failure.as_dict() for failure in self.failures],
            "read": [{"path": path, "lines": lines} for path, lines in self.places],
        }


def explain(paths: Sequence[str], stdin: TextIO | None = None, *, probe: bool = False) -> Report:
    """Read ``paths`` (files, folders, ``-``) and explain the failures in them; ``probe``: also look at this machine
    (only meaningful when the logs come from it)."""
    return analyse(read(paths, stdin), probe=probe)


def analyse(what: Read, *, probe: bool = False) -> Report:
    events: list[Event] = []
    for stream in what.streams:
        events.extend(_events(stream))
    events = _without_killed_with_traceback(events)
    failures: dict[tuple[str, str], Failure] = {}
    for event in events:
        key = (event.signature.code, event.cause if event.signature is UNKNOWN_EXCEPTION else "")
        failure = failures.setdefault(key, Failure(event.signature, event.cause))
        failure.events.append(event)
    ordered = sorted(failures.values(), key=Failure.sort_key)
    for failure in ordered:
        failure.events.sort(key=lambda e: (e.timestamp if e.timestamp is not None else math.inf, e.order))
        if probe:
            failure.probe = run_probe(failure.signature.probe, "\n".join(e.matched for e in failure.events))
    if ordered:
        ordered[0].first = True
    return Report(failures=tuple(ordered), places=what.places)


def _events(stream: Stream) -> list[Event]:
    skip = [] if stream.summary else summary_spans(stream)
    found = [m for m in matches(stream.text, SIGNATURES) if not any(a <= m.start < b for a, b in skip)]
    events = [_event(stream, m.signature, m.cause, m.start, m.line, m.line) for m in found]
    for start, end, exception in _exceptions(stream.text):
        if any(a <= start < b for a, b in skip) or _LAUNCHER.search(exception.partition(":")[0]):
            continue
        if any(start <= m.start <= end + _COVER for m in found):
            continue
        cause = UNKNOWN_EXCEPTION.describe({"exception": exception})
        events.append(_event(stream, UNKNOWN_EXCEPTION, cause, end, exception, exception))
    return events


def _event(stream: Stream, signature: Signature, cause: str, offset: int, line: str, matched: str) -> Event:
    rank = stream.rank
    if rank is None and (named := _LINE_RANK.search(line)):
        rank = int(named.group("rank") or named.group("local"))
    number = stream.line_of(offset)
    return Event(signature, cause, rank, stream.source, number, line[:300], stream.timestamp, (stream.order, number),
                 matched)  # fmt: skip


def _exceptions(text: str) -> list[tuple[int, int, str]]:
    """Each traceback (chained ones together) as (start, offset of its exception line, the exception line)."""
    found: list[tuple[int, int, str]] = []
    lines = text.split("\n")
    offsets = [0]
    for line in lines:
        offsets.append(offsets[-1] + len(line) + 1)
    index = 0
    while index < len(lines):
        if lines[index].strip() != _TRACEBACK:
            index += 1
            continue
        start, last = offsets[index], None
        base = len(lines[index]) - len(lines[index].lstrip())
        index += 1
        while index < len(lines):
            line = lines[index]
            indent = len(line) - len(line.lstrip())
            stripped = line.strip()
            if not stripped or indent > base:
                index += 1
                continue
            if stripped == _TRACEBACK or stripped.startswith(_CHAINED):
                index += 1
                continue
            if _EXCEPTION_LINE.match(stripped):
                last = (offsets[index], stripped)
                index += 1
                if index < len(lines) and (lines[index].strip().startswith(_CHAINED)):
                    continue  # the chain goes on: its last exception is the one raised
                following = next(
                    (lines[i].strip() for i in range(index, min(index + 3, len(lines))) if lines[i].strip()), ""
                )
                if following.startswith(_CHAINED):
                    continue
            break
        if last is not None:
            found.append((start, last[0], last[1][:300]))
    return found


def _without_killed_with_traceback(events: list[Event]) -> list[Event]:
    """A rank killed with SIGKILL whose own traceback is known was not killed by the host without a word."""
    explained = {e.rank for e in events if e.signature is not HOST_OUT_OF_MEMORY and e.signature.role == "cause"}
    return [e for e in events if e.signature is not HOST_OUT_OF_MEMORY or e.rank is None or e.rank not in explained]
