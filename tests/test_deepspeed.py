"""DeepSpeed presets: the dependency paths (missing, broken, known-bad pair) and each guard at construction.

Construction runs on simulated CUDA with DeepSpeed installed (it imports on CPU); DeepSpeed needs CUDA at
run time, so nothing here trains. Tests that need DeepSpeed installed are skipped, with the reason, when
it is absent; the missing and broken paths run either way.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.fabric import Fabric
from lightning.pytorch import LightningModule, Trainer
from torch import nn

import lightning_presets
from helpers import QUIET, codes, run_forked
from lightning_presets import PresetConfigError, PresetWarning
from lightning_presets.registry import requirements
from lightning_presets.strategies.deepspeed import config as ds_config
from lightning_presets.strategies.deepspeed import config_rules, hooks, parser
from lightning_presets.tools.simulation import SimulatedGPU

needs_deepspeed = pytest.mark.skipif(
    not requirements.is_importable("deepspeed"),
    reason="deepspeed is not installed (pip install --no-build-isolation deepspeed); its missing path is tested",
)


def trainer(strategy: Any = "deepspeed_zero2_offload", **kwargs: Any) -> Trainer:
    return Trainer(strategy=strategy, **{"accelerator": "cuda", "devices": 8, **QUIET, **kwargs})


def fabric(config: dict[str, Any], **kwargs: Any) -> Fabric:
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config=config)
    return Fabric(strategy=strategy, **{"accelerator": "cuda", "devices": 8, **kwargs})


class Blocks(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(3))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


class NoBlocks(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)


# --- pure helpers -------------------------------------------------------------------------------------


def test_batch_arithmetic_uses_the_real_world_size() -> None:
    assert config_rules.batch_arithmetic(64, 4, 2, 8) is None
    message = config_rules.batch_arithmetic(64, 4, 1, 8)
    assert message == (
        "train_batch_size=64, but train_micro_batch_size_per_gpu=4 × gradient_accumulation_steps=1 × world size 8 = 32"
    )
    assert config_rules.batch_arithmetic(64, 4, None, 8) is None  # DeepSpeed derives accumulation = 2
    assert "4 × world size 8 = 32" in (config_rules.batch_arithmetic(48, 4, None, 8) or "")


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
        trainer()
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
        trainer()
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
    built = trainer(devices=4, num_nodes=2)
    zero = built.strategy.config["zero_optimization"]
    assert zero["stage"] == 2
    assert zero["offload_optimizer"]["device"] == "cpu"
    assert "offload_param" not in zero
    assert built.strategy._lp_context.world_size == 8
    assert built.strategy._lp_context.family == "deepspeed"


@needs_deepspeed
def test_zero3_offload_ckpt_constructs_for_trainer_and_fabric(cuda8: SimulatedGPU) -> None:
    built = trainer("deepspeed_zero3_offload_ckpt")
    zero = built.strategy.config["zero_optimization"]
    assert (zero["stage"], zero["offload_param"]["device"], zero["offload_optimizer"]["device"]) == (3, "cpu", "cpu")
    fabric_built = Fabric(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8)
    assert fabric_built.strategy.config["zero_optimization"]["stage"] == 3


@needs_deepspeed
def test_lp403_non_cuda_accelerator_is_refused_at_construction() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        trainer(accelerator="cpu", devices=2)
    assert codes(excinfo) == ("LP403",)
    assert "accelerator='cpu', devices=2" in excinfo.value.findings[0].message


@needs_deepspeed
def test_lp403_accepted_on_cuda(cuda8: SimulatedGPU) -> None:
    assert trainer().strategy._lp_context.accelerator == "cuda"


@needs_deepspeed
def test_lp404_parameter_offload_below_stage_3_is_ignored_and_warned(cuda8: SimulatedGPU) -> None:
    """DeepSpeed passes only offload_optimizer to its stage 1/2 optimizer: the parameters stay on the GPU."""
    with pytest.warns(PresetWarning) as caught:
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", offload_parameters=True))
    (warning,) = [w.message.finding for w in caught if isinstance(w.message, PresetWarning)]
    assert (warning.code, warning.severity) == ("LP404", "warning")
    assert "ZeRO stage 2" in warning.message
    assert "silently ignores offload_param" in warning.message
    config = {"zero_optimization": {"stage": 3, "offload_param": {"device": "cpu"}}}
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=config))


@needs_deepspeed
def test_lp405_fp16_and_bf16_together(cuda8: SimulatedGPU) -> None:
    both = {"fp16": {"enabled": True}, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    with pytest.raises(PresetConfigError) as excinfo:
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=both))
    assert codes(excinfo) == ("LP405",)
    assert "the config enables both" in excinfo.value.findings[0].message
    fp16 = {"fp16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    with pytest.raises(PresetConfigError) as excinfo:
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=fp16), precision="bf16-mixed")
    assert "precision='bf16-mixed' makes Lightning add bf16.enabled=True" in excinfo.value.findings[0].message
    bf16 = {"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}
    trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=bf16), precision="bf16-mixed")


@needs_deepspeed
def test_lp405_reads_a_config_file_as_lightning_loaded_it(cuda8: SimulatedGPU, tmp_path: Path) -> None:
    path = tmp_path / "ds.json"
    path.write_text('{"fp16": {"enabled": true}, "bf16": {"enabled": true}}')
    with pytest.raises(PresetConfigError) as excinfo:
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=str(path)))
    assert codes(excinfo) == ("LP405",)


@needs_deepspeed
def test_lp406_fabric_batch_size_shows_the_arithmetic(cuda8: SimulatedGPU) -> None:
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4}
    with pytest.raises(PresetConfigError) as excinfo:
        fabric(config, devices=4, num_nodes=2)
    assert codes(excinfo) == ("LP406",)
    message = excinfo.value.findings[0].message
    assert "train_micro_batch_size_per_gpu=4 × gradient_accumulation_steps=4 × world size 8 = 128" in message
    assert "devices=4 × num_nodes=2 = 8" in message
    assert "set it to 4 × 4 × 8 = 128" in excinfo.value.findings[0].hint
    with pytest.raises(PresetConfigError):
        fabric({"train_batch_size": 48, "train_micro_batch_size_per_gpu": 4})
    fabric({"train_batch_size": 128, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4})
    fabric({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4})  # accumulation derived: 2


@needs_deepspeed
def test_lp407_trainer_batch_size_is_checked_with_accumulate_grad_batches(cuda8: SimulatedGPU) -> None:
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", config=config)
    built = trainer(strategy, accumulate_grad_batches=1)
    model = Blocks()
    model.trainer = built
    with pytest.raises(PresetConfigError) as excinfo:
        built.strategy.connect(model)
    assert codes(excinfo) == ("LP407",)
    assert "= 32" in excinfo.value.findings[0].message
    assert "accumulate_grad_batches=1" in excinfo.value.findings[0].message
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", config=config)
    built = trainer(strategy, accumulate_grad_batches=2)
    model.trainer = built
    built.strategy.connect(model)


@needs_deepspeed
def test_lp408_auto_values_are_listed(cuda8: SimulatedGPU) -> None:
    config = {"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}
    with pytest.raises(PresetConfigError) as excinfo:
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=config))
    assert codes(excinfo) == ("LP408", "LP414")
    error, warning = excinfo.value.findings
    assert "train_micro_batch_size_per_gpu;" in error.message
    assert "delete train_micro_batch_size_per_gpu (Lightning uses the train dataloader's batch size)" in error.hint
    assert (warning.code, warning.severity) == ("LP414", "warning")
    assert "zero_optimization.reduce_bucket_size" in warning.message
    assert "give zero_optimization.reduce_bucket_size a number" in warning.hint
    trainer(lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": {"stage": 2}}))


@needs_deepspeed
def test_lp414_auto_inside_a_modelled_section_is_only_warned(cuda8: SimulatedGPU) -> None:
    """DeepSpeed's config classes replace "auto" there with their defaults: nothing fails (formerly LP408)."""
    config = {"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}
    with pytest.warns(PresetWarning, match="LP414"):
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=config))


@needs_deepspeed
def test_lp409_accumulation_in_the_config_only_with_the_trainer(cuda8: SimulatedGPU) -> None:
    config = {"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}
    with pytest.raises(PresetConfigError) as excinfo:
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=config))
    assert codes(excinfo) == ("LP409",)
    assert "accumulate_grad_batches=4" in excinfo.value.findings[0].hint
    fabric(config)  # Fabric leaves accumulation to the config


@needs_deepspeed
def test_lp410_unknown_stage_or_offload_device() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("deepspeed_zero2_offload", stage=5, offload_optimizer_device="gpu")
    assert codes(excinfo) == ("LP410",)
    assert "stage=5, offload_optimizer_device='gpu'" in excinfo.value.findings[0].message
    lightning_presets.strategy("deepspeed_zero2_offload", stage=1, offload_optimizer_device="nvme")


@needs_deepspeed
def test_errors_are_reported_together(cuda8: SimulatedGPU) -> None:
    config = {"gradient_accumulation_steps": 2, "train_batch_size": "auto", "fp16": {"enabled": True}}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", config=config)
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy=strategy, accelerator="cpu", devices=2, precision="bf16-mixed", **QUIET)
    assert codes(excinfo) == ("LP403", "LP405", "LP408", "LP409")


# --- activation checkpointing of the _ckpt preset -----------------------------------------------------


@pytest.fixture
def zero3(cuda8: SimulatedGPU) -> Any:
    if not requirements.is_importable("deepspeed"):
        pytest.skip("deepspeed is not installed")
    return trainer("deepspeed_zero3_offload_ckpt").strategy


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


def test_lp411_no_repeated_block_warns(zero3: Any) -> None:
    with pytest.warns(PresetWarning, match=r"\[LP411\].*no repeated block found in NoBlocks"):
        zero3._lp_prepare_model(NoBlocks())
    model = Blocks()
    zero3._lp_prepare_model(model)
    assert zero3.lp_blocks == {nn.Sequential}


def test_checkpoint_blocks_override_is_used_and_not_passed_to_deepspeed(cuda8: SimulatedGPU) -> None:
    if not requirements.is_importable("deepspeed"):
        pytest.skip("deepspeed is not installed")
    strategy = lightning_presets.strategy("deepspeed_zero3_offload_ckpt", checkpoint_blocks={nn.Linear})
    model = NoBlocks()
    trainer(strategy).strategy._lp_prepare_model(model)
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


SP = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "sequence_parallel_size": 2}


@needs_deepspeed
def test_lp406_divides_the_world_by_sequence_parallel_size(cuda8: SimulatedGPU) -> None:
    """Issue 23: DeepSpeed's batch arithmetic spans the data-parallel ranks, world size / sequence_parallel_size."""
    with pytest.raises(PresetConfigError) as excinfo:
        fabric({**SP, "train_batch_size": 64})  # 4 × 2 × (8 / 2) = 32
    assert codes(excinfo) == ("LP406",)
    finding = excinfo.value.findings[0]
    assert "gradient_accumulation_steps=2 × world size 4 = 32" in finding.message
    assert "devices=8 × num_nodes=1 = 8, of which DeepSpeed's data parallelism spans 4 (sequence_parallel_size=2)" in (
        finding.message
    )
    assert "set it to 4 × 2 × 4 = 32" in finding.hint
    fabric({**SP, "train_batch_size": 32})  # formerly refused against the whole world (4 × 2 × 8 = 64)
    fabric({**SP, "train_batch_size": 32, "data_parallel_size": 4})  # the mesh deepspeed.initialize builds
    fabric({**SP, "train_batch_size": 64, "sequence_parallel_size": 1})
    fabric({**SP, "train_batch_size": 64, "gradient_accumulation_steps": 4})


@needs_deepspeed
def test_lp418_and_lp407_parse_with_sequence_parallel_size(cuda8: SimulatedGPU) -> None:
    refused = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "sequence_parallel_size": 3}
    with pytest.raises(PresetConfigError) as excinfo:  # 8 / 3 data-parallel ranks: DeepSpeed's own assertion
        trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=refused))
    assert codes(excinfo) == ("LP418",)
    assert "32 != 4 * 1 * 2.66" in excinfo.value.findings[0].message
    for accepted in (
        {**refused, "sequence_parallel_size": 2, "train_batch_size": 16},  # 4 × 1 × (8 / 2)
        {**refused, "sequence_parallel_size": 1},  # 4 × 1 × 8
        {key: value for key, value in refused.items() if key != "train_batch_size"},  # derived by DeepSpeed
    ):
        built = trainer(lightning_presets.strategy("deepspeed_zero2_offload", config=accepted))
        model = Blocks()
        model.trainer = built
        built.strategy.connect(model)  # LP407 (the Trainer's accumulation) divides by it too


@needs_deepspeed
def test_lp420_reads_the_device_indices_lightning_resolved(cuda8: SimulatedGPU) -> None:
    for devices in ([1, 3], "1,3"):
        with pytest.raises(PresetConfigError) as excinfo:
            trainer(devices=devices)
        assert codes(excinfo) == ("LP420",)
        assert "Lightning refuses [1, 3]" in excinfo.value.findings[0].message
        assert "CUDA_VISIBLE_DEVICES=1,3 and pass devices=2" in excinfo.value.findings[0].hint
    for devices in ([0, 1], "0,1", 2, -1):
        trainer(devices=devices)


def test_the_hooks_docstring_is_the_class_docstring() -> None:
    assert hooks._DeepSpeedHooks.__doc__ is not None
    assert "repeated blocks" in hooks._DeepSpeedHooks.__doc__


# --- LP421 (a warning: an option silently overridden by another explicit setting) and LP417, both sides ---------

_CLIPPING = {"zero_optimization": {"stage": 2}}


def _clipping_findings(configured: float | None, requested: float | None) -> set[str]:
    config = dict(_CLIPPING) if configured is None else {**_CLIPPING, "gradient_clipping": configured}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", config=config)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer(strategy, **({} if requested is None else {"gradient_clip_val": requested}))
    return {each.message.finding.code for each in caught if isinstance(each.message, PresetWarning)}


@needs_deepspeed
@pytest.mark.parametrize(("configured", "requested"), [(1.0, 0.3), (0.3, 1.0), (1, 2)])
def test_lp421_warns_whichever_threshold_is_larger(cuda8: SimulatedGPU, configured: float, requested: float) -> None:
    """The config's gradient_clipping wins over a different gradient_clip_val, larger or smaller: a warning, never an
    error (the run trains, at the config's threshold)."""
    assert "LP421" in _clipping_findings(configured, requested)


@needs_deepspeed
@pytest.mark.parametrize(
    ("configured", "requested"),
    [(None, 0.3), (1.0, None), (1.0, 1), (0.3, 0.3), (1.0, 0.0)],
    ids=["the-trainer's-alone", "the-config's-alone", "the-same-twice", "the-same-below-1", "the-trainer-clips-none"],
)
def test_lp421_is_quiet_with_one_threshold(cuda8: SimulatedGPU, configured: float | None, requested: float) -> None:
    assert "LP421" not in _clipping_findings(configured, requested)


def test_lp421_is_a_warning() -> None:
    assert config_rules.one_clipping_threshold.severity == "warning"


_OFFLOADED = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


@needs_deepspeed
@pytest.mark.parametrize("name", ["adam.DeepSpeedCPUAdam", "lion.DeepSpeedCPULion"])
def test_lp417_takes_deepspeeds_own_cpu_optimizers_with_the_offload(cuda8: SimulatedGPU, name: str) -> None:
    """DeepSpeed's engine takes its CPU Adam and CPU Lion with ZeRO-Offload (zero_force_ds_cpu_optimizer left true);
    a torch optimizer it refuses (LP417)."""
    import importlib

    module, _, class_name = name.partition(".")
    klass = getattr(importlib.import_module(f"deepspeed.ops.{module}"), class_name)
    own = klass.__new__(klass)  # an instance is all the rule reads; building one compiles DeepSpeed's CPU op
    strategy = fabric(_OFFLOADED)._strategy
    strategy._lp_check_optimizers(None, [own])
    with pytest.raises(PresetConfigError, match="LP417"):
        strategy._lp_check_optimizers(None, [torch.optim.AdamW(nn.Linear(2, 2).parameters())])
