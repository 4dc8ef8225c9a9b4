"""The mutation check in full, as a table: for every error rule, how many of its neighbours notice each widening.

``tests/test_rule_mutations.py`` stops at the first neighbour that notices the rule widened to fire always; this runs
every neighbour under both widenings (always, and at the neighbour's own recorded arguments) and prints one line per
rule: neighbours, accepted clean, noticing the wide and the narrow mutant, seconds. In-process, simulated hardware;
nothing is written unless ``--write`` (``benchmarks/results/mutations.txt``).

    python benchmarks/bench_mutations.py [--codes LP201,LP205] [--write]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the neighbours' data lives with the tests

from neighbours import NEIGHBOURS, accepted_problem, clean, run, widened  # noqa: E402


def rule_line(code: str) -> tuple[str, bool]:
    """One rule's line of the table, and whether every neighbour passed clean and noticed both widenings."""
    start = time.perf_counter()
    neighbours = NEIGHBOURS[code]
    accepted = sum(accepted_problem(code, clean(code, index)) == "" for index in range(len(neighbours)))
    with widened(code):
        wide = sum(code in run(each).errors for each in neighbours)
    narrow = 0
    for index, each in enumerate(neighbours):
        with widened(code, only=frozenset(clean(code, index).calls)):
            narrow += code in run(each).errors
    total = len(neighbours)
    ok = accepted == wide == narrow == total
    seconds = time.perf_counter() - start
    return (
        f"{code}  {total:2d} neighbours  accepted {accepted:2d}  wide {wide:2d}  narrow {narrow:2d}  {seconds:5.2f} s",
        ok,
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--codes", help="comma-separated codes (default: every error rule)")
    parser.add_argument("--write", action="store_true", help="also write benchmarks/results/mutations.txt")
    args = parser.parse_args(argv)
    codes = args.codes.split(",") if args.codes else sorted(NEIGHBOURS)
    start = time.perf_counter()
    lines, failing = [], []
    for code in codes:
        line, ok = rule_line(code)
        lines.append(line + ("" if ok else "  <-"))
        if not ok:
            failing.append(code)
        print(lines[-1], flush=True)
    summary = f"{len(codes)} rules, {sum(len(NEIGHBOURS[c]) for c in codes)} neighbours, "
    summary += f"{time.perf_counter() - start:.1f} s; not pinned: {', '.join(failing) or 'none'}"
    print(summary)
    if args.write:
        (ROOT / "benchmarks" / "results" / "mutations.txt").write_text("\n".join([*lines, summary]) + "\n")
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
