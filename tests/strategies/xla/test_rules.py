"""``lightning_presets.strategies.xla`` (xla_fsdp_ckpt): each error rule's executed proof (``proves``: Lightning's XLA
FSDP strategy on a stand-in torch_xla; LP503's is still a source citation), its accepted neighbours (run, and each
rule widened, by ``neighbours.neighbour_tests``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from proof import Proof
from torch import nn

import lightning_presets
from neighbours import XLA, XLA_GPU8, Neighbour, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")
XLA_FSDP = "xla_fsdp_ckpt"

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP503",
    n('Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8)', "TPU", XLA_GPU8),
    n('Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8, num_nodes=2)', "TPU, 2 hosts", XLA_GPU8),
    n('Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices="auto")', "TPU, every device", XLA_GPU8),
)
_add(
    "LP504",
    n('Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices="auto", num_nodes=4)', "every device", XLA),
    n('Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8, num_nodes=4)', "8 per host", XLA),
    n('Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8)', "8 devices on one host", XLA),
)
_xla = 'Fabric(strategy=lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", {}), accelerator="tpu", devices=8)'
_add(
    "LP505",
    n(_xla.format("activation_checkpointing_policy={nn.TransformerEncoderLayer}"), "a set of one class", XLA),
    n(_xla.format("activation_checkpointing_policy={nn.TransformerEncoderLayer, nn.Linear}"), "two classes", XLA),
    n(_xla.format("activation_checkpointing_policy=None"), "None: the repeated blocks found", XLA),
    n(_xla.format("activation_checkpointing_policy=set()"), "an empty set: nothing checkpointed", XLA),
)
_add(
    "LP506",
    n(_xla.format("activation_checkpointing_policy={nn.TransformerEncoderLayer}"), "the preset's own wrapper", XLA),
    n(_xla.format("auto_wrapper_callable=None"), "auto_wrapper_callable=None", XLA),
    n('Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8)', "the preset as it is", XLA),
)
_add(
    "LP509",
    n(_xla.format('state_dict_type="full"'), "full", XLA),
    n(_xla.format('state_dict_type="sharded"'), "sharded", XLA),
    n('Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8)', "the preset's default (sharded)", XLA),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


def _without_init() -> Any:
    """Lightning's XLAFSDPStrategy without its constructor (which needs torch_xla), for its torch_xla-free methods."""
    from lightning.fabric.strategies import XLAFSDPStrategy

    return XLAFSDPStrategy.__new__(XLAFSDPStrategy)


@pytest.mark.proves("LP504")
def test_lp504_xla_fsdp_refuses_a_single_device(proof: Proof) -> None:
    from lightning.fabric import Fabric

    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("torch_xla"):
        proof.refused("LP504", lambda: Fabric(strategy=XLA_FSDP, accelerator="tpu", devices=1))
    strategy = _without_init()
    strategy._parallel_devices = [torch.device("cpu")]  # what devices=1 leaves there
    with proof.raises(NotImplementedError, r"does not support running on a single device", code="LP504"):
        strategy.setup_environment()


@pytest.mark.proves("LP505", "LP506")
def test_lp505_lp506_lightning_refuses_the_checkpointing_arguments(proof: Proof) -> None:
    from lightning.fabric.strategies.xla_fsdp import _activation_checkpointing_kwargs

    from lightning_presets.tools.simulation.stand_ins import standing_in

    def my_wrapper(module: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        return module

    with standing_in("torch_xla"):
        proof.refused("LP505", lambda: lightning_presets.strategy(
            XLA_FSDP, target="fabric", activation_checkpointing_policy=[nn.TransformerEncoderLayer]))  # fmt: skip
        proof.refused("LP506", lambda: lightning_presets.strategy(
            XLA_FSDP, target="fabric", auto_wrapper_callable=my_wrapper))  # fmt: skip
    with proof.raises(TypeError, r"`activation_checkpointing_policy` must be a set", code="LP505"):
        _activation_checkpointing_kwargs([nn.TransformerEncoderLayer], {})
    # LP506: the preset sets the policy to the blocks it found, and the user's wrapper is in the kwargs.
    with proof.raises(ValueError, r"cannot set both `auto_wrapper_callable` and", code="LP506"):
        _activation_checkpointing_kwargs({nn.TransformerEncoderLayer}, {"auto_wrapper_callable": my_wrapper})


@pytest.mark.proves("LP509")
def test_lp509_xla_fsdp_refuses_an_unknown_state_dict_type(proof: Proof, tmp_path: Path) -> None:
    from lightning_presets.tools.simulation.stand_ins import standing_in

    def build() -> Any:
        return lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", state_dict_type="consolidated")

    with standing_in("torch_xla"):
        sys.modules["torch_xla.distributed.fsdp"].XlaFullyShardedDataParallel = type("XlaFSDP", (torch.nn.Module,), {})
        proof.refused("LP509", build)
        with proof.guard_off("LP509"):
            strategy = build()
            strategy.broadcast = lambda obj, src=0: obj
            with proof.raises(ValueError, "Unknown state_dict_type: consolidated"):
                strategy.load_checkpoint(tmp_path, state={"model": torch.nn.Linear(2, 2)})
