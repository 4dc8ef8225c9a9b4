"""The mutation check: each error rule, widened, is noticed by its accepted neighbours (``tests/neighbours.py``).

A rule made more eager than it should be (a false rejection) must make a test fail. Each rule is widened in two ways,
its code kept: to fire whenever it runs (some neighbour must notice), and, narrower, to fire only on the exact
arguments one neighbour gives it, recorded by that neighbour's clean run (that neighbour must notice: every neighbour
is checked so). A neighbour that does not notice reaches the rule at a stage that never runs, or in a preset that does
not have it, or is refused before the rule, and pins nothing.

A rule widened anywhere else (its ``==`` made ``<=``, one condition of an early exit dropped) is the generated
mutants' part (``tests/mutants.py``): each mutant of a rule's condition must be killed by that rule's own tests (its
``fails``/``fixed`` examples and its neighbours), or be listed as a survivor in ``benchmarks/results/mutations.txt``,
the owed-test list that only shrinks.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import mutants
from neighbours import NEIGHBOURS, Neighbour, clean, error_rules, run, widened

RESULT = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "mutations.txt"
SAMPLE_EVERY = 6
"""The suite judges about one generated mutant in six (the same ones on every run while the rules' source is
unchanged); ``benchmarks/bench_mutations.py`` judges them all and lists the survivors in its committed result."""


def test_the_neighbours_are_distinct_configurations_at_their_rule() -> None:
    """Two neighbours the rule sees identically pin one point: a narrow widening could not tell them apart."""
    same = []
    for code, neighbours in NEIGHBOURS.items():
        seen: dict[frozenset[str], int] = {}
        for index in range(len(neighbours)):
            calls = frozenset(clean(code, index).calls)
            if calls in seen:
                same.append(f"{code} {seen[calls]} and {index}")
            seen.setdefault(calls, index)
    assert same == []


def test_the_mutation_check_can_fail() -> None:
    """A rule widened where no neighbour reaches it (an FSDP rule under check's cluster commands) goes unnoticed."""
    with widened("LP101"):
        assert all("LP101" not in run(each).errors for each in NEIGHBOURS["LP705"][:2])
        assert "LP101" in run(NEIGHBOURS["LP101"][0]).errors
    assert "LP101" not in run(NEIGHBOURS["LP101"][0]).errors  # restored


def test_a_narrow_widening_spares_the_other_neighbours() -> None:
    """Widened at one neighbour's exact arguments, the rule still accepts its other neighbours."""
    code = "LP201"
    calls = frozenset(clean(code, 0).calls)
    with widened(code, only=calls):
        assert code in run(NEIGHBOURS[code][0]).errors
        assert all(code not in run(each).errors for each in NEIGHBOURS[code][1:])


def test_widening_leaves_the_error_rules_as_declared() -> None:
    before = {code: rule.check for code, rule in error_rules().items()}
    with widened("LP420"):
        assert error_rules()["LP420"].check is not before["LP420"]
    assert {code: rule.check for code, rule in error_rules().items()} == before
    assert isinstance(NEIGHBOURS["LP420"][0], Neighbour)


@pytest.fixture(scope="module")
def sampled() -> list[mutants.Verdict]:
    return [mutants.judge(mutant) for mutant in mutants.sample(SAMPLE_EVERY)]


def test_generated_mutants_are_killed_or_recorded(sampled: list[mutants.Verdict]) -> None:
    """A sampled mutant that survives its rule's tests is a widening (or narrowing) no test would notice: it must be
    one the benchmark's result lists; one listed there that is now killed must leave the list (rerun the benchmark
    with ``--write``)."""
    recorded = mutants.recorded_survivors(RESULT.read_text())
    new = [v.mutant.describe() for v in sampled if v.killed_by is None and mutants.key(v.mutant) not in recorded]
    stale = [f"{v.mutant.describe()}, killed by its {v.killed_by}" for v in sampled
             if v.killed_by is not None and mutants.key(v.mutant) in recorded]  # fmt: skip
    assert new == [], f"mutants no test of their rule kills (add a neighbour or a test that does): {new}"
    assert stale == [], f"killed now, still listed as survivors: {stale}"


def test_the_sample_reaches_most_rules(sampled: list[mutants.Verdict]) -> None:
    assert len(sampled) >= len(mutants.all_mutants()) // (2 * SAMPLE_EVERY)
    assert len({v.mutant.code for v in sampled}) >= len(error_rules()) // 2


def test_every_error_rule_has_generated_mutants() -> None:
    assert {code for code in error_rules() if not mutants.mutants(code)} == set(mutants.DELEGATES)


def test_a_generated_mutant_is_killed_by_its_rules_own_tests() -> None:
    """LP215 without its first early exit fires on the `fixed` example (clipping by value); with its `not` dropped it
    no longer fires on the `fails` example; a mutant that changes nothing survives, so survivors are seen."""
    by_what = {mutant.what: mutant for mutant in mutants.mutants("LP215")}
    assert mutants.judge(by_what["early exit `if not ctx.clips_by_norm: return None` removed"]).killed_by == (
        "fixed example"
    )
    assert mutants.judge(by_what["`not` dropped in `not ctx.clips_by_norm`"]).killed_by == "fails example"
    unchanged = mutants.Mutant("LP215", -1, 1, "nothing", mutants._function_tree(error_rules()["LP215"].check))
    assert mutants.judge(unchanged).killed_by is None


def test_a_mutant_is_applied_with_the_rules_own_closure_and_removed_after() -> None:
    """LP101 is made by a rule factory (its accelerators in the closure): the mutant keeps them, and every rule
    object of the code runs its original function again afterwards."""
    from neighbours import declared_rules

    before = [each.check for each in declared_rules()["LP101"]]
    mutant = mutants.mutants("LP101")[0]
    with mutants.applied(mutant):
        during = [each.check for each in declared_rules()["LP101"]]
        assert all(new is not old for new, old in zip(during, before, strict=True))
        assert [f.__closure__ is not None for f in during] == [f.__closure__ is not None for f in before]
    assert [each.check for each in declared_rules()["LP101"]] == before


def test_recorded_survivors_are_read_from_the_result() -> None:
    text = "LP201  3 mutants\n  LP804#1   line  14  survives: LP804 | `facts is None` dropped from `or`\n"
    assert mutants.recorded_survivors(text) == {"LP804 | `facts is None` dropped from `or`"}


@pytest.mark.parametrize(
    ("code", "check"),
    [
        (code, check)
        for code in sorted({*mutants.ACCEPTED, *mutants.REFUSED})
        for check in mutants.checks(code)
        if check.name.startswith("added")
    ],
    ids=lambda value: value if isinstance(value, str) else value.name,
)
def test_the_added_configurations_are_judged_as_declared(code: str, check: mutants.Check) -> None:
    """What this check adds to a rule's tests holds with the rule as it is (accepted, or refused with its code); an
    added neighbour also reaches the rule, so it pins something."""
    assert check.passes()
    for neighbour in mutants.ACCEPTED.get(code, ()):
        assert run(neighbour, trace=code).calls, f"{code}: {neighbour.why} never reaches the rule"
