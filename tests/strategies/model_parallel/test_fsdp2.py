"""``lightning_presets.strategies.model_parallel.fsdp2``: LP211's executed proofs (``proves``), its accepted
neighbours (run, and the rule widened, by ``neighbours.neighbour_tests``).

The refused mesh sizes, run on CPU with the guard switched off, fail in Lightning after the process group exists (one
gloo process suffices).
"""

from __future__ import annotations

import pytest
from jobs import fit, trainer
from proof import Proof

import lightning_presets
from neighbours import Neighbour, _t, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_f2 = 'lightning_presets.strategy("fsdp2", {})'
_add(
    "LP211",
    n(_t(_f2.format("data_parallel_size=2, tensor_parallel_size=1"), "cpu", "", 2), "2 × 1 = 2"),
    n(_t(_f2.format("data_parallel_size=1, tensor_parallel_size=2"), "cpu", "", 2), "1 × 2 = 2"),
    n(_t(_f2.format("data_parallel_size=8"), "cuda", "", 8), "data_parallel_size = the 8 devices"),
    n(_t(_f2.format('data_parallel_size="auto"'), "cpu", "", 2), "'auto'"),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@pytest.mark.proves("LP211")
def test_lp211_fsdp2_data_parallel_size_fails_in_the_mesh(proof: Proof) -> None:
    def strategy() -> object:
        return lightning_presets.strategy("fsdp2_offload_ckpt", data_parallel_size=2)

    proof.refused("LP211", lambda: trainer(strategy()))
    with proof.guard_off("LP211"), proof.raises(RuntimeError, r"data_parallel_size=2`.* multiplied should equal"):
        fit(strategy())


@pytest.mark.proves("LP211")
def test_lp211_fsdp2_with_tensor_parallel_beyond_the_world_fails_in_the_mesh(proof: Proof) -> None:
    """tensor_parallel_size=2 with data_parallel_size='auto' (the whole world): data × tensor is twice the world."""

    def strategy() -> object:
        return lightning_presets.strategy("fsdp2", tensor_parallel_size=2)

    proof.refused("LP211", lambda: trainer(strategy()))
    with proof.guard_off("LP211"), proof.raises(RuntimeError, r"tensor_parallel_size=2` multiplied should equal"):
        fit(strategy())
