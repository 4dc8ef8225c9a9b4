"""docs/errors.md is generated from the rules; every code is documented with a failing and a fixed example."""

from __future__ import annotations

import re
from pathlib import Path

import errors_doc as _docs

ROOT = Path(__file__).resolve().parents[1]


def test_errors_md_is_up_to_date() -> None:
    committed = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    assert committed == _docs.generate(), "docs/errors.md is stale: run `python scripts/errors_doc.py --write`"


def test_every_code_has_examples_and_is_unique() -> None:
    entries = [*_docs._documented_codes(), *_docs._rule_entries()]
    codes = [entry.code for entry in entries]
    assert len(codes) == len(set(codes)), sorted(code for code in codes if codes.count(code) > 1)
    for entry in entries:
        assert re.fullmatch(r"LP\d{3}", entry.code)
        assert entry.fails.strip(), entry.code
        assert entry.fixed.strip(), entry.code
        assert entry.fails != entry.fixed, entry.code


def test_the_foundation_codes_are_documented() -> None:
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    for code in ["LP001", "LP003", "LP006", "LP101", "LP107", "LP201", "LP207", "LP208"]:
        assert f"## {code}" in text


def test_readme_code_table_is_up_to_date() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert readme == _docs.with_readme_table(readme), "run `python scripts/errors_doc.py --readme README.md`"


def test_readme_lists_every_code() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [entry.code for entry in [*_docs._documented_codes(), *_docs._rule_entries()] if entry.code not in readme]
    assert not missing, f"README.md's error-code table lacks {missing}"


def test_readme_lists_every_builtin_preset() -> None:
    import lightning_presets
    from lightning_presets.registry.catalog import precision_catalog

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    names = [*lightning_presets.presets(), *precision_catalog().presets]
    assert [name for name in names if f"`{name}`" not in readme] == []
