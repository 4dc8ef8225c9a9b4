"""``lightning-presets explain`` on the second held-out set: 45 logs from public threads used nowhere else in the
project (a third from 2025-26, 17 whose cause the log alone cannot tell).

    python benchmarks/bench_explain_heldout2.py [--first-contact]

The cases are ``benchmarks/explain_heldout2/*.txt``, described in ``benchmarks/explain_heldout2/cases.json``: the
expected category, the level the log supports (``cause``, ``category`` or ``first``) and whether the log alone tells
the cause (``knowable``), all written before explain was first run on them. Each log is explained as a user runs it
(``lightning-presets explain FILE --json``) and the first failure compared:

- on a knowable log: ``right`` (the expected category; ``unknown`` expected and nothing known said),
  ``wrong-confident`` (another known category: the reader is sent to the wrong fix) or ``wrong-unknown``;
- on a log whose cause cannot be known: ``right`` when explain says the expected category without claiming a cause, or
  says only the first failure; ``wrong-confident`` when it claims a cause (or another category).

An explain without levels (the first contact) claims a cause with every known category.

Writes ``benchmarks/results/explain_heldout2.txt`` (``--first-contact``: ``explain_heldout2_first_contact.txt``, once).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_explain_heldout import explain_json, first_failure

ROOT = Path(__file__).resolve().parents[1]
CASES_DIR = ROOT / "benchmarks" / "explain_heldout2"
RESULTS = ROOT / "benchmarks" / "results"
LEVELS = ("first", "category", "cause")


def load_cases() -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = json.loads((CASES_DIR / "cases.json").read_text(encoding="utf-8"))["cases"]
    return cases


def answer(report: dict[str, Any]) -> tuple[str | None, str | None, str]:
    """The first failure's category and code, and the level explain claims (``cause`` where it says none)."""
    first = first_failure(report)
    if first is None:
        return None, None, "first"
    category = str(first["category"])
    level = str(report.get("level") or ("first" if category == "unknown" else "cause"))
    return category, first.get("code"), level


def verdict(case: dict[str, Any], got: str | None, level: str) -> str:
    expected = case["expected"]
    said_unknown = got is None or got == "unknown"
    if case["knowable"]:
        if (said_unknown and expected == "unknown") or got == expected:
            return "right"
        return "wrong-unknown" if said_unknown else "wrong-confident"
    if said_unknown or (got == expected and LEVELS.index(level) <= LEVELS.index(case["level"])):
        return "right"
    return "wrong-confident"


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    got, code, level = answer(explain_json(CASES_DIR / f"{case['id']}.txt"))
    return {"id": case["id"], "year": case["year"], "knowable": case["knowable"], "expected": case["expected"],
            "expected_level": case["level"], "got": got, "code": code, "level": level,
            "verdict": verdict(case, got, level)}  # fmt: skip


def totals(rows: list[dict[str, Any]], knowable: bool) -> dict[str, Any]:
    chosen = [row for row in rows if row["knowable"] is knowable]
    count = {
        name: sum(row["verdict"] == name for row in chosen) for name in ("right", "wrong-confident", "wrong-unknown")
    }
    total = len(chosen)
    return {"total": total, **count,
            "right_rate": round(count["right"] / total, 4) if total else 0.0,
            "confident_wrong_rate": round(count["wrong-confident"] / total, 4) if total else 0.0}  # fmt: skip


def table(rows: list[dict[str, Any]], title: str) -> str:
    header = ("id", "year", "knowable", "expected", "got", "code", "level", "verdict")
    body = [(r["id"], str(r["year"]), "yes" if r["knowable"] else "no", f"{r['expected']} ({r['expected_level']})",
             r["got"] or "(nothing)", r["code"] or "-", r["level"], r["verdict"]) for r in rows]  # fmt: skip
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    lines = [title, ""]
    lines += ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in [header, *body]]
    for knowable in (True, False):
        t = totals(rows, knowable)
        lines.append("")
        which = "knowable" if knowable else "cause not knowable from the log"
        lines.append(f"{which}: right {t['right']}/{t['total']} "
                     f"({t['right_rate']:.0%}), confident wrong {t['wrong-confident']}/{t['total']} "
                     f"({t['confident_wrong_rate']:.0%}), wrong-unknown {t['wrong-unknown']}/{t['total']}")  # fmt: skip
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-contact", action="store_true", help="write the first-contact file (once)")
    args = parser.parse_args(argv)
    rows = [run_case(case) for case in load_cases()]
    name = "explain_heldout2_first_contact" if args.first_contact else "explain_heldout2"
    if args.first_contact and (RESULTS / f"{name}.txt").exists():
        parser.error("the first contact is written once")
    suffix = ": FIRST CONTACT, before any change for them" if args.first_contact else ""
    text = table(rows, f"lightning-presets explain on the second held-out set (benchmarks/explain_heldout2/){suffix}")
    (RESULTS / f"{name}.txt").write_text(text, encoding="utf-8")
    (RESULTS / f"{name}.json").write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
