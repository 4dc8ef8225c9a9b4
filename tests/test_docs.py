"""docs/errors.md is generated from the rules; every code is documented with a failing and a fixed example."""

from __future__ import annotations

import re
from pathlib import Path

import errors_doc as _docs
import pytest

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


USER_DOCS = (
    "README.md", "docs/cli.md", "docs/plan.md", "docs/resume.md", "docs/third-party-presets.md",
    "docs/how-it-works.md", "docs/runtime-guards.md", "docs/evidence.md", "docs/ci.md", "docs/benchmarks.md",
)  # fmt: skip


def test_the_benchmark_figures_are_quoted_from_the_results() -> None:
    """docs/benchmarks.md's figures are the committed outputs' own lines (scripts/benchmarks_doc.py)."""
    import benchmarks_doc

    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert benchmarks_doc.replace(page, benchmarks_doc.generate()) == page, (
        "run `python scripts/benchmarks_doc.py --write docs/benchmarks.md`"
    )
    assert "benchmarks/results/construction.txt" in page


@pytest.mark.parametrize("document", USER_DOCS)
def test_a_figure_written_next_to_its_results_file_is_that_files(document: str) -> None:
    """A paragraph that names a file under benchmarks/results/ quotes only figures (ms, s, GiB, %, ...) that file
    holds: a stale figure written by hand fails here. Elsewhere the pages link to docs/benchmarks.md."""
    import benchmarks_doc

    assert benchmarks_doc.unmatched_figures((ROOT / document).read_text(encoding="utf-8")) == []


def test_a_stale_figure_is_found(tmp_path: Path) -> None:
    """The check above can fail: a figure that differs from its results file (the README once quoted 151 s for a
    plan whose output said 17.5 s), and a table under the citing paragraph."""
    import benchmarks_doc

    (tmp_path / "plan_llama.txt").write_text("wall time 17.5 s, peak RSS 0.39 GiB; 4,328 tokens/s/GPU\n")
    stale = "A plan of llama3_8b takes 151 s (`benchmarks/results/plan_llama.txt`), its peak 0.44 GiB."
    assert [figure for figure, _ in benchmarks_doc.unmatched_figures(stale, tmp_path)] == ["151 s", "0.44 GiB"]
    table = "Its output, `benchmarks/results/plan_llama.txt`:\n\n| preset | peak |\n| --- | --- |\n| fsdp2 | 9.5 GiB |"
    assert [figure for figure, _ in benchmarks_doc.unmatched_figures(table, tmp_path)] == ["9.5 GiB"]
    current = "A plan of llama3_8b takes 17.5 s (`benchmarks/results/plan_llama.txt`), its peak 0.39 GiB."
    assert benchmarks_doc.unmatched_figures(current, tmp_path) == []


def test_the_readme_stays_short_and_leads_with_the_quick_start() -> None:
    """The README is the first hour: at most 400 lines, the quick-start within 80, the command line within 200, and
    every page its sections moved to linked from it."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    lines = readme.splitlines()
    assert len(lines) <= 400, len(lines)
    assert next(i for i, line in enumerate(lines) if line.startswith("Quick-start (installs torch")) < 80
    assert next(i for i, line in enumerate(lines) if line == "## Command line") < 200
    assert "--index-url https://download.pytorch.org/whl/cpu" in "\n".join(lines[:80])
    for page in [*USER_DOCS[1:], "docs/troubleshooting.md", "docs/errors.md"]:
        assert f"]({page})" in readme, page


@pytest.mark.parametrize("document", USER_DOCS)
def test_every_relative_link_reaches_a_file(document: str) -> None:
    """The README sends readers to docs/ pages and the pages to each other: no link leads nowhere."""
    path = ROOT / document
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text(encoding="utf-8"))
    missing = [t for t in targets if not t.startswith(("http:", "https:")) and not (path.parent / t).exists()]
    assert missing == []
