"""``lightning_presets.strategies.fsdp`` (FSDPStrategy's presets): each error rule's executed proof (``proves``; LP117's
reads the shared 2-process run of ``tests/evidence/`` and stays there), its accepted neighbours (run, and each rule
widened, by ``neighbours.neighbour_tests``).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from jobs import QUIET, fit, trainer
from lightning.pytorch import LightningModule, Trainer
from proof import Proof
from torch import nn

import lightning_presets
from lightning_presets.tools.simulation import SimulatedGPU
from neighbours import CLIPPING_MODULE, LINEAR, Neighbour, _hybrid, _t, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP101",
    n(_t('"fsdp_offload_ckpt"'), "FSDP on the 8 CUDA devices it needs"),
    n(_t('"fsdp_offload_ckpt"', "gpu"), "'gpu' is Lightning's alias of 'cuda'"),
    n(_t('"fsdp_grad_op"', "cuda", "", 2), "two CUDA devices"),
    n(_t('"fsdp_offload_ckpt"', "auto"), "'auto' resolves to CUDA on a GPU node"),
)
_fsdp = 'lightning_presets.strategy("fsdp_offload_ckpt", {})'
_add(
    "LP104",
    *(
        n(_t(_fsdp.format(f"sharding_strategy={value}")), f"sharding_strategy={value}: a torch ShardingStrategy name")
        for value in ('"SHARD_GRAD_OP"', '"NO_SHARD"', '"full_shard"')
    ),
    n(
        "from torch.distributed.fsdp import ShardingStrategy\n"
        + _t(_fsdp.format("sharding_strategy=ShardingStrategy.SHARD_GRAD_OP")),
        "the enum itself, which Lightning takes as given",
    ),
)
_add(
    "LP105",
    n(_t(_fsdp.format('state_dict_type="full"')), "state_dict_type='full': one consolidated file"),
    n(_t(_fsdp.format('state_dict_type="sharded"')), "state_dict_type='sharded': a DCP folder"),
    n(
        _t('lightning_presets.strategy("fsdp_grad_op", state_dict_type="sharded")'),
        "another FSDP preset, the same value",
    ),
)
_add(
    "LP117",
    n(_t('lightning_presets.strategy("fsdp_grad_op")'), "no device_mesh: a 1-D job needs none"),
    n(
        _t('lightning_presets.strategy("fsdp_grad_op", device_mesh=(8,))'),
        "a 1-D mesh with a sharding that is not hybrid",
    ),
    n(
        _t('lightning_presets.strategy("fsdp_grad_op", sharding_strategy="HYBRID_SHARD", device_mesh=(2, 4))'),
        "a 2-D mesh with hybrid sharding set on the preset",
    ),
    n(_t(_hybrid.format("device_mesh=(2, 8)"), "cuda", ", num_nodes=2"), "hybrid sharding's own preset"),
)
_fsdp_clip = '"fsdp_offload_ckpt"'
_add(
    "LP118",
    n(
        _t(_fsdp_clip, "cuda", ', gradient_clip_val=1.0, gradient_clip_algorithm="value"') + f".fit({LINEAR})",
        "clipping by value: FSDPPrecision refuses only clipping by norm",
    ),
    n(_t(_fsdp_clip) + f".fit({LINEAR})", "no clipping at all"),
    n(
        CLIPPING_MODULE + _t(_fsdp_clip, "cuda", ", gradient_clip_val=1.0") + ".fit(Model())",
        "by norm through the FSDP root in configure_gradient_clipping, as the hint says",
    ),
    n(
        "from lightning.pytorch.utilities import GradClipAlgorithmType\n"
        + _t(_fsdp_clip, "cuda", ", gradient_clip_val=1.0, gradient_clip_algorithm=GradClipAlgorithmType.VALUE")
        + f".fit({LINEAR})",
        "clipping by value given as Lightning's enum",
    ),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@pytest.mark.proves("LP101")
def test_lp101_fsdp_on_cpu_fails_when_the_model_is_wrapped(proof: Proof) -> None:
    proof.refused("LP101", lambda: trainer("fsdp_offload_ckpt"))
    with proof.guard_off("LP101"), proof.raises(RuntimeError, r"FSDP needs a non-CPU accelerator device"):
        fit("fsdp_offload_ckpt")


@pytest.mark.proves("LP104")
def test_lp104_an_unknown_sharding_strategy_fails_in_lightnings_constructor(proof: Proof) -> None:
    def strategy() -> object:
        return lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARDED")

    proof.refused("LP104", strategy)
    with proof.guard_off("LP104"), proof.raises(KeyError, r"FULL_SHARDED"):
        strategy()


@pytest.mark.proves("LP105")
def test_lp105_an_unknown_state_dict_type_fails_at_the_first_checkpoint(proof: Proof) -> None:
    def strategy() -> Any:
        return lightning_presets.strategy("fsdp_offload_ckpt", state_dict_type="sharding")

    proof.refused("LP105", strategy)
    with proof.guard_off("LP105"):
        built = strategy()
        built.model = nn.Linear(2, 2)  # what setup leaves there; FSDP itself needs CUDA
        with proof.raises(ValueError, r"Unknown state_dict_type: sharding"):
            built.lightning_module_state_dict()  # what Trainer.save_checkpoint calls first


@pytest.mark.proves("LP118")
def test_lp118_fsdp_precision_refuses_clipping_by_norm(proof: Proof, cuda8: SimulatedGPU) -> None:
    """The precision plugin the FSDP preset runs with refuses the Trainer's default clipping at the optimizer step."""
    from lightning.fabric.utilities.exceptions import MisconfigurationException
    from lightning.pytorch.utilities import GradClipAlgorithmType

    def build() -> Trainer:
        trainer = Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gradient_clip_val=1.0, **QUIET)
        trainer.strategy._lp_check_model(LightningModule())
        return trainer

    proof.refused("LP118", build)
    layer = torch.nn.Linear(4, 1)
    layer(torch.ones(1, 4)).sum().backward()
    optimizer = torch.optim.SGD(layer.parameters(), lr=0.1)
    with proof.guard_off("LP118"):
        trainer = build()
        with proof.raises(MisconfigurationException, r"gradient_clip_algorithm='norm'.* not supported"):
            trainer.precision_plugin.clip_gradients(optimizer, 1.0, GradClipAlgorithmType.NORM)
    trainer.precision_plugin.clip_gradients(optimizer, 1.0, GradClipAlgorithmType.VALUE)  # the fix: by value
