"""Precision presets (fp8-te, fp8-torchao, nf4-bnb, bf16-fp32-reduce) and their rules across strategies."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from jobs import Steps, fit, trainer
from proof import Proof
from test_fails_xla import broken_package, fresh_requirement
from torch import nn

import lightning_presets
from lightning_presets.registry import requirements
from lightning_presets.tools.simulation import simulated_cuda

pytestmark = pytest.mark.usefixtures("process_group")
needs_bitsandbytes = pytest.mark.skipif(not requirements.is_importable("bitsandbytes"), reason="no bitsandbytes")
needs_torchao = pytest.mark.skipif(not requirements.is_importable("torchao"), reason="torchao is not installed")


@pytest.mark.proves("LP601", "LP602")
def test_lp601_lp602_transformer_engine_must_import_and_be_recent(
    proof: Proof, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.fabric.plugins.precision import transformer_engine

    cases = (("1.12.0", "LP601", ImportError, r"undefined symbol"),  # installed and recent, but broken
             ("0.10.0", "LP602", ModuleNotFoundError, r"transformer.engine>=0\.11\.0"))  # fmt: skip
    for version, code, error, match in cases:
        site = tmp_path / version
        broken_package(site, "transformer_engine", version, "libtransformer_engine.so: undefined symbol")
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.delitem(sys.modules, "transformer_engine", raising=False)
        fresh_requirement(transformer_engine, "_TRANSFORMER_ENGINE_AVAILABLE", monkeypatch)
        with proof.raises(error, match, code=code):
            transformer_engine.TransformerEnginePrecision(weights_dtype=__import__("torch").bfloat16)


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
