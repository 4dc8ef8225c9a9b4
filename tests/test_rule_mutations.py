"""The mutation check: each error rule, widened, is noticed by its accepted neighbours (``tests/neighbours.py``).

A rule made more eager than it should be (a false rejection) must make a test fail. Each rule is widened in two ways,
its code kept: to fire whenever it runs (some neighbour must notice), and, narrower, to fire only on the exact
arguments one neighbour gives it, recorded by that neighbour's clean run (that neighbour must notice: every neighbour
is checked so). A neighbour that does not notice reaches the rule at a stage that never runs, or in a preset that does
not have it, or is refused before the rule, and pins nothing.
"""

from __future__ import annotations

import pytest

from neighbours import NEIGHBOURS, Neighbour, clean, error_rules, noticed, run, widened


@pytest.mark.parametrize("code", sorted(NEIGHBOURS))
def test_a_rule_widened_to_always_fire_is_noticed(code: str) -> None:
    """The simplest sound widening: the rule fires whenever it runs. One neighbour noticing suffices here; that each
    one does is the narrower check below (a neighbour that notices the narrow widening notices this one too)."""
    with widened(code):
        first = next((index for index, each in enumerate(NEIGHBOURS[code]) if noticed(code, run(each))), None)
    assert first is not None, f"{code} widened to fire always, and none of its neighbours noticed"


@pytest.mark.parametrize("code", sorted(NEIGHBOURS))
def test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour(code: str) -> None:
    unnoticed = []
    for index, each in enumerate(NEIGHBOURS[code]):
        calls = frozenset(clean(code, index).calls)
        assert calls, f"{code} neighbour {index} never reaches the rule"
        with widened(code, only=calls):
            if not noticed(code, run(each)):
                unnoticed.append(f"{index} ({each.why})")
    assert unnoticed == [], f"{code} widened at one neighbour's configuration, unnoticed by: {unnoticed}"


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
