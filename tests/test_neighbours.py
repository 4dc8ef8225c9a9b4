"""Every error rule's legal side: each accepted neighbour runs on simulated hardware and is accepted, every error rule
has at least three, and the known false rejections are strict expected failures.

The neighbours live in the test module that mirrors their rule's module (``strategies/deepspeed/config_rules.py``'s in
``tests/strategies/deepspeed/test_config_rules.py``), which runs them; the checks over all of them stay here."""

from __future__ import annotations

import pytest

from neighbours import (
    FEWER_THAN_THREE,
    NEIGHBOURS,
    Neighbour,
    accepted_problem,
    declared_rules,
    error_rules,
    mirrored_modules,
    param,
    run,
)

MINIMUM = 3


def test_every_error_rule_has_three_accepted_neighbours() -> None:
    short = {}
    for code in error_rules():
        accepted = [each for each in NEIGHBOURS.get(code, ()) if not each.false_rejection]
        if len(accepted) < MINIMUM and not FEWER_THAN_THREE.get(code, "").strip():
            short[code] = len(accepted)
    assert short == {}, f"error rules with fewer than {MINIMUM} accepted neighbours and no reason: {short}"


def test_every_code_of_the_data_is_a_declared_rule() -> None:
    declared, errors = set(declared_rules()), set(error_rules())
    assert set(NEIGHBOURS) <= declared, sorted(set(NEIGHBOURS) - declared)  # a rule demoted to a warning may stay
    assert set(FEWER_THAN_THREE) <= errors, sorted(set(FEWER_THAN_THREE) - errors)
    assert len(errors) >= 60  # the walk found the package's rules, not an empty module list
    assert len(mirrored_modules()) >= 10  # the walk found the mirrored test modules
    assert len(NEIGHBOURS) >= len(mirrored_modules())  # each adds its own
    for code, neighbours in NEIGHBOURS.items():
        assert all(isinstance(each, Neighbour) and each.why.strip() for each in neighbours), code
        assert len({each.source + repr(each.setting) for each in neighbours}) == len(neighbours), f"{code}: duplicates"


@pytest.mark.parametrize(
    ("code", "refused"),
    [("LP201", 'lightning_presets.strategy("tp2d_hybrid", data_parallel_size=2, tensor_parallel_size=2)'),
     ("LP420", '"deepspeed_zero2_offload"')],
)  # fmt: skip
def test_the_acceptance_check_can_fail(code: str, refused: str) -> None:
    """The runner and the check see a refusal: the rule's own refused configuration is no accepted neighbour."""
    devices = 2 if code == "LP201" else [1, 3]
    neighbour = Neighbour(f'Trainer(strategy={refused}, accelerator="cuda", devices={devices})', "refused")
    assert code in accepted_problem(code, run(neighbour, trace=code))


def test_a_known_false_rejection_is_a_strict_expected_failure() -> None:
    refused = Neighbour("Trainer()", "legal", false_rejection="LP999 refuses it, and it trains")
    (mark,) = param("LP999", 0, refused).marks
    assert mark.name == "xfail"
    assert mark.kwargs == {"strict": True, "reason": "LP999 refuses it, and it trains"}
    assert not param("LP201", 0, NEIGHBOURS["LP201"][0]).marks
