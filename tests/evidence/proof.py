"""Executed proofs that an error code's configuration fails: what ``tests/evidence/`` records and checks.

An evidence test carries ``@pytest.mark.proves("LPxxx", ...)`` and takes the ``proof`` fixture. It records what it
observed: an exception raised by code that is not this repository's (Lightning, torch, DeepSpeed, the standard
library, a third party's package), a hang, or a value the libraries produced that contradicts the configuration.
A marked test that observed nothing for one of its codes fails (``conftest.py``), however it ends: an evidence test
that asserts nothing cannot pass. A failure observed with a guard switched off (``LIGHTNING_PRESETS_SKIP``) counts
only when the same test showed that guard refusing the configuration first.

Child processes report their failures as ``PROOF {json}`` lines (:func:`report`), checked the same way.
"""

from __future__ import annotations

import json
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _installed() -> tuple[Path, ...]:
    """Where the package under test is imported from: the checkout's ``src`` (an editable install) or the
    environment's site-packages (``pip install .``, as CI installs it), its top-level hook modules included."""
    import importlib.util

    found = []
    for name in ("lightning_presets", "_lightning_presets_autoload", "lightning_presets_pytest"):
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.origin:
            origin = Path(spec.origin).resolve()
            found.append(origin.parent if origin.name == "__init__.py" else origin)
    return tuple(found)


OURS = (ROOT / "src", ROOT / "tests", *_installed())
"""Code whose exceptions prove nothing: the package under test (wherever it is installed) and the tests."""
SKIP_VARIABLE = "LIGHTNING_PRESETS_SKIP"
PREFIX = "PROOF "
_CODE = re.compile(r"^LP\d{3}$")


def is_ours(filename: str) -> bool:
    if not os.path.isabs(filename):  # "<frozen importlib._bootstrap>", "<string>": the interpreter's own
        return False
    path = Path(filename).resolve()
    return any(path.is_relative_to(ours) for ours in OURS)


def origin(error: BaseException) -> str:
    """``file:line`` of the innermost frame ``error`` went through: where it was raised."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "<no traceback>"
    return f"{frames[-1].filename}:{frames[-1].lineno}"


def _filename(where: str) -> str:
    return where.rsplit(":", 1)[0]


def short(where: str) -> str:
    """``where`` from its package on (``lightning/fabric/strategies/model_parallel.py:514``)."""
    for marker in ("site-packages/", "dist-packages/", "/lib/python3."):
        if marker in where:
            tail = where.split(marker, 1)[1]
            return tail.split("/", 1)[1] if marker.startswith("/lib") else tail
    return where


@dataclass(frozen=True, slots=True)
class Observation:
    """One observed failure, attributed to the codes it proves."""

    codes: tuple[str, ...]
    kind: str
    """``raised`` (an exception from code that is not ours), ``hung`` or ``wrong`` (a contradicting value)."""
    detail: str
    guard_off: bool
    """Whether it was observed with the codes' guards switched off (then the guards must have fired too)."""


@dataclass(slots=True)
class Proof:
    """What one evidence test observed (the ``proof`` fixture)."""

    monkeypatch: pytest.MonkeyPatch
    observations: list[Observation] = field(default_factory=list)
    refusals: set[str] = field(default_factory=set)
    _off: tuple[str, ...] = ()

    def refused(self, code: str, build: Callable[[], object]) -> None:
        """With every guard on, ``build()`` raises ``PresetConfigError`` naming ``code``: this is its configuration."""
        from lightning_presets import PresetConfigError

        self.monkeypatch.delenv(SKIP_VARIABLE, raising=False)
        with pytest.raises(PresetConfigError) as refused:
            build()
        assert code in refused.value.codes, f"{code} did not refuse the configuration: {refused.value.codes}"
        self.refusals.add(code)

    def refused_in_children(self, code: str, refusals: list[list[str]], ranks: int) -> None:
        """Each of ``ranks`` child processes, every guard on, raised ``PresetConfigError`` naming ``code`` (the codes
        each printed): the guard that refuses at a call inside the job, not at construction."""
        assert len(refusals) == ranks, f"{len(refusals)} of {ranks} ranks refused: {refusals}"
        assert all(code in codes for codes in refusals), f"{code} did not refuse on every rank: {refusals}"
        self.refusals.add(code)

    @contextmanager
    def guard_off(self, *codes: str) -> Iterator[None]:
        """``LIGHTNING_PRESETS_SKIP`` names ``codes`` inside the block."""
        assert codes, "name the codes whose guards go off"
        assert all(_CODE.match(code) for code in codes), codes
        self.monkeypatch.setenv(SKIP_VARIABLE, ",".join(codes))
        self._off = codes
        try:
            yield
        finally:
            self._off = ()
            self.monkeypatch.delenv(SKIP_VARIABLE, raising=False)

    def _codes(self, code: str | tuple[str, ...] | None) -> tuple[str, ...]:
        codes = (code,) if isinstance(code, str) else (code or self._off)
        assert codes, "say which code this proves: inside guard_off(...) or with code="
        return codes

    @contextmanager
    def raises(
        self, kind: type[BaseException], match: str, *, code: str | tuple[str, ...] | None = None
    ) -> Iterator[None]:
        """The block raises ``kind`` with a message matching ``match``, from code that is not ours."""
        codes = self._codes(code)
        guard_off = bool(self._off)
        try:
            yield
        except kind as error:
            self.record_raised(codes, type(error).__name__, str(error), origin(error), match, guard_off=guard_off)
        else:
            pytest.fail(f"{', '.join(codes)}: the configuration did not fail (expected {kind.__name__}: {match})")

    def record_raised(
        self, codes: tuple[str, ...], name: str, message: str, where: str, match: str, *, guard_off: bool
    ) -> None:
        assert re.search(match, message), f"{name}: {message!r} does not match {match!r}"
        assert not is_ours(_filename(where)), f"{name} was raised by this repository's code ({where}), not a library's"
        detail = f"{name} at {short(where)}: {message.strip().splitlines()[0][:200] if message.strip() else ''}"
        self.observations.append(Observation(codes, "raised", detail, guard_off))

    def wrong(self, what: str, expected: Any, observed: Any, *, code: str | tuple[str, ...] | None = None) -> None:
        """The libraries produced ``observed`` where the configuration asks for ``expected``."""
        codes = self._codes(code)
        assert observed != expected, f"{what}: observed {observed!r} as the configuration asks: nothing wrong"
        detail = f"{what}: expected {expected!r}, observed {observed!r}"
        self.observations.append(Observation(codes, "wrong", detail, bool(self._off)))

    def child(self, reports: list[dict[str, Any]], scenario: str, kind: str, match: str, *, code: str) -> None:
        """A child process reported ``scenario`` failing with ``kind`` (an exception name) matching ``match``."""
        found = [each for each in reports if each.get("scenario") == scenario]
        assert found, f"no PROOF line for {scenario!r}: {reports}"
        for each in found:
            assert each.get("error") == kind, f"{scenario}: {each}"
            self.record_raised((code,), kind, each["message"], each["origin"], match, guard_off=each["guard_off"])


def unproven(codes: tuple[str, ...], proof: Proof | None) -> list[str]:
    """Why a test marked ``proves(*codes)`` does not prove them; empty when it does."""
    if proof is None:
        return [f"{', '.join(codes)}: the test does not take the `proof` fixture, so it observed nothing"]
    problems = []
    for code in codes:
        seen = [each for each in proof.observations if code in each.codes]
        if not seen:
            problems.append(f"{code}: no failure observed")
        elif all(each.guard_off for each in seen) and code not in proof.refusals:
            problems.append(f"{code}: observed with its guard off, but the guard was never shown to refuse it")
    return problems


# --- child processes ------------------------------------------------------------------------------------------


def report(scenario: str, error: BaseException) -> None:
    """In a child process: print what ``error`` was and where it came from, as one ``PROOF`` line."""
    guard_off = bool(os.environ.get(SKIP_VARIABLE))
    payload = {"scenario": scenario, "error": type(error).__name__, "message": str(error), "origin": origin(error),
               "guard_off": guard_off}  # fmt: skip
    sys.stdout.write(PREFIX + json.dumps(payload) + "\n")
    sys.stdout.flush()


def reports(output: str) -> list[dict[str, Any]]:
    """The ``PROOF`` lines of a child's output (found anywhere in a line: a message another library wrote to the
    same stream without its newline can stand before one)."""
    return [json.loads(line[line.index(PREFIX) + len(PREFIX) :]) for line in output.splitlines() if PREFIX in line]
