"""Every error rule's legal side: each accepted neighbour runs on simulated hardware and is accepted, every error rule
has at least three, and the known false rejections are strict expected failures.

The neighbours live in the test module that mirrors their rule's module (``strategies/deepspeed/config_rules.py``'s in
``tests/strategies/deepspeed/test_config_rules.py``), which runs them; the checks over all of them stay here."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from harness import run_job
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


# --- the review's false rejections, run for real: 2 processes on CPU (gloo) through the fork server --------------
# A fresh job per test (about a second once the server is up): the proof that the neighbour the rule used to refuse
# trains, with every guard on.
TESTS = str(Path(__file__).resolve().parent)


def _trained(job: str) -> dict[str, Any]:
    result = run_job(f"neighbours:{job}", path=(TESTS,), timeout=180)
    assert result.outcome == "trained", result.describe()
    (report,) = result.reports()
    assert len(report["losses"]) == 3
    assert all(math.isfinite(loss) for loss in report["losses"])
    return dict(report)


def test_64_true_trains_with_tp2d_hybrid_on_two_processes() -> None:
    """LP205's neighbour: precision='64-true' by name, every parameter a float64 DTensor of the 1×2 mesh."""
    report = _trained("train_tp2d_64_true")
    assert report["dtypes"] == ["torch.float64"]
    assert report["dtensors"] == report["parameters"] > 0
    assert report["losses"][-1] < report["losses"][0]


def test_clipping_by_norm_trains_with_a_frozen_tensor_parallel_layer_on_two_processes() -> None:
    """LP215's neighbour: parameters on two meshes, the tensor-parallel ones frozen, gradient_clip_val by norm."""
    report = _trained("train_tp2d_frozen_tensor_parallel_clipped")
    assert report["meshes"] == ["('data_parallel',)", "('tensor_parallel',)"]
    assert report["frozen"] == 2
    assert report["losses"][-1] < report["losses"][0]


def test_ddp_bf16_compress_trains_plain_ddp_on_cpu_on_two_processes() -> None:
    """LP303's neighbour: the Trainer on CPU trains (the hook is left out), the ranks' weights identical after."""
    assert _trained("train_ddp_bf16_compress_on_cpu")["same_weights"] is True


def test_a_known_false_rejection_is_a_strict_expected_failure() -> None:
    refused = Neighbour("Trainer()", "legal", false_rejection="LP999 refuses it, and it trains")
    (mark,) = param("LP999", 0, refused).marks
    assert mark.name == "xfail"
    assert mark.kwargs == {"strict": True, "reason": "LP999 refuses it, and it trains"}
    assert not param("LP201", 0, NEIGHBOURS["LP201"][0]).marks
