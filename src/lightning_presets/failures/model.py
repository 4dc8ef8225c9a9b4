"""What a failure signature is, and how a text is matched against the signatures.

A :class:`Signature` is a :class:`~lightning_presets.core.codes.Code` (so it is documented and listed like every other
code) with the regular expression that recognises the failure in a log or an exception's message, the category, the
cause in a sentence, the fix, the machine probe that decides between causes (:mod:`.probes`) and the public thread the
error text comes from. ``explain`` (``lightning_presets.tools.explain``) applies the signatures to a failed run's
logs; :mod:`.notes` applies them to an exception at the moment it is raised inside a preset's run.
"""

from __future__ import annotations

import functools
import re
import string
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from lightning_presets.core.codes import Code

CATEGORIES = (
    "nccl_network",
    "nccl_shm",
    "gloo_network",
    "rendezvous_env",
    "rendezvous_port",
    "rank_world_mismatch",
    "process_group_missing",
    "collective_desync",
    "device_mapping",
    "fork_cuda",
    "ddp_reducer",
    "fsdp_first_step",
    "deepspeed_first_step",
    "tp_first_step",
    "oom_config",
    "host_oom",
    "checkpoint",
    "import_abi",
    "optional_dep_build",
    "version_skew",
    "accelerator_limit",
    "dataloader_workers",
    "numerics",
    "driver_version",
    "device_busy",
    "unknown",
)
"""Every category a failure can have (``explain --json``'s ``category``; ``explain --help`` lists them)."""

Level = Literal["cause", "category"]
"""What a signature's match tells: ``cause``, the cause itself; ``category``, the family of the failure, the cause
among several that the log alone cannot tell apart (the signature's ``cause`` then names them)."""

Role = Literal["cause", "consequence"]
"""``cause``: the failure itself. ``consequence``: what a rank reports because another rank failed first (a
collective that timed out, a peer that closed its connection); the first failure is a cause whenever one was seen."""


def words(phrase: str) -> str:
    """A pattern for ``phrase`` as a terminal may wrap it: its words in order, any whitespace between them."""
    return r"\s+".join(re.escape(word) for word in phrase.split())


def _example(quote: str, pattern: str, flags: int) -> str:
    """The line of the quote that the pattern matches, cut to about 160 characters around the match."""
    found = re.compile(pattern, re.MULTILINE | flags).search(quote)
    at = found.start() if found else 0
    begin = quote.rfind("\n", 0, at) + 1
    end = quote.find("\n", at)
    line = quote[begin : end if end >= 0 else len(quote)]
    offset = at - begin
    if len(line) <= 160:
        return line.strip()
    start = max(0, min(offset - 40, len(line) - 157))
    return ("..." if start else "") + line[start : start + 157].strip() + "..."


@dataclass(frozen=True, slots=True, kw_only=True)
class Signature(Code):
    """One known failure: its code (documented like every code), pattern, category, cause, fix, probe and source."""

    category: str
    """One of :data:`CATEGORIES`."""
    pattern: str
    """A regular expression (``re.MULTILINE``, ``re.IGNORECASE``: a paste may come lower-cased) searched in the text;
    named groups fill ``{name}`` in ``cause``."""
    cause: str
    """The cause in one sentence; ``{group}`` placeholders take the pattern's named groups."""
    fix: str
    """The fix: a command or a one-line change."""
    source: str
    """The public thread the error text comes from (or the CPU reproduction that produced it)."""
    quote: str
    """The error text as the thread (or the reproduction) shows it; the tests match it."""
    probe: str | None = None
    """The name of a probe in :data:`.probes.PROBES` that looks at this machine where it decides the cause."""
    role: Role = "cause"
    level: Level = "cause"
    """How much a match tells (:data:`Level`)."""
    supersedes: tuple[Code, ...] = ()
    """Less specific signatures that the same failure also matches: dropped where this one matched too."""
    flags: int = 0
    """Extra ``re`` flags."""
    needles: tuple[str, ...] = ()
    """Lower-case words of which every match contains one (on its line or the next): the pattern is tried only
    around them (a log of millions of lines is searched with ``str.find``, not with 30 regular expressions). Empty:
    the pattern is tried on the whole text."""
    severity: Literal["error", "warning"] = "warning"
    stage: str = "explain"
    fails: str = ""
    fixed: str = ""

    def __post_init__(self) -> None:
        if not self.fails:
            object.__setattr__(
                self,
                "fails",
                f"lightning-presets explain run.log   # run.log: {_example(self.quote, self.pattern, self.flags)}",
            )
        if not self.fixed:
            object.__setattr__(self, "fixed", f"{self.fix}   # then the run's log has no such error")

    def regex(self) -> re.Pattern[str]:
        return _compiled(self.pattern, self.flags)

    def describe(self, groups: Mapping[str, str | None]) -> str:
        """The cause, with the pattern's named groups filled in (``?`` for a group that did not match)."""
        return string.Formatter().vformat(self.cause, (), _Groups(groups))


class _Groups(dict[str, str]):
    def __init__(self, groups: Mapping[str, str | None]) -> None:
        super().__init__({key: value for key, value in groups.items() if value is not None})
        for key, value in list(self.items()):  # `port_b`: the same value as `port`, where another alternative matched
            if key.endswith("_b"):
                self.setdefault(key[:-2], value)

    def __missing__(self, key: str) -> str:
        return "?"


@functools.lru_cache(maxsize=256)
def _compiled(pattern: str, flags: int) -> re.Pattern[str]:
    return re.compile(pattern, re.MULTILINE | re.IGNORECASE | flags)  # a paste may come lower-cased


@dataclass(frozen=True, slots=True)
class Match:
    """Where a signature matched a text: the character span, the matched line and the pattern's named groups."""

    signature: Signature
    start: int
    end: int
    line: str
    groups: Mapping[str, str | None] = field(default_factory=dict)

    @property
    def cause(self) -> str:
        return self.signature.describe(self.groups)


SPAN = 2048
"""How far after a needle a match may end (a message wrapped over a few lines)."""
REACH = 4096
"""How far back the window around a needle goes for its line's start (and its previous line's)."""


def matches(text: str, signatures: Iterable[Signature]) -> list[Match]:
    """Every place a signature matches ``text``, in text order; a signature superseded by another that matched the
    same text is left out."""
    lower = text.lower()
    if len(lower) != len(text):  # a character whose lower case is longer: offsets would not line up
        lower = ""
    found: list[Match] = []
    for each in signatures:
        found.extend(_matches_of(each, text, lower))
    present = {id(m.signature) for m in found}
    dropped = {id(other) for m in found for other in m.signature.supersedes if id(m.signature) in present}
    kept = [m for m in found if id(m.signature) not in dropped]
    return sorted(kept, key=lambda m: (m.start, m.end))


def windows(text: str, lower: str, needles: Iterable[str]) -> list[tuple[int, int]]:
    """The parts of ``text`` around each needle (from the start of the line before it to ``SPAN`` characters after
    it), merged where they overlap, in order: time linear in the text, however many needles it holds."""
    spans: list[tuple[int, int]] = []
    for needle in needles:
        end = -1
        at = lower.find(needle)
        while at >= 0:
            stop = at + len(needle) + SPAN
            newline = text.find("\n", stop, stop + REACH)
            stop = newline if newline >= 0 else min(len(text), stop + REACH)
            if at > end:  # a new window: back to the start of the previous line (within reach)
                floor = max(0, at - REACH)
                newline = text.rfind("\n", floor, at)
                previous = text.rfind("\n", floor, newline) if newline >= 0 else -1
                spans.append((previous + 1 if previous >= 0 else floor, stop))
            else:
                spans[-1] = (spans[-1][0], max(spans[-1][1], stop))
            end = spans[-1][1]
            at = lower.find(needle, max(at + 1, end - SPAN))
    spans.sort()
    merged: list[tuple[int, int]] = []
    for begin, stop in spans:
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], stop))
        else:
            merged.append((begin, stop))
    return merged


def _matches_of(signature: Signature, text: str, lower: str = "") -> Iterator[Match]:
    regex = signature.regex()
    parts = windows(text, lower, signature.needles) if signature.needles and lower else [(0, len(text))]
    for begin, stop in parts:
        for found in regex.finditer(text, begin, stop):
            start = found.start()
            newline = text.rfind("\n", max(0, start - REACH), start)
            line_begin = newline + 1 if newline >= 0 else max(0, start - REACH)
            newline = text.find("\n", start, start + REACH)
            line = text[line_begin : newline if newline >= 0 else min(len(text), start + REACH)]
            yield Match(signature, start, found.end(), line.strip(), found.groupdict())
