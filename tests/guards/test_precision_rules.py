"""``lightning_presets.guards.precision_rules``: each error rule's executed proof (``proves``; LP604's is a GPU check,
``benchmarks/gpu/gpu_checks.py``), its accepted neighbours (run, and each rule widened, by
``neighbours.neighbour_tests``).
"""

from __future__ import annotations

import pytest
from jobs import Steps, fit, trainer
from proof import Proof

import lightning_presets
from lightning_presets.registry import requirements
from lightning_presets.tools.simulation import simulated_cuda
from neighbours import TE, Neighbour, Setting, _t, adder, n, neighbour_tests

pytestmark = pytest.mark.usefixtures("process_group")
needs_bitsandbytes = pytest.mark.skipif(not requirements.is_importable("bitsandbytes"), reason="no bitsandbytes")
needs_torchao = pytest.mark.skipif(not requirements.is_importable("torchao"), reason="torchao is not installed")

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP603",
    n('lightning_presets.precision("nf4-bnb")', "a CUDA GPU"),
    n('lightning_presets.precision("bf16-fp32-reduce")', "another CUDA-only preset on a CUDA GPU"),
    n('lightning_presets.precision("fp8-te")', "fp8-te on an H100", TE),
    n('lightning_presets.precision("nf4-bnb")', "a single CUDA GPU", Setting(gpus=1)),
)
_add(
    "LP604",
    n('lightning_presets.precision("fp8-te")', "an H100 (9.0)", Setting(simulated=("transformer_engine",))),
    n(
        'lightning_presets.precision("fp8-te")',
        "an L4 (8.9): the boundary",
        Setting(capability=(8, 9), simulated=("transformer_engine",)),
    ),
    n('lightning_presets.precision("fp8-torchao")', "torchao float8 on 8.9", Setting(capability=(8, 9))),
    n('lightning_presets.precision("bf16-fp32-reduce")', "an A100 (8.0) for bf16", Setting(capability=(8, 0))),
)
_add(
    "LP606",
    n(_t('"fsdp_hybrid_shard"', "cuda", ', plugins=[lightning_presets.precision("bf16-fp32-reduce")]'), "CUDA", TE),
    n(_t('"fsdp_grad_op"', "cuda", ', plugins=[lightning_presets.precision("bf16-fp32-reduce")]'), "CUDA", TE),
    n(_t('"fsdp_offload_ckpt"', "cuda", ', plugins=[lightning_presets.precision("bf16-fp32-reduce")]'), "CUDA", TE),
    n(_t('"fsdp_offload_ckpt"', "gpu", ', plugins=[lightning_presets.precision("bf16-fp32-reduce")]'), "'gpu'", TE),
)
_reduce = ', plugins=[lightning_presets.precision("bf16-fp32-reduce")]'
_add(
    "LP607",
    n(_t('"fsdp_offload_ckpt"', "cuda", _reduce), "bf16-fp32-reduce is an FSDP precision"),
    n(_t('"fsdp_grad_op"', "cuda", _reduce), "another FSDP preset"),
    n(_t('"fsdp_hybrid_shard"', "cuda", _reduce), "a third FSDP preset"),
    n(_t('"deepspeed_zero2_offload"', "cuda", ', precision="bf16-mixed"'), "DeepSpeed with precision= instead"),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@needs_bitsandbytes
@pytest.mark.proves("LP603", "LP606")
def test_lp603_lp606_lightning_refuses_bitsandbytes_off_cuda(proof: Proof) -> None:
    proof.refused("LP603", lambda: lightning_presets.precision("nf4-bnb"))  # no CUDA device in this process
    with proof.guard_off("LP603"):
        plugin = lightning_presets.precision("nf4-bnb")
        with proof.raises(RuntimeError, r"Bitsandbytes is only supported on CUDA GPUs"):
            trainer("ddp", plugins=[plugin])
    with simulated_cuda(8):  # a GPU host, the job asks for the CPU: Lightning refuses before the guard runs
        plugin = lightning_presets.precision("nf4-bnb")
        with proof.raises(RuntimeError, r"only supported on CUDA GPUs", code="LP606"):
            trainer("ddp", devices=2, plugins=[plugin])


@needs_torchao
@pytest.mark.proves("LP607")
def test_lp607_torchao_float8_after_fully_shard_fails_at_the_first_step(proof: Proof) -> None:
    """fp8-torchao with the Trainer's ModelParallelStrategy (its incompatible entry ``model_parallel:trainer``)."""
    proof.refused("LP607", lambda: trainer("fsdp2", plugins=[lightning_presets.precision("fp8-torchao")]))
    with proof.guard_off("LP607"), proof.raises(RuntimeError, r"got mixed torch.Tensor and DTensor"):
        fit("fsdp2", Steps(), plugins=[lightning_presets.precision("fp8-torchao")])
