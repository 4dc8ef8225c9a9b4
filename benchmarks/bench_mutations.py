"""The mutation check in full, as a table: every error rule widened at its neighbours, and every generated mutant of
its condition against the rule's own tests.

Part ``neighbours``: ``tests/test_rule_mutations.py`` stops at the first neighbour that notices the rule widened to
fire always; this runs every neighbour under both widenings (always, and at the neighbour's own recorded arguments)
and prints one line per rule: neighbours, accepted clean, noticing the wide and the narrow mutant, seconds.

Part ``generated``: every mutant ``tests/mutants.py`` generates from each error rule's source (comparisons flipped or
loosened, integers moved by one, ``and``/``or`` operands dropped or swapped, ``not`` dropped, early exits removed), run
against that rule's ``fails`` and ``fixed`` examples and its accepted neighbours up to the first that fails: one line
per rule (mutants, killed, survivors, seconds), then one line per survivor. The suite's
``test_generated_mutants_are_killed_or_recorded`` runs a deterministic sample of them and fails on a survivor this
file does not list, or on a listed one that is now killed.

In-process, simulated hardware; nothing is written unless ``--write`` (``benchmarks/results/mutations.txt``).

    python benchmarks/bench_mutations.py [--part neighbours|generated|all] [--codes LP201,LP205] [--write]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULT = ROOT / "benchmarks" / "results" / "mutations.txt"
sys.path.insert(0, str(ROOT / "tests"))  # the neighbours' data and the mutants live with the tests

import mutants  # noqa: E402
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


def neighbours_part(codes: list[str]) -> tuple[list[str], list[str]]:
    start = time.perf_counter()
    lines, failing = ["# neighbours: each error rule widened (always; at one neighbour's arguments)"], []
    for code in codes:
        line, ok = rule_line(code)
        lines.append(line + ("" if ok else "  <-"))
        if not ok:
            failing.append(code)
        print(lines[-1], flush=True)
    summary = f"{len(codes)} rules, {sum(len(NEIGHBOURS[c]) for c in codes)} neighbours, "
    summary += f"{time.perf_counter() - start:.1f} s; not pinned: {', '.join(failing) or 'none'}"
    print(summary, flush=True)
    return [*lines, summary], failing


def generated_part(codes: list[str]) -> tuple[list[str], list[str]]:
    start = time.perf_counter()
    lines = ["# generated: each error rule's condition mutated, against its examples and neighbours"]
    survivors: list[mutants.Mutant] = []
    kinds: Counter[str] = Counter()
    total = 0
    for code in codes:
        began = time.perf_counter()
        generated = mutants.mutants(code)
        verdicts = [mutants.judge(mutant) for mutant in generated]
        alive = [v.mutant for v in verdicts if v.killed_by is None]
        kinds.update(v.killed_by.split(" ")[0] for v in verdicts if v.killed_by is not None)
        survivors += alive
        total += len(generated)
        lines.append(f"{code}  {len(generated):3d} mutants  killed {len(generated) - len(alive):3d}  "
                     f"survivors {len(alive):3d}  {time.perf_counter() - began:5.2f} s")  # fmt: skip
        print(lines[-1], flush=True)
    named = {"fails": "its fails example", "fixed": "its fixed example", "neighbour": "a neighbour",
             "added": "a configuration the check adds"}  # fmt: skip
    killers = ", ".join(f"{count} by {named[kind]}" for kind, count in kinds.most_common())
    summary = (f"{len(codes)} rules, {total} mutants, {total - len(survivors)} killed ({killers}), "
               f"{len(survivors)} survivors, {time.perf_counter() - start:.1f} s")  # fmt: skip
    lines.append(summary)
    lines += [f"  {m.name:9s} line {m.line:3d}  {mutants.SURVIVOR}{mutants.key(m)}" for m in survivors]
    print(summary, flush=True)
    for line in lines[-len(survivors) :] if survivors else []:
        print(line)
    return lines, [mutants.key(m) for m in survivors]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--part", choices=("neighbours", "generated", "all"), default="all")
    parser.add_argument("--codes", help="comma-separated codes (default: every error rule)")
    parser.add_argument("--write", action="store_true", help=f"also write {RESULT.relative_to(ROOT)}")
    args = parser.parse_args(argv)
    lines: list[str] = []
    failing: list[str] = []
    if args.part in ("neighbours", "all"):
        codes = args.codes.split(",") if args.codes else sorted(NEIGHBOURS)
        part, failing = neighbours_part(codes)
        lines += part
    if args.part in ("generated", "all"):
        codes = args.codes.split(",") if args.codes else sorted(mutants.error_rules())
        lines += ([""] if lines else []) + generated_part(codes)[0]
    if args.write:
        RESULT.write_text("\n".join(lines) + "\n")
    return 1 if failing else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
