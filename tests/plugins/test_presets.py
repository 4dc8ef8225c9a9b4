"""``lightning_presets.plugins.presets`` (the precision presets' own options): each error rule's executed proof
(``proves``), its accepted neighbours (run, and each rule widened, by ``neighbours.neighbour_tests``).
"""

from __future__ import annotations

import pytest
from proof import Proof
from torch import nn

import lightning_presets
from lightning_presets.registry import requirements
from lightning_presets.tools.simulation import simulated_cuda
from neighbours import Neighbour, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")
needs_bitsandbytes = pytest.mark.skipif(not requirements.is_importable("bitsandbytes"), reason="no bitsandbytes")
needs_torchao = pytest.mark.skipif(not requirements.is_importable("torchao"), reason="torchao is not installed")

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP612",
    *(
        n(f'lightning_presets.precision("fp8-torchao", recipe="{recipe}")', f"torchao's {recipe} recipe")
        for recipe in ("tensorwise", "rowwise", "rowwise_with_gw_hp")
    ),
)
_add(
    "LP613",
    *(
        n(f'lightning_presets.precision("nf4-bnb", dtype="{dtype}")', f"dtype={dtype}")
        for dtype in ("bfloat16", "float16", "float32")
    ),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@needs_torchao
@pytest.mark.proves("LP612")
def test_lp612_torchao_refuses_an_unknown_recipe_when_the_model_is_converted(proof: Proof) -> None:
    proof.refused("LP612", lambda: lightning_presets.precision("fp8-torchao", recipe="rowwize"))
    with proof.guard_off("LP612"), proof.raises(AssertionError, r"recipe_name rowwize not in valid names"):
        lightning_presets.precision("fp8-torchao", recipe="rowwize").convert_module(nn.Sequential(nn.Linear(32, 32)))


@needs_bitsandbytes
@pytest.mark.proves("LP613")
def test_lp613_torch_has_no_dtype_called_bf16(proof: Proof) -> None:
    with simulated_cuda(1):
        proof.refused("LP613", lambda: lightning_presets.precision("nf4-bnb", dtype="bf16"))
        with proof.guard_off("LP613"), proof.raises(AttributeError, r"has no attribute 'bf16'"):
            lightning_presets.precision("nf4-bnb", dtype="bf16")
