"""The held-out explain benchmark (``benchmarks/bench_explain_heldout.py``): its cases stay held out, its verdicts
count the way its docstring says, and the committed results are what the stored cases give today."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_explain_heldout as bench

from lightning_presets.failures.model import CATEGORIES

ROOT = Path(__file__).resolve().parents[1]
THREAD = re.compile(r"https://github\.com/([^/]+/[^/]+)/(?:issues|pull|discussions)/(\d+)$")


def _committed() -> dict[str, object]:
    return json.loads((bench.RESULTS / "explain_heldout.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def test_every_case_is_a_sourced_log_with_a_known_category_from_no_thread_the_tests_quote() -> None:
    cases = bench.load_cases()
    assert len({case["id"] for case in cases}) == len(cases)
    quoted = "\n".join(path.read_text(encoding="utf-8", errors="replace") for path in [
        *(ROOT / "tests").glob("test_explain*.py"), *(ROOT / "tests" / "explain_logs").rglob("*"),
        *(ROOT / "src" / "lightning_presets" / "failures").glob("*.py"),
    ] if path.is_file())  # fmt: skip
    for case in cases:
        assert (bench.CASES_DIR / f"{case['id']}.txt").read_text(encoding="utf-8").strip(), case["id"]
        assert case["expected"] in CATEGORIES, case["id"]
        assert case["basis"] in ("resolution", "log"), case["id"]
        assert case["note"], case["id"]
        match = THREAD.match(case["url"])
        assert match is not None, case["id"]
        repo, number = match.groups()
        assert f"{repo}#{number}" not in quoted, case["id"]
        assert case["url"] not in quoted, case["id"]


def test_a_verdict_is_right_confident_wrong_or_unknown_wrong() -> None:
    assert bench.verdict("nccl_shm", "nccl_shm") == "right"
    assert bench.verdict("unknown", None) == "right"  # nothing recognised where nothing is known: right
    assert bench.verdict("unknown", "unknown") == "right"
    assert bench.verdict("nccl_shm", "nccl_network") == "wrong-confident"
    assert bench.verdict("unknown", "oom_config") == "wrong-confident"
    assert bench.verdict("nccl_shm", None) == "wrong-unknown"
    assert bench.verdict("nccl_shm", "unknown") == "wrong-unknown"


def test_the_committed_results_are_what_the_stored_cases_give() -> None:
    committed = _committed()
    rows = [bench.run_case(case) for case in bench.load_cases()]
    assert rows == committed["cases"]
    summary = bench.totals(rows)
    assert summary == committed["totals"]
    first_contact = committed["first_contact"]
    assert isinstance(first_contact, dict)
    assert first_contact["right"] + first_contact["wrong-confident"] + first_contact["wrong-unknown"] == (
        first_contact["total"])  # fmt: skip
    text = (bench.RESULTS / "explain_heldout.txt").read_text(encoding="utf-8")
    assert text == bench.table(rows, summary, first_contact)
