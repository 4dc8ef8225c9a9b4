"""DeepSpeed presets: the dependency paths (missing, broken, known-bad pair), the presets' construction, the config
view, DeepSpeed's parser and the block-checkpointing hook. The rules' tests live with their proofs and neighbours
(``tests/strategies/deepspeed/test_config_rules.py``, ``test_job_rules.py``).

Construction runs on simulated CUDA with DeepSpeed installed (it imports on CPU); DeepSpeed needs CUDA at
run time, so nothing here trains. Tests that need DeepSpeed installed are skipped, with the reason, when
it is absent; the missing and broken paths run either way.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.fabric import Fabric
from torch import nn

import lightning_presets
from helpers import codes, run_forked
from lightning_presets import PresetConfigError
from lightning_presets.registry import requirements
from lightning_presets.strategies.deepspeed import config as ds_config
from lightning_presets.strategies.deepspeed import hooks, parser
from lightning_presets.tools.simulation import SimulatedGPU
from strategies.deepspeed.helpers import Blocks, NoBlocks, ds_trainer, needs_deepspeed

# --- pure helpers -------------------------------------------------------------------------------------


def test_auto_keys_are_listed_with_their_path() -> None:
    config = {"train_batch_size": "auto", "zero_optimization": {"stage": 2, "reduce_bucket_size": "AUTO"}, "x": 1}
    assert list(ds_config.auto_keys(config)) == ["train_batch_size", "zero_optimization.reduce_bucket_size"]
    assert list(ds_config.auto_keys({"bf16": {"enabled": True}})) == []


@pytest.mark.parametrize(
    ("config", "precision", "expected"),
    [
        ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, "32-true", (True, True, None)),
        ({"fp16": {"enabled": True}}, "bf16-mixed", (True, True, "bf16")),
        ({"bf16": {"enabled": True}}, "bf16-mixed", (False, True, None)),
        ({}, "16-mixed", (True, False, "fp16")),
        ({"fp16": {"enabled": False}}, "bf16-mixed", (False, True, "bf16")),
    ],
)
def test_half_precision_sections_follow_lightnings_merge(
    config: dict[str, Any], precision: str, expected: tuple[bool, bool, str | None]
) -> None:
    assert ds_config.half_precision_sections(config, precision) == expected


# --- dependency paths ---------------------------------------------------------------------------------


def test_missing_deepspeed_is_an_install_hint_before_lightnings_error(
    cuda8: SimulatedGPU, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed", None)  # what an environment without deepspeed looks like
    with pytest.raises(PresetConfigError) as excinfo:
        ds_trainer()
    assert codes(excinfo) == ("LP007",)
    finding = excinfo.value.findings[0]
    assert "'deepspeed'" in finding.message
    assert "Trainer(strategy='deepspeed_zero2_offload')" in finding.message
    assert finding.hint == "install it with: pip install --no-build-isolation 'deepspeed>=0.16'"
    with pytest.raises(PresetConfigError) as excinfo:
        Fabric(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8)
    assert codes(excinfo) == ("LP007",)


def test_broken_deepspeed_reports_its_first_error_line(tmp_path: Path) -> None:
    package = tmp_path / "deepspeed"
    package.mkdir()
    (package / "__init__.py").write_text(
        'raise RuntimeError("CUDA_HOME does not exist, unable to compile CUDA op(s)\\nsecond line")\n'
    )
    # Forked from the harness's server, with the broken package first on sys.path as PYTHONPATH would put it: the
    # server never imported deepspeed (asserted), so the import below is the package's first.
    result = run_forked(
        f"""
        import sys
        assert "deepspeed" not in sys.modules
        sys.path.insert(0, {str(tmp_path)!r})
        import lightning_presets
        from lightning.pytorch import Trainer
        from lightning_presets.tools.simulation import simulated_cuda
        with simulated_cuda(8, preload=["deepspeed"]):  # imported for real first: its failure is the install's
            try:
                Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, logger=False)
            except lightning_presets.PresetConfigError as error:
                print("CODES", error.codes)
                print("MESSAGE", error.findings[0].message)
                print("HINT", error.findings[0].hint)
        with simulated_cuda(8):  # first imported under the simulation: the simulation may be the cause
            try:
                Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, logger=False)
            except lightning_presets.PresetConfigError as error:
                print("SIMULATED", error.findings[0].message)
                print("SIMULATED HINT", error.findings[0].hint)
        """
    )
    assert "CODES ('LP401',)" in result.stdout, result.stdout + result.stderr
    assert "fails to import: RuntimeError: CUDA_HOME does not exist, unable to compile CUDA op(s)" in result.stdout
    assert "HINT reinstall it (pip install --force-reinstall deepspeed)" in result.stdout
    assert "whose import failed while CUDA was simulated" in result.stdout
    assert "SIMULATED HINT import deepspeed before simulating CUDA" in result.stdout
    assert "second line" not in result.stdout
    assert "Traceback" not in result.stdout  # stdout and stderr together


def test_known_bad_torch_deepspeed_pair_is_refused(cuda8: SimulatedGPU, monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"deepspeed": "0.15.4", "torch": "2.6.0"}
    monkeypatch.setattr(requirements, "installed_version", lambda name: versions.get(name))
    monkeypatch.setattr(requirements, "is_importable", lambda name: True)
    with pytest.raises(PresetConfigError) as excinfo:
        ds_trainer()
    assert codes(excinfo) == ("LP402",)
    assert "torch 2.6.0 with deepspeed 0.15.4 is known not to work" in excinfo.value.findings[0].message
    assert excinfo.value.findings[0].hint == "pip install -U 'deepspeed>=0.16'"


@pytest.mark.parametrize(
    ("torch_version", "deepspeed_version", "bad"),
    [("2.6.0", "0.15.4", True), ("2.13.0", "0.15.0", True), ("2.5.1", "0.15.4", False), ("2.6.0", "0.16.0", False)],
)
def test_deepspeed_pair_table(torch_version: str, deepspeed_version: str, bad: bool) -> None:
    pair = requirements.known_bad_pair(requirements.DEPENDENCIES["deepspeed"], torch_version, deepspeed_version)
    assert (pair is not None) is bad


# --- construction with DeepSpeed installed ------------------------------------------------------------


@needs_deepspeed
def test_zero2_offload_constructs_on_simulated_cuda(cuda8: SimulatedGPU) -> None:
    built = ds_trainer(devices=4, num_nodes=2)
    zero = built.strategy.config["zero_optimization"]
    assert zero["stage"] == 2
    assert zero["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in zero
    assert built.strategy._lp_context.world_size == 8
    assert built.strategy._lp_context.family == "deepspeed"


@needs_deepspeed
def test_zero3_offload_ckpt_constructs_for_trainer_and_fabric(cuda8: SimulatedGPU) -> None:
    built = ds_trainer("deepspeed_zero3_offload_ckpt")
    zero = built.strategy.config["zero_optimization"]
    assert (zero["stage"], zero["offload_param"]["device"], zero["offload_optimizer"]["device"]) == (3, "cpu", "cpu")
    fabric_built = Fabric(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8)
    assert fabric_built.strategy.config["zero_optimization"]["stage"] == 3


# --- activation checkpointing of the _ckpt preset -----------------------------------------------------


def test_checkpoint_blocks_wraps_each_block_and_keeps_gradients() -> None:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    model, reference = Blocks(), Blocks()
    reference.load_state_dict(model.state_dict())
    assert hooks.checkpoint_blocks(model, {nn.Sequential}) == 3
    assert sum(isinstance(module, CheckpointWrapper) for module in model.modules()) == 3
    assert set(model.state_dict()) == set(reference.state_dict())
    x = torch.randn(4, 8)
    model(x).sum().backward()
    reference(x).sum().backward()
    for (name, ours), theirs in zip(model.named_parameters(), reference.parameters(), strict=True):
        assert torch.allclose(ours.grad, theirs.grad), name


def test_checkpoint_blocks_override_is_used_and_not_passed_to_deepspeed(cuda8: SimulatedGPU) -> None:
    if not requirements.is_importable("deepspeed"):
        pytest.skip("deepspeed is not installed")
    strategy = lightning_presets.strategy("deepspeed_zero3_offload_ckpt", checkpoint_blocks={nn.Linear})
    model = NoBlocks()
    ds_trainer(strategy).strategy._lp_prepare_model(model)
    assert strategy.lp_blocks == {nn.Linear}


# --- DeepSpeed's own parser, for the job's world size (sequence parallelism divides it) ------------------------------


@needs_deepspeed
def test_the_parser_is_deepspeeds_constructor_for_the_jobs_world_size() -> None:
    """DeepSpeedConfig reads the world size from deepspeed.comm; the parse answers it for the job (not 1), and
    DeepSpeed itself divides it by sequence_parallel_size. Fails, naming it, if DeepSpeed stops asking `dist`."""
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2}
    eight = parser.parse(config, 8)
    assert (eight.refusal, eight.world_size) == (None, 8), "DeepSpeedConfig.__init__ no longer reads `dist`?"
    refused = parser.parse(config, 4).refusal or ""
    assert "64 != 4 * 2 * 4" in refused
    halved = parser.parse({**config, "sequence_parallel_size": 2}, 8)
    assert halved.world_size == 4
    assert "64 != 4 * 2 * 4" in (halved.refusal or "")
    mesh = parser.parse({**config, "train_batch_size": 32, "data_parallel_size": 4, "sequence_parallel_size": 2}, 8)
    assert (mesh.refusal, mesh.world_size) == (None, 4)


def test_the_hooks_docstring_is_the_class_docstring() -> None:
    assert hooks._DeepSpeedHooks.__doc__ is not None
    assert "repeated blocks" in hooks._DeepSpeedHooks.__doc__


# --- LP421 (a warning: an option silently overridden by another explicit setting) and LP417, both sides ---------
