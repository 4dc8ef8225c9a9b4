"""From what was read to the failures: the signatures matched on every stream, grouped into one failure per signature
(or per unrecognised exception), with the ranks and places each was seen in, and which failure came first.

Which came first: the failures that are causes come before those that are consequences (a collective that timed out,
a peer that closed its connection: what a rank reports because another failed). Among them, the earliest recorded
time wins (torchelastic's error files and summary entries say when a rank failed), then the order in which they were
read (a single interleaved log reads in time order). A rank killed with SIGKILL whose own traceback is known is not
reported as killed by the host: its traceback says more.
"""

from __future__ import annotations

import bisect
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from lightning_presets.failures import SIGNATURES, UNKNOWN_EXCEPTION, Signature, matches, run_probe
from lightning_presets.failures.signatures import HOST_OUT_OF_MEMORY
from lightning_presets.tools.explain.reading import Read, Stream, places, summary_spans, text_of

MAX_EVIDENCE = 6
"""Evidence lines kept per failure (the count of the others is said)."""
MAX_EVENTS = 200
"""Events kept per failure (a failure repeated a million times is counted, not kept: the ranks, places and first
lines are what the report says of it)."""
MAX_UNKNOWN = 5
"""Unrecognised exceptions reported one by one; the others are counted in one more failure."""

_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")
_CHAINED_LOWER = tuple(phrase.lower() for phrase in _CHAINED)
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
    exit_only: bool = False
    """The launcher's word that a rank exited with an error code (its summary without a traceback, its ``failed
    (exitcode: 1)`` line): a failure only where that rank's own error is not in what was read."""


@dataclass(slots=True)
class Failure:
    """One distinct failure: a signature (or an unrecognised exception) and everywhere it was seen."""

    signature: Signature
    cause: str
    events: list[Event] = field(default_factory=list)
    first: bool = False
    probe: str | None = None
    seen: int = 0
    """Every time it was seen (``events`` keeps the first :data:`MAX_EVENTS` and every timed one)."""
    ranks_seen: set[int] = field(default_factory=set)
    sources_seen: dict[str, None] = field(default_factory=dict)

    def add(self, event: Event) -> None:
        self.seen += 1
        if event.rank is not None:
            self.ranks_seen.add(event.rank)
        self.sources_seen.setdefault(event.source)
        if len(self.events) < MAX_EVENTS or event.timestamp is not None:
            self.events.append(event)

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
        return sorted(self.ranks_seen | {event.rank for event in self.events if event.rank is not None})

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys([*(event.source for event in self.events), *self.sources_seen]))

    @property
    def count(self) -> int:
        return max(self.seen, len(self.events))

    @property
    def timestamp(self) -> float | None:
        known = [event.timestamp for event in self.events if event.timestamp is not None]
        return min(known) if known else None

    def sort_key(self) -> tuple[int, float, tuple[int, int]]:
        stamp = self.timestamp
        exit_only = all(event.exit_only for event in self.events)  # after any rank's own error, before consequences
        return (
            (1 if exit_only else 0) if self.role == "cause" else 2,
            stamp if stamp is not None else math.inf,
            min(e.order for e in self.events),
        )

    def evidence(self) -> list[str]:
        lines = []
        for event in self.events[:MAX_EVIDENCE]:
            where = f"rank {event.rank}, " if event.rank is not None else ""
            lines.append(f"{where}{event.source}:{event.line}: {event.text}")
        if self.count > MAX_EVIDENCE:
            lines.append(f"... and {self.count - MAX_EVIDENCE} more")
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
            "seen": self.count,
            "level": "first" if self.signature is UNKNOWN_EXCEPTION else self.signature.level,
        }
        if self.probe:
            data["probe"] = self.probe
        return data


@dataclass(frozen=True, slots=True)
class Report:
    """What ``explain`` found: the failures, first one first, and what was read."""

    failures: tuple[Failure, ...]
    places: tuple[tuple[str, int], ...]
    windows: tuple[tuple[str, int], ...] = ()
    """The places of which only the end was read, and the line their part starts at."""
    skipped: tuple[tuple[str, str], ...] = ()
    """Files of a folder not read, and why."""

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

    @property
    def level(self) -> str:
        """How much explain can say, always one: ``cause`` (the first failure's cause is known), ``category`` (its
        family, with the causes the log cannot tell apart), ``first`` (only the first failure: its rank, exception and
        line), or ``nothing`` (no failure in what was read)."""
        first = self.first
        if first is None:
            return "nothing"
        if first.signature is UNKNOWN_EXCEPTION:
            return "first"
        return first.signature.level

    def as_dict(self) -> dict[str, Any]:
        starts = dict(self.windows)
        read: list[dict[str, Any]] = []
        for path, lines in self.places:
            read.append({"path": path, "lines": lines})
            if path in starts:
                read[-1]["read_from_line"] = starts[path]
        data: dict[str, Any] = {
            "level": self.level, "failures": [failure.as_dict() for failure in self.failures], "read": read
        }  # fmt: skip
        if self.skipped:
            data["skipped"] = [{"path": path, "why": why} for path, why in self.skipped]
        return data


def explain(paths: Sequence[str], stdin: TextIO | None = None, *, probe: bool = False) -> Report:
    """Read ``paths`` (files, folders, ``-``) and explain the failures in them; ``probe``: also look at this machine
    (only meaningful when the logs come from it). One place is held at a time: its events are kept, its text is not."""
    events: list[Event] = []
    counts: list[tuple[str, int]] = []
    windows: list[tuple[str, int]] = []
    skipped: list[tuple[str, str]] = []
    failures: dict[tuple[str, str], Failure] = {}
    for order, place in enumerate(places(paths, stdin, skipped)):
        counts.append((place.name, place.lines))
        if place.first_line > 1:
            windows.append((place.name, place.first_line))
        for stream in place.streams(order):
            events.extend(_events(stream))
        events = _collect(events, failures)
    return _report(failures, events, probe, tuple(counts), tuple(windows), tuple(skipped))


def analyse(what: Read, *, probe: bool = False) -> Report:
    events: list[Event] = []
    failures: dict[tuple[str, str], Failure] = {}
    for stream in what.streams:
        events.extend(_events(stream))
    events = _collect(events, failures)
    return _report(failures, events, probe, what.places, what.windows, what.skipped)


def _collect(events: list[Event], failures: dict[tuple[str, str], Failure]) -> list[Event]:
    """Events grouped into failures, except the host-OOM ones, which wait for every rank's traceback to be known."""
    waiting = []
    for event in events:
        if event.signature is HOST_OUT_OF_MEMORY or event.exit_only:
            waiting.append(event)
            continue
        key = (event.signature.code, _family(event.cause) if event.signature is UNKNOWN_EXCEPTION else "")
        failures.setdefault(key, Failure(event.signature, event.cause)).add(event)
    return waiting


_NUMBERS = re.compile(r"0x[0-9a-fA-F]+|\d+")


def _family(cause: str) -> str:
    """An unrecognised exception's message with its numbers taken out: one failure repeated with another step or
    address each time is one failure."""
    return _NUMBERS.sub("#", cause)


def _report(
    failures: dict[tuple[str, str], Failure], waiting: list[Event], probe: bool,
    places: tuple[tuple[str, int], ...], windows: tuple[tuple[str, int], ...], skipped: tuple[tuple[str, str], ...],
) -> Report:  # fmt: skip
    explained = {
        rank for f in failures.values() if f.signature.role == "cause" for rank in f.ranks
    }  # a rank whose own traceback is known was not killed by the host without a word
    for event in waiting:
        if event.rank is None or event.rank not in explained:
            key = (event.signature.code, _family(event.cause) if event.exit_only else "")
            failures.setdefault(key, Failure(event.signature, event.cause)).add(event)
    ordered = sorted(failures.values(), key=Failure.sort_key)
    unknown = [failure for failure in ordered if failure.signature is UNKNOWN_EXCEPTION]
    if len(unknown) > MAX_UNKNOWN:
        rest = unknown[MAX_UNKNOWN:]
        ordered = [failure for failure in ordered if all(failure is not other for other in rest)]
        more = Failure(UNKNOWN_EXCEPTION, UNKNOWN_EXCEPTION.describe(
            {"exception": f"{len(rest)} more unrecognised exceptions (first: {rest[0].events[0].text})"}))  # fmt: skip
        for failure in rest:
            for event in failure.events[:MAX_EVIDENCE]:
                more.add(event)
            more.seen += failure.count - min(len(failure.events), MAX_EVIDENCE)
            more.ranks_seen |= set(failure.ranks)
        ordered.append(more)
    for failure in ordered:
        failure.events.sort(key=lambda e: (e.timestamp if e.timestamp is not None else math.inf, e.order))
        if probe:
            failure.probe = run_probe(failure.signature.probe, "\n".join(e.matched for e in failure.events[:20]))
    if ordered:
        ordered[0].first = True
    return Report(failures=tuple(ordered), places=places, windows=windows, skipped=skipped)


def _events(stream: Stream) -> list[Event]:
    skip = [] if stream.summary else summary_spans(stream)
    found = [m for m in matches(stream.text, SIGNATURES) if not _inside(m.start, skip)]
    starts = [m.start for m in found]  # in order
    pending = [(m.signature, m.cause, m.start, m.line, m.line, False) for m in found]
    tracebacks = _exceptions(stream.text)
    walked = [(start, end + len(line)) for start, end, line in tracebacks]
    lone = [(end, end, line) for end, line in _lone_exceptions(stream.text) if not _within(end, walked)]
    for start, end, exception in sorted([*tracebacks, *lone]):
        if _inside(start, skip) or _LAUNCHER.search(exception.partition(":")[0]):
            continue
        at = bisect.bisect_left(starts, start - (_COVER if start == end else 0))
        if at < len(starts) and starts[at] <= end + _COVER:
            continue
        cause = UNKNOWN_EXCEPTION.describe({"exception": exception})
        pending.append((UNKNOWN_EXCEPTION, cause, end, exception, exception, False))
    if not tracebacks and not lone:
        for offset, code, rank, line in _exits(stream):
            if any(m.signature.role == "cause" and abs(m.start - offset) <= _COVER for m in found):
                continue  # a SIGKILL line, read by its signature
            said = f"rank {rank}" if rank is not None else "a rank"
            cause = UNKNOWN_EXCEPTION.describe(
                {"exception": f"{said} exited with exit code {code}; its own error is not in what was read"}
            )
            pending.append((UNKNOWN_EXCEPTION, cause, offset, line, line, True))
    numbers = stream.lines_of([each[2] for each in pending])
    return [_event(stream, *each, number) for each, number in zip(pending, numbers, strict=True)]


def _inside(offset: int, spans: list[tuple[int, int]]) -> bool:
    return any(a <= offset < b for a, b in spans)


def _within(offset: int, spans: list[tuple[int, int]]) -> bool:
    """``offset`` is inside one of ``spans`` (sorted, not overlapping): a bisection, not a scan."""
    at = bisect.bisect_right(spans, (offset, math.inf)) - 1
    return at >= 0 and spans[at][0] <= offset <= spans[at][1]


_LONE = re.compile(r"[ \t]*(?P<line>(?:[A-Za-z_]\w{0,80}\.){0,8}[A-Z]\w{0,80}(?:Error|Exception)(?::[^\n]*)?)[ \t]*$")
"""A line that is an exception and nothing else (``RuntimeError: CUDA error: ...``): a failure pasted without its
traceback, or printed by a handler."""


def _lone_exceptions(text: str) -> Iterator[tuple[int, str]]:
    """Each line that is an exception on its own (found from the words ``Error``/``Exception`` with ``str.find``)."""
    for word in ("Error", "Exception"):
        at = text.find(word)
        while at >= 0:
            begin = text.rfind("\n", 0, at) + 1
            stop = text.find("\n", at)
            stop = len(text) if stop < 0 else stop
            if stop - begin <= 2000 and (found := _LONE.match(text, begin, stop)) is not None:
                yield found.start("line"), found.group("line")[:300]
            at = text.find(word, stop)


_FAILED_EXIT = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<rank>\d+)")
_SUMMARY_EXIT = re.compile(r"exitcode\s*:\s*(?P<code>-?\d+)")
_NOT_A_FAILURE = ("0", "-15", "-2", "-9")
"""Exit codes that are not a rank's own failure: success, the SIGTERM/SIGINT the launcher sends the other ranks once
one failed, and SIGKILL (read by its own signature, LP060)."""


def _exits(stream: Stream) -> Iterator[tuple[int, str, int | None, str]]:
    """Where the launcher says a rank exited with an error code: (offset, code, rank, line)."""
    if stream.summary:
        found = _SUMMARY_EXIT.search(stream.text)
        if found and found.group("code") not in _NOT_A_FAILURE:
            yield found.start(), found.group("code"), stream.rank, found.group(0)
        return
    at = stream.text.find("failed (exitcode: ")
    while at >= 0:
        found = _FAILED_EXIT.match(stream.text, at)
        if found and found.group("code") not in _NOT_A_FAILURE:
            yield at, found.group("code"), int(found.group("rank")), found.group(0)
        at = stream.text.find("failed (exitcode: ", at + 1)


def _event(
    stream: Stream, signature: Signature, cause: str, offset: int, line: str, matched: str, exit_only: bool,
    number: int,
) -> Event:  # fmt: skip
    cause, line, matched = text_of(cause), text_of(line), text_of(matched)
    rank = stream.rank
    if rank is None and (named := _LINE_RANK.search(line)):
        rank = int(named.group("rank") or named.group("local"))
    return Event(signature, cause, rank, stream.source, number, line[:300], stream.timestamp, (stream.order, number),
                 matched, exit_only)  # fmt: skip


_TRACEBACK_LINE = re.compile(r"[ \t]*Traceback \(most recent call last\):[ \t]*$", re.MULTILINE | re.IGNORECASE)


def _traceback_heads(text: str) -> Iterator[re.Match[str]]:
    """Each line that is a traceback's head (found with ``str.find``, then checked)."""
    heads = []
    for head in (_TRACEBACK, _TRACEBACK.lower()):  # as printed, and as pasted lower-cased
        at = text.find(head)
        while at >= 0:
            heads.append(at)
            at = text.find(head, at + len(head))
    for at in sorted(heads):
        begin = text.rfind("\n", 0, at) + 1
        found = _TRACEBACK_LINE.match(text, begin)
        if found:
            yield found


def _exceptions(text: str) -> list[tuple[int, int, str]]:
    """Each traceback (chained ones together) as (start, offset of its exception line, the exception line): only the
    lines from each traceback's head to its exception are walked."""
    found: list[tuple[int, int, str]] = []
    resume = 0
    for head in _traceback_heads(text):
        if head.start() < resume:
            continue  # a chained traceback already walked
        start = head.start()
        base = len(head.group(0)) - len(head.group(0).lstrip())
        position, last = head.end() + 1, None
        while position <= len(text):
            stop = text.find("\n", position)
            stop = len(text) if stop < 0 else stop
            line = text[position:stop]
            following = stop + 1
            indent = len(line) - len(line.lstrip())
            stripped = line.strip()
            if not stripped or indent > base or stripped.lower() == _TRACEBACK.lower() or _chained(stripped):
                position = following
                continue
            if _EXCEPTION_LINE.match(stripped):
                last = (position, stripped)
                if _chained_after(text, following):
                    position = following
                    continue  # the chain goes on: its last exception is the one raised
            break
        resume = position
        if last is not None:
            found.append((start, last[0], last[1][:300]))
    return found


def _chained(line: str) -> bool:
    return line.lower().startswith(_CHAINED_LOWER)


def _chained_after(text: str, position: int) -> bool:
    """The first non-blank of the next three lines starts a chained exception's message."""
    for _ in range(3):
        if position >= len(text):
            return False
        stop = text.find("\n", position)
        stop = len(text) if stop < 0 else stop
        stripped = text[position:stop].strip()
        if stripped:
            return _chained(stripped)
        position = stop + 1
    return False
