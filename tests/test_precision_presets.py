"""Precision presets: resolution into plugin instances, their guards, and the guards across strategy presets.

Evidence: bf16-fp32-reduce, fp8-torchao (torchao 0.18 installed; float8 conversion runs on CPU) and nf4-bnb
(bitsandbytes 0.50.2 installed; it imports on CPU) are built for real and passed to a real Trainer/Fabric on
simulated CUDA. Transformer Engine cannot be installed without CUDA: its installed path uses a stand-in
module, its missing and broken paths are real. No FP8 or NF4 arithmetic runs here.
"""

from __future__ import annotations

import pickle
import sys
import types
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.fabric import Fabric
from lightning.pytorch import Trainer
from torch import nn

import lightning_presets
from helpers import QUIET, codes, run_forked
from lightning_presets import PresetConfigError, PresetWarning
from lightning_presets.core import hardware as _capability
from lightning_presets.plugins.torchao_float8 import float8_split
from lightning_presets.registry import requirements
from lightning_presets.registry.catalog import precision_catalog
from lightning_presets.tools.simulation import SimulatedGPU, simulated_cuda

# bitsandbytes and torchao use torch.jit.script_method, which torch 2.13 deprecates.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
needs = {
    module: pytest.mark.skipif(not requirements.is_importable(module), reason=f"{module} is not installed")
    for module in ("torchao", "bitsandbytes", "deepspeed")
}


@pytest.fixture
def fake_te(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """A Transformer Engine stand-in: enough for Lightning's plugin constructor, nothing more."""
    recipe = types.ModuleType("transformer_engine.common.recipe")

    class DelayedScaling:
        def __init__(self, **kwargs: Any) -> None:
            self.kwargs = kwargs

    recipe.DelayedScaling = DelayedScaling  # type: ignore[attr-defined]
    root = types.ModuleType("transformer_engine")
    for name, module in {
        "transformer_engine": root,
        "transformer_engine.common": types.ModuleType("transformer_engine.common"),
        "transformer_engine.common.recipe": recipe,
        "transformer_engine.pytorch": types.ModuleType("transformer_engine.pytorch"),
    }.items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr("lightning.fabric.plugins.precision.transformer_engine._TRANSFORMER_ENGINE_AVAILABLE", True)
    return root


def test_the_catalog_lists_the_four_presets() -> None:
    catalog = precision_catalog()
    assert sorted(catalog.presets) == ["bf16-fp32-reduce", "fp8-te", "fp8-torchao", "nf4-bnb"]
    for preset in catalog.presets.values():
        assert preset.distribution == "lightning-presets"
        assert preset.targets == ("trainer", "fabric", "pytorch_lightning", "lightning_fabric")
        assert {"lightning", "torch", "evidence"} <= set(preset.tested_with)


def test_unknown_name_and_unknown_key() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-torchoa")
    assert codes(excinfo) == ("LP010",)
    assert "'fp8-torchao'" in excinfo.value.findings[0].hint
    with simulated_cuda(1), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("bf16-fp32-reduce", reduce_dtype="float32")
    assert codes(excinfo) == ("LP006",)


# --- bf16-fp32-reduce -------------------------------------------------------------------------------


def test_bf16_fp32_reduce_is_accepted_by_the_fsdp_preset(cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("bf16-fp32-reduce")
    trainer = Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, plugins=[plugin], **QUIET)
    assert trainer.strategy.precision_plugin is plugin
    config = trainer.strategy.mixed_precision_config
    assert (config.param_dtype, config.reduce_dtype, config.buffer_dtype) == (
        torch.bfloat16,
        torch.float32,
        torch.float32,
    )
    assert trainer.strategy._lp_context.precision_is("FSDPPrecision")


def test_bf16_fp32_reduce_for_fabric(cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("bf16-fp32-reduce", target="fabric")
    fabric = Fabric(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, plugins=[plugin])
    assert fabric.strategy.mixed_precision_config.reduce_dtype == torch.float32


def test_each_namespace_gets_its_own_plugin_class(cuda8: SimulatedGPU) -> None:
    import lightning_fabric
    import pytorch_lightning

    trainer_plugin = lightning_presets.precision("bf16-fp32-reduce", target="pytorch_lightning")
    fabric_plugin = lightning_presets.precision("bf16-fp32-reduce", target="lightning_fabric")
    assert isinstance(trainer_plugin, pytorch_lightning.plugins.precision.FSDPPrecision)
    assert isinstance(fabric_plugin, lightning_fabric.plugins.precision.FSDPPrecision)
    assert type(trainer_plugin).__name__ == "BF16FP32ReducePrecision"
    trainer = pytorch_lightning.Trainer(
        strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, plugins=[trainer_plugin], **QUIET
    )
    assert trainer.strategy.mixed_precision_config.reduce_dtype == torch.float32


def test_plugins_survive_pickling_for_spawned_workers(cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("bf16-fp32-reduce", target="fabric")
    copy = pickle.loads(pickle.dumps(plugin))
    assert type(copy) is type(plugin)
    assert copy._lp_preset is plugin._lp_preset
    assert copy.mixed_precision_config.reduce_dtype == torch.float32
    assert copy._lp_precision_context == plugin._lp_precision_context


def test_lightnings_own_bf16_mixed_reduces_in_bf16(cuda8: SimulatedGPU) -> None:
    """The neighbour: what the preset changes compared with precision='bf16-mixed'."""
    trainer = Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, precision="bf16-mixed", **QUIET)
    assert trainer.strategy.mixed_precision_config.reduce_dtype == torch.bfloat16


def test_lp603_no_cuda_device() -> None:
    with simulated_cuda(0), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("bf16-fp32-reduce")
    assert codes(excinfo) == ("LP603",)


def test_lp615_bf16_fp32_reduce_on_a_v100_is_emulated_and_warned_like_any_bf16() -> None:
    """torch emulates bf16 below Ampere (is_bf16_supported(including_emulation=True)): slow, not broken. The plugin
    is built; the Trainer warns, as it does for precision='bf16-mixed' (formerly LP604 refused the plugin)."""
    with simulated_cuda(8, capability=(7, 0)):
        with warnings.catch_warnings():
            warnings.simplefilter("error", PresetWarning)
            plugin = lightning_presets.precision("bf16-fp32-reduce")
        for kwargs in ({"plugins": [plugin]}, {"precision": "bf16-mixed"}):
            with pytest.warns(PresetWarning) as caught:
                Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, **kwargs, **QUIET)
            (finding,) = [w.message.finding for w in caught if isinstance(w.message, PresetWarning)]
            assert (finding.code, finding.severity) == ("LP615", "warning")
            assert "compute capability 7.0" in finding.message
    with simulated_cuda(8, capability=(8, 0)), warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, precision="bf16-mixed", **QUIET)


@needs["deepspeed"]
def test_lp607_known_bad_combination_with_a_strategy_preset(cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("bf16-fp32-reduce")
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, plugins=[plugin], **QUIET)
    assert codes(excinfo) == ("LP607",)
    assert "communication_data_type" in excinfo.value.findings[0].message


def test_lp606_cuda_only_precision_on_another_accelerator(fake_te: types.ModuleType, cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("fp8-te")
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, plugins=[plugin], **QUIET)
    assert codes(excinfo) == ("LP606",)
    Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8, plugins=[plugin], **QUIET)


@needs["torchao"]
def test_fp8_torchao_is_accepted_on_cpu(cuda8: SimulatedGPU) -> None:
    """torch's _scaled_mm has a CPU kernel: a float8 step runs on CPU (emulated), so CPU is not refused."""
    plugin = lightning_presets.precision("fp8-torchao")
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, plugins=[plugin], **QUIET)


@needs["deepspeed"]
@needs["torchao"]
@pytest.mark.parametrize("name", ["fp8-torchao", "nf4-bnb"])
def test_lp607_deepspeed_cannot_drive_other_precision_plugins(bnb: None, cuda8: SimulatedGPU, name: str) -> None:
    plugin = lightning_presets.precision(name)
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, plugins=[plugin], **QUIET)
    assert codes(excinfo) == ("LP607",)
    assert "a closure it never calls" in excinfo.value.findings[0].message


# --- fp8-torchao ------------------------------------------------------------------------------------


class Mixed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64))
        self.head = nn.Linear(64, 10)


def test_float8_split_names_the_layers_left_out() -> None:
    convertible, skipped = float8_split(Mixed())
    assert convertible == ["body.0", "body.2"]
    assert skipped == [("head", 64, 10)]
    assert float8_split(Mixed(), ignore_modules=["head", "body.0"]) == (["body.2"], [])


@needs["torchao"]
def test_fp8_torchao_converts_divisible_linears_and_names_the_rest() -> None:
    from torchao.float8.float8_linear import Float8Linear

    with simulated_cuda(1, capability=(9, 0)):
        plugin = lightning_presets.precision("fp8-torchao")
        model = Mixed()
        with pytest.warns(PresetWarning, match=r"\[LP610\].*head \(64→10\)"):
            converted = plugin.convert_module(model)
    assert type(plugin).__name__ == "TorchaoFloat8Precision"
    assert plugin.precision == "bf16-mixed"
    assert isinstance(converted.body[0], Float8Linear)
    assert isinstance(converted.body[2], Float8Linear)
    assert type(converted.head) is nn.Linear


@needs["torchao"]
def test_fp8_torchao_ignore_modules_silences_the_warning(recwarn: pytest.WarningsRecorder) -> None:
    with simulated_cuda(1, capability=(9, 0)):
        plugin = lightning_presets.precision("fp8-torchao", ignore_modules=["head"])
        plugin.convert_module(Mixed())
    assert not [w for w in recwarn if isinstance(w.message, PresetWarning)]


@needs["torchao"]
def test_lp611_nothing_to_convert_is_warned() -> None:
    """The model trains in bf16 autocast instead of FP8: not what was asked, but not wrong (formerly an error)."""
    with simulated_cuda(1, capability=(9, 0)):
        plugin = lightning_presets.precision("fp8-torchao")
        with pytest.warns(PresetWarning) as caught:
            plugin.convert_module(nn.Sequential(nn.Linear(10, 30), nn.Linear(30, 2)))
    (finding,) = [w.message.finding for w in caught if isinstance(w.message, PresetWarning)]
    assert (finding.code, finding.severity) == ("LP611", "warning")
    assert "0 (10→30), 1 (30→2)" in finding.message


@needs["torchao"]
def test_lp604_fp8_refuses_capability_below_8_9() -> None:
    with simulated_cuda(8, capability=(8, 0)), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-torchao")
    assert codes(excinfo) == ("LP604",)
    assert "needs 8.9 or newer" in excinfo.value.findings[0].message
    with simulated_cuda(8, capability=(8, 9)):
        lightning_presets.precision("fp8-torchao")


@needs["torchao"]
def test_capability_unknown_warns_then_is_checked_at_conversion(monkeypatch: pytest.MonkeyPatch) -> None:
    with simulated_cuda(8, capability=(8, 0)):
        monkeypatch.setattr(_capability, "observed_capability", lambda: None)
        with pytest.warns(PresetWarning, match=r"\[LP605\]"):
            plugin = lightning_presets.precision("fp8-torchao")
        with pytest.raises(PresetConfigError) as excinfo:  # in the training process, CUDA is in use: read it
            plugin.convert_module(nn.Linear(16, 16))
    assert codes(excinfo) == ("LP604",)
    assert "when the plugin" not in excinfo.value.findings[0].message


@needs["torchao"]
def test_lp612_unknown_recipe() -> None:
    with simulated_cuda(1), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-torchao", recipe="rowwize")
    assert codes(excinfo) == ("LP612",)
    with simulated_cuda(1):
        assert lightning_presets.precision("fp8-torchao", recipe="rowwise").recipe == "rowwise"


def test_missing_torchao_is_an_install_hint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torchao", None)
    with simulated_cuda(1), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-torchao")
    assert codes(excinfo) == ("LP007",)
    assert excinfo.value.findings[0].hint == "install it with: pip install 'torchao>=0.18'"


@needs["torchao"]
def test_fp8_torchao_with_the_fsdp1_preset_is_refused(cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("fp8-torchao")
    with pytest.raises(TypeError, match="FSDPPrecision"):  # Lightning's own construction error
        Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, plugins=[plugin], **QUIET)
    trainer = Trainer(accelerator="cuda", devices=8, strategy="ddp", plugins=[plugin], **QUIET)
    assert trainer.precision_plugin is plugin


# --- fp8-te -----------------------------------------------------------------------------------------


def test_missing_transformer_engine_is_an_install_hint() -> None:
    if requirements.is_importable("transformer_engine"):
        pytest.skip("transformer_engine is installed here")
    with simulated_cuda(1), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-te")
    assert codes(excinfo) == ("LP007",)
    assert excinfo.value.findings[0].hint == "install it with: pip install 'transformer-engine[pytorch]>=0.11'"


def test_broken_transformer_engine_reports_its_first_error_line(tmp_path: Path) -> None:
    package = tmp_path / "transformer_engine"
    package.mkdir()
    (package / "__init__.py").write_text('raise OSError("libcudart.so.12: cannot open shared object file\\nx")\n')
    # Forked from the harness's server, with the broken package first on sys.path as PYTHONPATH would put it: the
    # server never imported transformer_engine (asserted), so the import below is the package's first.
    result = run_forked(
        f"""
        import sys
        assert "transformer_engine" not in sys.modules
        sys.path.insert(0, {str(tmp_path)!r})
        import lightning_presets
        from lightning_presets.tools.simulation import simulated_cuda
        with simulated_cuda(1):
            try:
                lightning_presets.precision("fp8-te")
            except lightning_presets.PresetConfigError as error:
                print("CODES", error.codes, error.findings[0].message)
        """
    )
    assert "CODES ('LP601',)" in result.stdout, result.stdout + result.stderr
    assert "OSError: libcudart.so.12: cannot open shared object file" in result.stdout


def test_old_transformer_engine_is_refused(fake_te: types.ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"transformer_engine": "0.10.0", "torch": "2.13.0"}
    monkeypatch.setattr(requirements, "installed_version", lambda name: versions.get(name))
    with simulated_cuda(1), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-te")
    assert codes(excinfo) == ("LP602",)


def test_fp8_te_builds_lightnings_plugin(fake_te: types.ModuleType, cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("fp8-te", weights_dtype="float16")
    assert type(plugin).__name__ == "TransformerEnginePrecision"
    assert plugin.weights_dtype is torch.float16
    trainer = Trainer(accelerator="cuda", devices=8, plugins=[plugin], **QUIET)
    assert trainer.precision_plugin is plugin


def test_fp8_te_refuses_ampere(fake_te: types.ModuleType) -> None:
    with simulated_cuda(8, capability=(8, 6)), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-te")
    assert codes(excinfo) == ("LP604",)
    assert "compute capability 8.6" in excinfo.value.findings[0].message
    assert "silently falling back" in excinfo.value.findings[0].message


def test_lp613_dtype_names(fake_te: types.ModuleType) -> None:
    with simulated_cuda(1), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-te", weights_dtype="bf16")
    assert codes(excinfo) == ("LP613",)


@needs["deepspeed"]
def test_fp8_te_with_deepspeed_says_why(fake_te: types.ModuleType, cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("fp8-te")
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8, plugins=[plugin], **QUIET)
    assert codes(excinfo) == ("LP607",)
    assert "runs in fp32 around TE's bf16 weights" in excinfo.value.findings[0].message


# --- nf4-bnb ----------------------------------------------------------------------------------------


@pytest.fixture
def bnb() -> None:
    """bitsandbytes picks its backend from torch.cuda.is_available() when imported: import it on the real,
    CPU-only hardware first, so that the simulated CUDA does not make it load its CUDA library."""
    if not requirements.is_importable("bitsandbytes"):
        pytest.skip("bitsandbytes is not installed")
    import bitsandbytes  # noqa: F401


def test_nf4_bnb_builds_double_quantized_nf4(bnb: None, cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("nf4-bnb", ignore_modules=["head"])
    assert plugin._linear_cls.__name__ == "_NF4DQLinear"
    assert plugin.dtype is torch.bfloat16
    assert plugin.ignore_modules == {"head"}
    trainer = Trainer(accelerator="cuda", devices=1, plugins=[plugin], **QUIET)
    assert trainer.precision_plugin is plugin


def test_lp609_nf4_bf16_below_ampere_is_warned(bnb: None) -> None:
    with simulated_cuda(1, capability=(7, 5)), pytest.warns(PresetWarning) as caught:
        lightning_presets.precision("nf4-bnb")
    (finding,) = [w.message.finding for w in caught if isinstance(w.message, PresetWarning)]
    assert (finding.code, finding.severity) == ("LP609", "warning")
    assert "dtype='float16'" in finding.hint
    with simulated_cuda(1, capability=(7, 5)), warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        assert lightning_presets.precision("nf4-bnb", dtype="float16").dtype is torch.float16


def test_nf4_bnb_needs_cuda(bnb: None) -> None:
    with simulated_cuda(0), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("nf4-bnb")
    assert codes(excinfo) == ("LP603",)


def test_nf4_bnb_needs_bitsandbytes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bitsandbytes", None)
    with simulated_cuda(1), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("nf4-bnb")
    assert codes(excinfo) == ("LP007",)
    assert "pip install 'bitsandbytes>=0.42'" in excinfo.value.findings[0].hint


# --- reading the compute capability without initialising CUDA ------------------------------------------


def test_capability_is_unknown_without_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_capability, "_load_nvml", lambda: None)
    _capability._read_nvml.cache_clear()
    assert _capability.observed_capability() is None
    with simulated_cuda(2, capability=(8, 9)):
        assert _capability.observed_capability() == (8, 9)
    with simulated_cuda(0):
        assert _capability.observed_capability() is None
    _capability._read_nvml.cache_clear()


def test_fp8_te_with_tp2d_hybrid_is_refused(fake_te: types.ModuleType, cuda8: SimulatedGPU) -> None:
    plugin = lightning_presets.precision("fp8-te")
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, plugins=[plugin], **QUIET)
    assert "'transformer-engine'" in str(excinfo.value)


def test_a_missing_dependency_does_not_hide_the_hardware_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Installing Transformer Engine would not make an A100 run FP8: both findings come at once."""
    monkeypatch.setitem(sys.modules, "transformer_engine", None)
    with simulated_cuda(8, capability=(8, 0)), pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.precision("fp8-te")
    assert codes(excinfo) == ("LP007", "LP604")
    assert "pip install 'transformer-engine[pytorch]>=0.11'" in excinfo.value.findings[0].hint
    assert "needs 8.9 or newer" in excinfo.value.findings[1].message
