"""The proof mechanism can fail: a test that observes nothing, a failure raised by our own code, a guard switched off
without being shown to fire, a run that does not fail."""

from __future__ import annotations

import pytest
from proof import Observation, Proof, is_ours, origin, reports, unproven

from lightning_presets import PresetConfigError


def _proof(monkeypatch: pytest.MonkeyPatch) -> Proof:
    return Proof(monkeypatch)


def test_a_test_that_observed_nothing_proves_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert unproven(("LP201",), _proof(monkeypatch)) == ["LP201: no failure observed"]
    assert "does not take the `proof` fixture" in unproven(("LP201",), None)[0]


def test_an_exception_of_our_own_code_is_no_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    proof = _proof(monkeypatch)
    ours = pytest.raises(AssertionError, match="raised by this repository's code")
    with ours, proof.raises(ValueError, "mine", code="LP201"):
        raise ValueError("mine")  # raised here, in tests/: not a library's failure
    import lightning_presets

    ours = pytest.raises(AssertionError, match="raised by this repository's code")
    with ours, proof.raises(PresetConfigError, "LP010", code="LP010"):
        lightning_presets.strategy("no_such_preset")
    assert proof.observations == []


def test_a_configuration_that_does_not_fail_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    proof = _proof(monkeypatch)
    with pytest.raises(pytest.fail.Exception, match="did not fail"), proof.raises(ValueError, "", code="LP201"):
        int("3")


def test_a_library_exception_is_recorded_with_where_it_came_from(monkeypatch: pytest.MonkeyPatch) -> None:
    import enum
    import json

    proof = _proof(monkeypatch)
    with proof.raises(json.JSONDecodeError, "Expecting", code="LP201"):
        json.loads("{")  # raised in the standard library's json/decoder.py
    with proof.raises(KeyError, "NOPE", code="LP104"):
        enum.Enum("E", "A")["NOPE"]  # raised in enum.py
    assert [each.codes for each in proof.observations] == [("LP201",), ("LP104",)]
    assert "json/decoder.py" in proof.observations[0].detail
    assert "enum.py" in proof.observations[1].detail


def test_an_exception_with_no_frame_below_ours_is_no_proof(monkeypatch: pytest.MonkeyPatch) -> None:
    """A C function called from our code raises at our frame: the origin rule refuses it rather than guess."""
    proof = _proof(monkeypatch)
    ours = pytest.raises(AssertionError, match="raised by this repository's code")
    with ours, proof.raises(ValueError, "invalid literal", code="LP201"):
        int("three")
    with pytest.raises(ValueError, match="invalid literal") as raised:
        int("three")
    assert is_ours(origin(raised.value).rsplit(":", 1)[0])


def test_a_guard_switched_off_needs_the_guard_shown_to_fire(monkeypatch: pytest.MonkeyPatch) -> None:
    proof = _proof(monkeypatch)
    proof.observations.append(Observation(("LP201",), "raised", "RuntimeError at lightning", guard_off=True))
    assert unproven(("LP201",), proof) == [
        "LP201: observed with its guard off, but the guard was never shown to refuse it"
    ]
    proof.refusals.add("LP201")
    assert unproven(("LP201",), proof) == []


def test_wrong_needs_a_contradiction(monkeypatch: pytest.MonkeyPatch) -> None:
    proof = _proof(monkeypatch)
    with pytest.raises(AssertionError, match="nothing wrong"):
        proof.wrong("world size", 2, 2, code="LP707")
    proof.wrong("world size", 2, 1, code="LP707")
    assert unproven(("LP707",), proof) == []


def test_guard_off_sets_and_clears_the_skip_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    proof = _proof(monkeypatch)
    with proof.guard_off("LP201", "LP202"):
        assert os.environ["LIGHTNING_PRESETS_SKIP"] == "LP201,LP202"
    assert "LIGHTNING_PRESETS_SKIP" not in os.environ


def test_child_reports_are_parsed_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    line = (
        'PROOF {"scenario": "s", "error": "RuntimeError", "message": "boom", '
        '"origin": "/x/site-packages/torch/a.py:3", "guard_off": false}'
    )
    proof = _proof(monkeypatch)
    proof.child(reports("noise\n" + line + "\n"), "s", "RuntimeError", "boom", code="LP112")
    assert proof.observations[0].detail == "RuntimeError at torch/a.py:3: boom"
    ours = line.replace("/x/site-packages/torch/a.py", str(__file__))
    with pytest.raises(AssertionError, match="raised by this repository's code"):
        proof.child(reports(ours), "s", "RuntimeError", "boom", code="LP112")
