"""ModelParallelStrategy presets (tp2d_hybrid, fsdp2, fsdp2_offload_ckpt): each refused configuration, run on CPU with
its guard switched off, fails in Lightning after the process group exists (one gloo process suffices)."""

from __future__ import annotations

import inspect

import pytest
from jobs import ShardsItself, Steps, fit, trainer
from proof import Proof

import lightning_presets

pytestmark = pytest.mark.usefixtures("process_group")


@pytest.mark.proves("LP201")
def test_lp201_sizes_that_miss_the_world_fail_in_every_process(proof: Proof) -> None:
    def strategy() -> object:
        return lightning_presets.strategy("tp2d_hybrid", data_parallel_size=2, tensor_parallel_size=1)

    proof.refused("LP201", lambda: trainer(strategy()))
    with proof.guard_off("LP201"), proof.raises(RuntimeError, r"multiplied should equal the world size \(1\)"):
        fit(strategy(), ShardsItself())


@pytest.mark.proves("LP202")
def test_lp202_a_zero_size_fails_when_the_mesh_is_built(proof: Proof) -> None:
    def strategy() -> object:
        return lightning_presets.strategy("tp2d_hybrid", tensor_parallel_size=0)

    proof.refused("LP202", strategy)
    # LP201 also sees 1 × 0 != 1: both off, Lightning gets the size as given.
    with proof.guard_off("LP202", "LP201"), proof.raises(RuntimeError, r"tensor_parallel_size=0"):
        fit(strategy(), ShardsItself())


@pytest.mark.proves("LP205")
def test_lp205_lightning_refuses_the_precision(proof: Proof) -> None:
    """Lightning's connector refuses 16-mixed on CUDA for a ModelParallelStrategy object (the preset's own class); for
    a strategy *name* the Trainer skips that check. (On CPU Lightning turns 16-mixed into bf16-mixed, which is fine.)"""
    from lightning_presets.tools.simulation import simulated_cuda

    with simulated_cuda(8):
        proof.refused("LP205", lambda: trainer("tp2d_hybrid", accelerator="cuda", devices=8, precision="16-mixed"))
        with proof.raises(ValueError, r"ModelParallelStrategy` does not support .*precision='16-mixed'", code="LP205"):
            trainer(lightning_presets.strategy("tp2d_hybrid"), accelerator="cuda", devices=8, precision="16-mixed")


@pytest.mark.parametrize("precision", ["64-true", "32-true", "bf16-mixed", "16-mixed"])
def test_lp205_accepts_what_trains_on_cpu(precision: str) -> None:
    """LP205's accepted neighbours, trained: 64-true (which Lightning's list for the object leaves out), and 16-mixed,
    which Lightning turns into bf16-mixed on CPU."""
    module = fit("fsdp2", precision=precision)
    assert len(module.losses) == 2
    assert all(loss == loss for loss in module.losses)


@pytest.mark.proves("LP206")
def test_lp206_lightning_refuses_a_parallel_strategy_on_mps(proof: Proof) -> None:
    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("mps"):  # Lightning believes in one Apple MPS device
        proof.refused("LP206", lambda: trainer("tp2d_hybrid", accelerator="mps"))
        with proof.raises(ValueError, r"not supported on the MPS accelerator", code="LP206"):
            trainer(lightning_presets.strategy("tp2d_hybrid"), accelerator="mps")


@pytest.mark.proves("LP207")
def test_lp207_fabrics_model_parallel_strategy_requires_a_parallelize_fn(proof: Proof) -> None:
    """Lightning's signature, bound as a strategy name binds it (with no arguments)."""
    from lightning.fabric import Fabric
    from lightning.fabric.strategies import ModelParallelStrategy

    proof.refused("LP207", lambda: Fabric(strategy="tp2d_hybrid", accelerator="cpu", devices=2))
    with proof.raises(TypeError, r"missing a required argument: 'parallelize_fn'", code="LP207"):
        inspect.signature(ModelParallelStrategy).bind()


@pytest.mark.proves("LP208")
def test_lp208_a_module_without_configure_model_fails_after_launch(proof: Proof) -> None:
    proof.refused("LP208", lambda: fit("tp2d_hybrid", Steps()))
    with proof.guard_off("LP208"), proof.raises(TypeError, r"required to override the `configure_model\(\)` hook"):
        fit("tp2d_hybrid", Steps())


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
