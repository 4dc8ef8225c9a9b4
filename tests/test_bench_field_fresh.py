"""The fresh field benchmark (``benchmarks/bench_field_fresh.py``): its cases stay fresh, and its judgement counts a
finding the way its docstring says."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_field_fresh as bench

FIELD = Path(__file__).resolve().parent / "field"


def finding(code: str, message: str, severity: str = "error", conditional: bool = False) -> dict[str, Any]:
    return {"code": code, "severity": severity, "conditional": conditional, "source": "guard", "message": message,
            "hint": ""}  # fmt: skip


def run(*findings: dict[str, Any], model: str | None = None) -> dict[str, Any]:
    return {"model": model, "findings": list(findings)}


BAD = next(case for case in bench.MISCONFIGURATIONS if case.model is None)
MODEL_BAD = next(case for case in bench.MISCONFIGURATIONS if case.model is not None)
GOOD = bench.LEGAL[0]


def test_cases_are_sourced_unique_and_not_in_the_field_corpus() -> None:
    cases = bench._cases()
    assert len({case.id for case in cases}) == len(cases)
    assert all(case.source.startswith("https://") and case.wrong and case.translation for case in cases)
    corpus = "".join(path.read_text() for path in FIELD.glob("*.py"))
    for case in bench.MISCONFIGURATIONS:
        assert case.source not in corpus, case.id
        assert case.expected == "flag"
        assert case.topic
        assert case.model is None or case.risk
    assert all(case.expected == "accept" for case in bench.LEGAL)


def test_a_flag_counts_only_when_it_is_about_the_threads_failure() -> None:
    assert BAD.topic == "clip"  # M01: the messages below are written for it
    on_topic = bench._judge(BAD, [run(finding("LP999", "gradient clip values disagree"))])
    off_topic = bench._judge(BAD, [run(finding("LP999", "an unrelated remark"))])
    conditional = bench._judge(BAD, [run(finding("LP999", "gradient clip", "warning", conditional=True))])
    assert (on_topic["verdict"], on_topic["on_topic_codes"]) == ("flagged", ["LP999"])
    assert (off_topic["verdict"], off_topic["codes"]) == ("flagged off topic", ["LP999"])
    assert conditional["verdict"] == "missed"


def test_a_model_dependent_case_is_decided_with_its_model_and_named_without_it() -> None:
    words = {"M12": "manual optimization", "M13": "configure_gradient_clipping", "M14": "unused parameters",
             "M15": "heads", "M20": "two optimizers"}  # fmt: skip
    risk = words[MODEL_BAD.id]
    named = bench._judge(MODEL_BAD, [run(model=MODEL_BAD.model), run(finding("LP999", risk, "warning", True))])
    silent = bench._judge(MODEL_BAD, [run(model=MODEL_BAD.model), run()])
    elsewhere = bench._judge(MODEL_BAD, [run(model=MODEL_BAD.model), run(finding("LP999", "slow", "warning"))])
    assert named["verdict"] == "missed"
    assert named["without_model_names_risk"]
    assert not silent["without_model_names_risk"]
    assert not elsewhere["without_model_names_risk"]


def test_a_legal_configuration_is_refused_by_an_error_only() -> None:
    warned = bench._judge(GOOD, [run(finding("LP999", "slow", "warning"))])
    refused = bench._judge(GOOD, [run(finding("LP999", "refused"))])
    assert (warned["verdict"], warned["warnings"]) == ("accepted", ["LP999"])
    assert (refused["verdict"], refused["errors"]) == ("refused", ["LP999"])
    assert bench._judge(GOOD, [{"model": None, "crash": "KeyError: x"}])["verdict"] == "crash"


def test_one_real_case_runs_and_is_rendered() -> None:
    result = bench.run({"L03"})
    (record,) = result["records"]
    assert record["id"] == "L03"
    assert record["runs"]
    assert "findings" in record["runs"][0]
    assert result["summary"]["legal"] == 1
    text = bench.render(result, "python benchmarks/bench_field_fresh.py --only L03", 1.0)
    assert "L03" in text
    assert "legal configurations refused" in text
