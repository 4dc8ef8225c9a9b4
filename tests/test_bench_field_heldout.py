"""The held-out field benchmark (``benchmarks/bench_field_heldout.py``): its threads are used nowhere else in the
project, its cases are the ones its committed first-contact results were produced from, and it is judged and rendered
by ``bench_field_fresh``'s machinery."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_field_fresh as fresh  # noqa: E402
import bench_field_heldout as bench  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"
DESCRIBED = ("id", "source", "wrong", "expected", "translation", "topic", "model", "risk", "stale", "correction")


def _thread(url: str) -> str:
    """``owner/repo/issues/N`` (or ``pull/N``) of a GitHub address."""
    return url.removeprefix("https://github.com/")


def _used_elsewhere() -> str:
    """Every text the project already cites threads in."""
    folders = [ROOT / "tests" / "field", ROOT / "tests" / "evidence", ROOT / "src"]
    texts = [path.read_text(errors="replace") for folder in folders for path in folder.rglob("*") if path.is_file()
             and path.suffix in {".py", ".md", ".txt", ".json", ".toml", ".yaml", ".yml"}]  # fmt: skip
    return "\n".join(texts)


def test_cases_are_sourced_unique_and_used_nowhere_else() -> None:
    cases = bench._cases()
    assert len({case.id for case in cases}) == len(cases)
    assert all(case.source.startswith("https://github.com/") and case.wrong and case.translation for case in cases)
    elsewhere = _used_elsewhere()
    fresh_threads = {_thread(case.source) for case in fresh._cases()}
    for case in cases:
        assert not re.search(re.escape(_thread(case.source)) + r"(?!\d)", elsewhere), case.id
        assert _thread(case.source) not in fresh_threads, case.id
    for case in bench.MISCONFIGURATIONS:
        assert case.expected == "flag", case.id
        assert case.topic, case.id
        assert case.model is None or case.risk, case.id
        re.compile(case.topic)
    assert all(case.expected == "accept" and not case.topic for case in bench.LEGAL)
    assert all(not case.stale and not case.correction for case in cases)  # first contact: nothing changed afterwards


def test_the_committed_results_are_those_of_these_cases() -> None:
    payload: dict[str, Any] = json.loads((RESULTS / "field_heldout.json").read_text())
    recorded = [{key: record[key] for key in DESCRIBED} for record in payload["records"]]
    assert recorded == [fresh._describe(case) for case in bench._cases()]
    assert payload["summary"] == fresh._summary(payload["records"])
    assert payload["skipped"] == [{"source": source, "reason": reason} for source, reason in bench.SKIPPED]
    text = (RESULTS / "field_heldout.txt").read_text().splitlines()
    expected = bench.render(payload, payload["command"], payload["wall_s"]).splitlines()
    wall = next(index for index, line in enumerate(expected) if line.startswith("wall time:"))
    assert text[:wall] + text[wall + 1 :] == expected[:wall] + expected[wall + 1 :]


def test_the_fresh_judge_decides_a_held_out_case() -> None:
    case = next(case for case in bench.MISCONFIGURATIONS if case.topic == r"task|SLURM_NTASKS")
    on_topic = {"code": "LP999", "severity": "error", "conditional": False, "source": "check",
                "message": "SLURM_NTASKS=1 but 4 processes expected", "hint": ""}  # fmt: skip
    quoted = {**on_topic, "message": "`SLURM_NTASKS=1` differs"}
    assert fresh._judge(case, [{"model": None, "findings": [on_topic]}])["verdict"] == "flagged"
    assert fresh._judge(case, [{"model": None, "findings": [quoted]}])["verdict"] == "flagged off topic"


def test_one_real_case_runs_and_is_rendered() -> None:
    result = bench.run({"G11"})
    (record,) = result["records"]
    assert record["id"] == "G11"
    assert record["runs"]
    assert "findings" in record["runs"][0]
    assert result["summary"]["legal"] == 1
    text = bench.render(result, "python benchmarks/bench_field_heldout.py --only G11", 1.0)
    assert text.startswith(bench.TITLE)
    assert "G11" in text
    assert "legal configurations refused" in text
    assert f"threads read but not turned into cases ({len(bench.SKIPPED)})" in text
