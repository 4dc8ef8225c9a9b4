"""Every failure signature (and the exception note built from them) takes time linear in the text: adversarial lines
(each signature's own prefixes repeated, long runs of each character class it uses) are timed at two sizes in the same
run, and the larger may cost only about its size ratio more than the smaller, never its square."""

from __future__ import annotations

import gc
import re
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from lightning_presets.failures import notes
from lightning_presets.failures.model import _matches_of
from lightning_presets.failures.probes import PROBES
from lightning_presets.failures.signatures import SIGNATURES, Signature

try:  # Python 3.11+
    from re import _constants as sre_constants
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

SMALL, LARGE = 1_500, 6_000
"""Adversarial line lengths: linear time grows 4x between them, quadratic time 16x."""
MAX_RATIO = 10.0
"""The most the large lines may cost over the small ones (the linear 4x with room for a loaded machine's noise)."""
_CLASS = {
    sre_constants.CATEGORY_DIGIT: "7", sre_constants.CATEGORY_NOT_DIGIT: "a", sre_constants.CATEGORY_WORD: "a",
    sre_constants.CATEGORY_NOT_WORD: " ", sre_constants.CATEGORY_SPACE: " ", sre_constants.CATEGORY_NOT_SPACE: "a",
}  # fmt: skip


def _one_of(items: Any) -> str:
    """A character of a class ``[...]`` (one not in it for ``[^...]``)."""
    if items and items[0][0] is sre_constants.NEGATE:
        rest = items[1:]
        return next(c for c in "a0 x/_.:-Z" if not _in(c, rest))
    for op, value in items:
        if op is sre_constants.LITERAL:
            return chr(value)
        if op is sre_constants.RANGE:
            return chr(value[0])
        if op is sre_constants.CATEGORY:
            return _CLASS.get(value, "a")
    return "a"


def _in(char: str, items: Any) -> bool:
    return re.fullmatch(f"[{''.join(_char_class_text(items))}]", char) is not None


def _char_class_text(items: Any) -> Iterator[str]:
    for op, value in items:
        if op is sre_constants.LITERAL:
            yield re.escape(chr(value))
        elif op is sre_constants.RANGE:
            yield f"{re.escape(chr(value[0]))}-{re.escape(chr(value[1]))}"
        elif op is sre_constants.CATEGORY:
            yield {"7": r"\d", " ": r"\s"}.get(_CLASS.get(value, ""), r"\w")


def _samples(sequence: Any, limit: int = 4) -> tuple[list[str], list[str]]:
    """Strings the (parsed) pattern matches, and their prefixes at each element's boundary."""
    out, prefixes = [""], []
    for op, value in sequence:
        if op is not sre_constants.LITERAL:  # where a literal run ends and something that may repeat begins
            prefixes += out
        if op is sre_constants.LITERAL:
            options = [chr(value)]
        elif op is sre_constants.NOT_LITERAL:
            options = ["b" if value == ord("a") else "a"]
        elif op is sre_constants.ANY:
            options = ["a"]
        elif op is sre_constants.IN:
            options = [_one_of(value)]
        elif op is sre_constants.CATEGORY:
            options = [_CLASS.get(value, "a")]
        elif op is sre_constants.BRANCH:
            options, rest, more = [], [], []
            for branch in value[1]:
                whole, inner = _samples(branch, limit)
                options.append(whole[0])  # every alternative is kept
                rest += whole[1:]
                more += inner
            options += rest
            prefixes += [out[0] + tail for tail in more]
        elif op is sre_constants.SUBPATTERN:
            options, inner = _samples(value[-1], limit)
            prefixes += [out[0] + tail for tail in inner]
        elif op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
            inner_whole, _ = _samples(value[2], limit)
            options = [each * max(1, min(value[0], 3)) for each in inner_whole]
        else:  # anchors, look-arounds, group references: no text of their own
            options = [""]
        out = [head + tail for head in out for tail in options][: max(limit, len(options))]
        if op is not sre_constants.LITERAL:
            prefixes += out
    return out, prefixes


def adversarial_pieces(pattern: str) -> list[str]:
    """What a line made of one piece repeated is built from: every prefix of the pattern's own matches (at each
    element's boundary) and each single character the pattern's classes take."""
    whole, prefixes = _samples(sre_parse.parse(pattern).data)
    pieces = {piece for piece in [*whole, *prefixes] if piece.strip()}
    pieces |= {piece + " " for piece in list(pieces)}
    pieces |= set("a0 _.:/[(-\t") | {"deadbeef", "a.", "a:"}
    return sorted(pieces)


def _line(piece: str, size: int) -> str:
    return (piece * (size // len(piece) + 1))[:size]


def _cost(run: Callable[[str], object], text: str) -> float:
    start = time.perf_counter()
    run(text)
    return time.perf_counter() - start


def _ratio(run: Callable[[str], object], pieces: list[str], repeats: int = 5) -> float:
    """The cost of the large lines over the cost of the small ones: each line's least time, measured in turns with
    its small twin (a load spike on a shared machine hits both sizes alike), one line at a time (all in the cache)."""
    small = large = 0.0
    gc.disable()  # a collection of the test process's whole heap is no part of the cost
    try:
        for piece in pieces:
            short, long = _line(piece, SMALL), _line(piece, LARGE)
            costs = [(_cost(run, short), _cost(run, long)) for _ in range(repeats)]
            small += min(cost for cost, _ in costs)
            large += min(cost for _, cost in costs)
    finally:
        gc.enable()
    return large / max(small, 1e-6)


def test_the_adversarial_lines_reach_a_quadratic_pattern() -> None:
    """The generator itself: the pattern LP058 had (a name run before the phrase) is caught as quadratic."""
    quadratic = re.compile(r"(?P<op>[\w.]+):? got mixed torch\.Tensor and DTensor", re.IGNORECASE)
    pieces = adversarial_pieces(quadratic.pattern)
    assert "deadbeef" in pieces
    assert _ratio(lambda text: list(quadratic.finditer(text)), ["deadbeef"], repeats=3) > MAX_RATIO


@pytest.mark.parametrize("signature", SIGNATURES, ids=lambda signature: signature.code)
def test_every_signature_is_linear_on_adversarial_lines(signature: Signature) -> None:
    regex = signature.regex()
    ratio = _ratio(lambda text: deque(regex.finditer(text), maxlen=0), adversarial_pieces(signature.pattern))
    assert ratio < MAX_RATIO, f"{signature.code}: {LARGE // SMALL}x the text cost {ratio:.0f}x the time"


def test_every_probe_reading_the_text_is_linear() -> None:
    from lightning_presets.failures.probes import _LIBRARY

    pieces = adversarial_pieces(_LIBRARY.pattern)
    assert _ratio(lambda text: _LIBRARY.search(text), pieces) < MAX_RATIO
    assert "extension_build" in PROBES


def test_the_exception_note_costs_linear_time_on_a_long_message() -> None:
    """Issue 38: a ValueError of 60,000 hex characters took 7.8 s to annotate; now its cost grows with its length."""

    def annotate(text: str) -> None:
        notes.annotate(ValueError("unexpected key in batch: " + text))

    pieces = ["deadbeef", "a", " ", "got mixed ", "NCCL error ", "Watchdog caught collective operation timeout: "]
    assert _ratio(annotate, pieces) < MAX_RATIO
    annotate("")  # the signatures load on first use, not in the timing
    gc.disable()
    try:  # the message, 60,000 characters, against one of 600: the note reads a bounded part of it
        costs = [(_cost(annotate, "deadbeef" * 75), _cost(annotate, "deadbeef" * 7500)) for _ in range(5)]
    finally:
        gc.enable()
    assert min(long for _, long in costs) < 20 * min(short for short, _ in costs)


def _every_log_text() -> Iterator[str]:
    root = Path(__file__).resolve().parents[1]
    for folder in (root / "tests" / "explain_logs", root / "benchmarks" / "explain_heldout"):
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.suffix != ".json":
                yield path.read_text(encoding="utf-8", errors="replace")
    for signature in SIGNATURES:
        yield signature.quote
        whole, _ = _samples(sre_parse.parse(signature.pattern).data)
        yield from whole


def test_the_needles_find_every_match_the_whole_pattern_finds() -> None:
    """A signature is tried only around its needles: on every log, quote and generated match, that finds what the
    pattern finds on the whole text (and each generated match holds one of its signature's needles)."""
    for text in _every_log_text():
        lower = text.lower()
        for signature in SIGNATURES:
            fast = [(m.start, m.end, m.line) for m in _matches_of(signature, text, lower)]
            whole = [(m.start, m.end, m.line) for m in _matches_of(signature, text)]
            assert fast == whole, (signature.code, text[:200])
    for signature in SIGNATURES:
        assert signature.needles, signature.code
        for sample in _samples(sre_parse.parse(signature.pattern).data)[0]:
            for found in signature.regex().finditer(sample):
                assert any(needle in found.group(0).lower() for needle in signature.needles), (signature.code, sample)
