"""``lightning-presets explain`` on held-out logs: real error text from public threads that no test quotes.

    python benchmarks/bench_explain_heldout.py [--cases ID,ID] [--output DIR] [--subprocess]

The cases are ``benchmarks/explain_heldout/*.txt``, described in ``benchmarks/explain_heldout/cases.json`` (source
thread, the category expected from the thread's resolution, written before explain was run on them). Each log is
explained the way a user runs it, ``lightning-presets explain FILE --json`` (in this process through the CLI's
``main``, or with ``--subprocess`` as a separate command), and the first failure's category is compared with the
expected one:

- ``right``: the same category (for a case expected ``unknown``: explain said ``unknown`` or recognised nothing);
- ``wrong-confident``: a known category other than the expected one (the reader is sent to the wrong fix);
- ``wrong-unknown``: explain said ``unknown`` or recognised nothing, where a category was expected.

Writes ``benchmarks/results/explain_heldout.txt`` and ``explain_heldout.json`` (``--output`` folder). The first
run's totals are kept in the json as ``first_contact`` and carried over by later runs: that is the figure to quote,
whatever signatures are added after it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = ROOT / "benchmarks" / "explain_heldout"
RESULTS = ROOT / "benchmarks" / "results"
UNKNOWN = "unknown"
VERDICTS = ("right", "wrong-confident", "wrong-unknown")


def load_cases() -> list[dict[str, str]]:
    """The cases of ``cases.json``, in their order."""
    data = json.loads((CASES_DIR / "cases.json").read_text(encoding="utf-8"))
    cases: list[dict[str, str]] = data["cases"]
    return cases


def explain_json(path: Path, *, use_subprocess: bool = False) -> dict[str, Any]:
    """What ``lightning-presets explain PATH --json`` prints, parsed."""
    argv = ["explain", str(path), "--json"]
    if use_subprocess:
        done = subprocess.run([sys.executable, "-m", "lightning_presets", *argv], capture_output=True, text=True,
                              check=False, cwd=ROOT, timeout=120)  # fmt: skip
        text = done.stdout
    else:
        from lightning_presets.cli import main

        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            main(argv)
        text = buffer.getvalue()
    result: dict[str, Any] = json.loads(text)
    return result


def first_failure(report: dict[str, Any]) -> dict[str, Any] | None:
    """The failure explain marks as the first one (the first listed if none is marked), or None."""
    failures: list[dict[str, Any]] = report.get("failures", [])
    marked = [failure for failure in failures if failure.get("first")]
    return (marked or failures)[0] if failures else None


def verdict(expected: str, got: str | None) -> str:
    """``right``, ``wrong-confident`` or ``wrong-unknown`` (see the module's docstring)."""
    said_unknown = got is None or got == UNKNOWN
    if (said_unknown and expected == UNKNOWN) or got == expected:
        return "right"
    return "wrong-unknown" if said_unknown else "wrong-confident"


def run_case(case: dict[str, str], *, use_subprocess: bool = False) -> dict[str, Any]:
    """One row of the table: the case, what explain answered first, and the verdict."""
    report = explain_json(CASES_DIR / f"{case['id']}.txt", use_subprocess=use_subprocess)
    first = first_failure(report)
    got = None if first is None else str(first["category"])
    return {
        "id": case["id"],
        "url": case["url"],
        "expected": case["expected"],
        "got": got,
        "code": None if first is None else first.get("code"),
        "verdict": verdict(case["expected"], got),
    }


def totals(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts per verdict and the two rates the goal is stated in."""
    count = {name: sum(row["verdict"] == name for row in rows) for name in VERDICTS}
    total = len(rows)
    return {
        "total": total,
        **count,
        "right_rate": round(count["right"] / total, 4) if total else 0.0,
        "confident_wrong_rate": round(count["wrong-confident"] / total, 4) if total else 0.0,
    }


def table(rows: list[dict[str, Any]], summary: dict[str, Any], first_contact: dict[str, Any] | None) -> str:
    """The text report: one line per case, then the totals."""
    header = ("id", "expected", "got", "code", "verdict")
    body = [(row["id"], row["expected"], row["got"] or "(nothing)", row["code"] or "-", row["verdict"]) for row in rows]
    widths = [max(len(line[column]) for line in [header, *body]) for column in range(len(header))]
    lines = ["lightning-presets explain on held-out public-thread logs (benchmarks/explain_heldout/)", ""]
    for line in [header, *body]:
        lines.append("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())
    lines += [
        "",
        f"right: {summary['right']}/{summary['total']} ({summary['right_rate']:.0%}); "
        f"confident wrong: {summary['wrong-confident']}/{summary['total']} ({summary['confident_wrong_rate']:.0%}); "
        f"wrong-unknown: {summary['wrong-unknown']}/{summary['total']}",
    ]
    if first_contact is not None:
        lines.append(f"first contact (the figure to quote): right {first_contact['right']}/{first_contact['total']}, "
                     f"confident wrong {first_contact['wrong-confident']}/{first_contact['total']}")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="", help="comma-separated case ids (default: all)")
    parser.add_argument("--output", type=Path, default=RESULTS, help="folder for explain_heldout.{txt,json}")
    parser.add_argument("--subprocess", action="store_true", help="run the installed command, one process a case")
    args = parser.parse_args(argv)
    cases = load_cases()
    if args.cases:
        wanted = set(args.cases.split(","))
        cases = [case for case in cases if case["id"] in wanted]
    rows = [run_case(case, use_subprocess=args.subprocess) for case in cases]
    summary = totals(rows)
    args.output.mkdir(parents=True, exist_ok=True)
    json_path = args.output / "explain_heldout.json"
    previous = json.loads(json_path.read_text(encoding="utf-8")) if json_path.exists() else {}
    first_contact = previous.get("first_contact") or (summary if not args.cases else None)
    result = {"cases": rows, "totals": summary, "first_contact": first_contact}
    text = table(rows, summary, first_contact)
    if not args.cases:  # a partial run prints, but never overwrites the full results
        json_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        (args.output / "explain_heldout.txt").write_text(text, encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
