"""The package's environment variables say what they did (issue 27): a value one does not take is a warning naming
the accepted ones, and the rules ``LIGHTNING_PRESETS_SKIP`` switches off are listed by ``check`` and ``doctor``."""

from __future__ import annotations

import json
import warnings

import pytest

from helpers import run_cli
from lightning_presets import PresetWarning, _activate
from lightning_presets.core.environment import autoload_enabled, unknown_values
from lightning_presets.registry.variables import variable_findings


@pytest.mark.parametrize("value", ["disabled", "enable", "2", "none"])
def test_an_autoload_value_it_does_not_take_is_named_with_the_accepted_ones(value: str) -> None:
    """Before: ``disabled`` silently meant on. It still does (as the ``.pth`` line reads it), and says so."""
    env = {"LIGHTNING_PRESETS_AUTOLOAD": value}
    assert autoload_enabled(env) is True
    ((variable, got, accepted),) = unknown_values(env)
    assert (variable, got) == ("LIGHTNING_PRESETS_AUTOLOAD", value)
    assert "0, false, no, off (off)" in accepted
    (finding,) = variable_findings(env)
    assert finding.code == "LP017"
    assert finding.severity == "warning"
    assert f"LIGHTNING_PRESETS_AUTOLOAD={value!r}" in finding.message


@pytest.mark.parametrize("value", ["", "1", "0", "TRUE", " off ", "No", "yes"])
def test_every_autoload_value_it_takes_is_quiet(value: str) -> None:
    assert unknown_values({"LIGHTNING_PRESETS_AUTOLOAD": value}) == []


@pytest.mark.parametrize(("value", "typos"), [("LP3O5,LP101", ["LP3O5"]), ("LP30", ["LP30"]), ("al", ["al"]),
                                             ("LP101 LP1010", ["LP1010"])])  # fmt: skip
def test_a_skip_entry_that_is_no_code_is_named(value: str, typos: list[str]) -> None:
    """Before: a typo was ignored, and the rule it meant to skip still ran, or (worse) the user thought it had."""
    found = unknown_values({"LIGHTNING_PRESETS_SKIP": value})
    assert [got for _, got, _ in found] == typos
    assert all(variable == "LIGHTNING_PRESETS_SKIP" for variable, _, _ in found)


@pytest.mark.parametrize("value", ["all", "ALL", "lp305; LP101", "LP101,LP102", ""])
def test_skip_values_it_takes_are_quiet(value: str) -> None:
    assert unknown_values({"LIGHTNING_PRESETS_SKIP": value}) == []


def test_check_lists_the_skipped_rules_instead_of_a_plain_valid(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: ``SKIP=all`` made ``check`` print VALID for a job it otherwise rejects, without a word."""
    argv = ("check", "--strategy", "fsdp_offload_ckpt", "--accelerator", "cpu", "--devices", "2", "--json")
    code, out, _ = run_cli(capsys, *argv)
    assert code == 1  # LP101: FSDP on CPU
    assert "LP018" not in out
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "all")
    code, out, _ = run_cli(capsys, *argv)
    data = json.loads(out)
    (skipped,) = [each for each in data["findings"] if each["code"] == "LP018"]
    assert "switches off every rule" in skipped["message"]
    assert code == 0  # a warning: the job is still the user's to run
    code, out, _ = run_cli(capsys, *argv, "--strict")
    assert code == 1
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "LP101,LP3O5")
    data = json.loads(run_cli(capsys, *argv)[1])
    codes = [each["code"] for each in data["findings"]]
    assert "LP101" not in codes
    assert codes.count("LP017") == 1
    (skipped,) = [each for each in data["findings"] if each["code"] == "LP018"]
    assert "switches off LP101" in skipped["message"]


def test_doctor_lists_the_skipped_rules(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "LP305,LP101")
    data = json.loads(run_cli(capsys, "doctor", "--json")[1])
    assert data["variables"]["skipped_rules"] == ["LP101", "LP305"]
    assert "LP018" in [each["code"] for each in data["findings"]]
    monkeypatch.delenv("LIGHTNING_PRESETS_SKIP")
    data = json.loads(run_cli(capsys, "doctor", "--json")[1])
    assert data["variables"]["skipped_rules"] == []
    assert "LP018" not in [each["code"] for each in data["findings"]]


def test_registration_warns_once_and_never_raises(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_AUTOLOAD", "disabled")
    monkeypatch.setattr(_activate, "_warned", [])
    with pytest.warns(PresetWarning, match=r"\[LP017\].*LIGHTNING_PRESETS_AUTOLOAD='disabled'"):
        _activate._warn_unknown_values()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _activate._warn_unknown_values()  # once per process: quiet now
        monkeypatch.setattr(_activate, "_warned", [])
        _activate._warn_unknown_values()  # -W error: on stderr, not raised
    assert "PresetWarning: [LP017]" in capsys.readouterr().err
