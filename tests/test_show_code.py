"""``lightning-presets show LPxxx``: a code's meaning, the function and file that check it, and who runs it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import lightning_presets
from lightning_presets.cli import main
from lightning_presets.tools.codes import declared, describe_code

ROOT = Path(lightning_presets.__file__).resolve().parents[1]


def _show(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        code = main(["show", *args])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, capsys.readouterr().out


def test_a_rule_code_names_its_function_file_and_presets(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _show(capsys, "lp201", "--json")
    assert code == 0
    data = json.loads(out)["code"]
    function = "lightning_presets.strategies.model_parallel.rules.sizes_cover_world[LP201]"
    assert data["function"] == function  # not .check
    path, _, line = data["file"].rpartition(":")
    source = (ROOT / path).read_text().splitlines()
    assert any('"LP201"' in text for text in source[int(line) - 1 : int(line) + 3])
    assert data["used_by"] == ["tp2d_hybrid"]


def test_a_code_without_a_function_and_a_conditional_rule(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _show(capsys, "LP010")
    assert code == 0
    assert "an unknown preset name" in out
    assert "checked by" not in out
    assert "registry/codes.py:" in out
    assert "unless your LightningModule overrides configure_gradient_clipping" in _show(capsys, "LP118")[1]


def test_an_unknown_code_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _show(capsys, "LP999")[0] == 2
    assert describe_code("LP999") is None


def test_every_rule_code_is_found_from_its_declaration() -> None:
    codes = declared()
    assert {"LP010", "LP118", "LP201", "LP801"} <= codes.keys()
    assert all(describe_code(code) is not None for code in ("LP012", "LP715", "LP809"))
