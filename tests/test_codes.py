"""One rule mechanism: every code is declared once (a ``Code`` or a rule) and emitted by reference."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import errors_doc
import pytest

from lightning_presets.core.codes import Code

SRC = Path(__file__).resolve().parents[1] / "src"
LITERAL = re.compile(r"[\"'](LP\d{3})[\"']")


def literals(root: Path) -> dict[str, set[str]]:
    """Where each quoted code literal (``"LP101"``) appears, by file."""
    where: dict[str, set[str]] = collections.defaultdict(set)
    for path in root.rglob("*.py"):
        for code in LITERAL.findall(path.read_text(encoding="utf-8")):
            where[code].add(str(path.relative_to(root)))
    return where


def test_no_code_literal_appears_in_two_files() -> None:
    assert {code: files for code, files in literals(SRC).items() if len(files) > 1} == {}


def test_the_literal_check_can_fail(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text('X = Code(code="LP101")\n')
    (tmp_path / "b.py").write_text('if finding.code == "LP101": ...\n')
    assert literals(tmp_path) == {"LP101": {"a.py", "b.py"}}


def test_every_literal_is_a_declared_code() -> None:
    """Except LP9xx, the third parties' range (the docs' examples of a third-party rule use LP901)."""
    declared = errors_doc.declared()
    ours = {code for code in literals(SRC) if not code.startswith("LP9")}
    assert ours - set(declared) == set()
    assert all(isinstance(each, Code) for each in declared.values())


def test_a_second_declaration_of_a_code_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import lightning_presets.tools.doctor as doctor

    twin = Code(code=doctor.NO_LIGHTNING.code, severity="error", stage="doctor", title="again", fails="a", fixed="b")
    monkeypatch.setattr(doctor, "TWIN", twin, raising=False)
    with pytest.raises(ValueError, match=doctor.NO_LIGHTNING.code):
        errors_doc.declared()
