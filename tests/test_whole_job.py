"""The guards see the whole job: Trainer/Fabric arguments, the torch build, the optimizers, DeepSpeed's own parser, the
cluster environment Lightning selects. Each fix of issue 15's review has its rejected case and accepted neighbour here
(the rejected cases' failures are proven in tests/evidence/)."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from lightning.fabric import Fabric
from lightning.pytorch import Trainer

import lightning_presets
from lightning_presets import PrecisionPreset, PresetConfigError, PresetWarning
from lightning_presets.core.namespaces import namespace_for_target
from lightning_presets.guards import precision as precision_guards
from lightning_presets.registry.build import build
from lightning_presets.tools.check import CheckRequest
from lightning_presets.tools.simulation import SimulatedGPU, simulated_cuda
from lightning_presets.tools.verdict import run_check

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def refused(make: Any) -> tuple[str, ...]:
    with pytest.raises(PresetConfigError) as caught:
        make()
    return caught.value.codes


def accepted(make: Any) -> Any:
    """``make()`` builds without an error and without a preset warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        return make()


# --- every Trainer argument reaches the guards -----------------------------------------------------------------


def test_the_context_holds_every_trainer_argument() -> None:
    trainer = Trainer(strategy="fsdp2", accelerator="cpu", devices=2, gradient_clip_val=0.5, detect_anomaly=True,
                      **QUIET)  # fmt: skip
    arguments = trainer.strategy._lp_context.arguments
    assert (arguments["gradient_clip_val"], arguments["detect_anomaly"], arguments["sync_batchnorm"]) == (
        0.5,
        True,
        False,
    )
    import inspect

    names = [name for name in inspect.signature(Trainer.__init__).parameters if name != "self"]
    assert list(arguments) == names  # read from the installed signature, not a hand list


def test_fabric_arguments_too() -> None:
    fabric = Fabric(strategy="fsdp2", accelerator="cpu", devices=2)
    assert fabric.strategy._lp_context.arguments["devices"] == 2


def test_check_takes_trainer_flags_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import run

    code, out = run(capsys, "check", "--strategy", "ddp_static_graph", "--accelerator", "cpu", "--devices", "2",
                    "--accumulate-grad-batches", "2", "--gradient-clip-val", "1.0", "--json")  # fmt: skip
    assert code == 1
    assert "LP308" in out
    code, out = run(capsys, "check", "--strategy", "deepspeed_zero2_offload", "--accelerator", "cuda", "--gpus", "8",
                    "--devices", "8", "--set", 'config={"zero_optimization": {"stage": 2, "overlap_comm": true}, '
                    '"train_micro_batch_size_per_gpu": 1}', "--json")  # fmt: skip
    assert '"overlap_comm": true' in out
    assert code == 0, out


# --- the false rejections the review found -----------------------------------------------------------------------


def test_fsdp2_with_an_explicit_split_of_the_world(cuda8: SimulatedGPU) -> None:
    """LP210/LP211: Lightning only needs data × tensor = world; 'auto' data with tensor 2 does not cover it."""
    split = lightning_presets.strategy("fsdp2", data_parallel_size=4, tensor_parallel_size=2)
    accepted(lambda: Trainer(strategy=split, accelerator="cuda", devices=8, **QUIET))
    wrong = lightning_presets.strategy("fsdp2", tensor_parallel_size=2)
    assert refused(lambda: Trainer(strategy=wrong, accelerator="cuda", devices=8, **QUIET)) == ("LP211",)


def test_bf16_compression_with_fabric_follows_the_torch_build() -> None:
    """LP303: on a CPU-only torch Fabric's DDP refuses the hook; with a CUDA build (or on CUDA) it does not."""
    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("cpu_only_torch"):
        assert refused(lambda: Fabric(strategy="ddp_bf16_compress", accelerator="cpu", devices=2)) == ("LP303",)
    with simulated_cuda(8):
        accepted(lambda: Fabric(strategy="ddp_bf16_compress", accelerator="cuda", devices=8))
    with pytest.warns(PresetWarning, match="LP311"):  # the Trainer trains plain DDP off CUDA: a warning
        Trainer(strategy="ddp_bf16_compress", accelerator="cpu", devices=2, **QUIET)


def _built(preset: PrecisionPreset) -> Any:
    return build(preset, namespace_for_target("trainer"), {}, precision_guards.HEADS)


@pytest.mark.parametrize(("severity", "code"), [("error", "LP604"), ("warning", "LP616")])
def test_a_precision_preset_declares_how_bad_a_low_capability_is(severity: str, code: str) -> None:
    preset = PrecisionPreset(
        name="acme-fp8-emulated", description="x", plugin={"trainer": "MixedPrecision", "fabric": "MixedPrecision"},
        init_params={"precision": "bf16-mixed", "device": "cuda"}, min_capability=(8, 9), capability_reason="FP8",
        capability_severity=severity,  # type: ignore[arg-type]
    )  # fmt: skip
    with simulated_cuda(8, (8, 0)):
        if severity == "error":
            assert refused(lambda: _built(preset)) == (code,)
        else:
            with pytest.warns(PresetWarning, match=code):
                _built(preset)
    with simulated_cuda(8, (9, 0)):
        accepted(lambda: _built(preset))


@pytest.mark.parametrize("device", ["cpu", "nvme", "none"])
def test_deepspeed_offload_devices_deepspeed_knows(device: str) -> None:
    accepted(lambda: lightning_presets.strategy("deepspeed_zero2_offload", offload_optimizer_device=device))
    assert refused(lambda: lightning_presets.strategy("deepspeed_zero2_offload", offload_optimizer_device="gpu")) == (
        "LP410",
    )


@pytest.mark.parametrize("policy", [None, set(), []])
def test_an_empty_checkpointing_policy_is_no_policy(policy: Any) -> None:
    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("torch_xla"):
        accepted(lambda: lightning_presets.strategy("xla_fsdp_ckpt", target="fabric",
                                                    activation_checkpointing_policy=policy))  # fmt: skip
        assert refused(lambda: lightning_presets.strategy("xla_fsdp_ckpt", target="fabric",
                                                          activation_checkpointing_policy=[torch.nn.Linear])) == (
            "LP505",
        )  # fmt: skip


def test_a_one_dimensional_mesh_without_hybrid_sharding() -> None:
    """LP111: (8,) is a mesh for FULL_SHARD (LP114 only says the preset's name no longer fits); hybrid sharding needs
    (replicas, shard size)."""
    with pytest.warns(PresetWarning, match="LP114"):
        lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(8,), sharding_strategy="FULL_SHARD")
    assert refused(lambda: lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(8,))) == ("LP111",)


# --- the misses --------------------------------------------------------------------------------------------------


def test_xla_fsdp_with_one_device_per_host_across_hosts() -> None:
    """LP504 compares the devices per host: 4 hosts of one device each fail as one host of one device does."""
    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("torch_xla"):
        codes = refused(lambda: Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=1, num_nodes=4))
        assert "LP504" in codes
        fabric = Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8, num_nodes=4)
        assert fabric.strategy._lp_context.devices_per_node == 8


def test_deepspeed_with_a_third_party_precision_preset() -> None:
    """LP412 no longer skips every precision preset: one with no word about DeepSpeed is refused by LP412 itself."""
    pytest.importorskip("bitsandbytes")
    with simulated_cuda(8, preload=["bitsandbytes", "deepspeed"]):
        _deepspeed_with_precision_presets()


def _deepspeed_with_precision_presets() -> None:
    preset = PrecisionPreset(name="acme-amp", description="x", plugin={"trainer": "MixedPrecision"},
                             init_params={"precision": "bf16-mixed", "device": "cuda"})  # fmt: skip
    plugin = _built(preset)
    codes = refused(lambda: Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8,
                                    plugins=[plugin], **QUIET))  # fmt: skip
    assert "LP412" in codes
    nf4 = lightning_presets.precision("nf4-bnb")  # the built-in one names DeepSpeed: LP607 says why, LP412 is quiet
    codes = refused(lambda: Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, plugins=[nf4],
                                    **QUIET))  # fmt: skip
    assert "LP607" in codes
    assert "LP412" not in codes


def test_an_unknown_sharding_strategy_on_every_fsdp_preset() -> None:
    """The regression: fsdp_grad_op with a typo was a bare KeyError, and LP114 called it a working other preset."""
    assert refused(lambda: lightning_presets.strategy("fsdp_grad_op", sharding_strategy="FULL_SHRD")) == ("LP104",)
    with pytest.warns(PresetWarning, match="LP114"):
        lightning_presets.strategy("fsdp_grad_op", sharding_strategy="FULL_SHARD")


def test_check_reports_the_precision_presets_warnings() -> None:
    """The regression: check --plugin nf4-bnb --gpu-capability 7.0 said nothing while the Python API warned LP609."""
    arguments = {"accelerator": "cuda", "devices": 8}
    report = run_check(CheckRequest(arguments=arguments, plugins=("nf4-bnb",), gpus=8, gpu_capability=(7, 0)))
    assert "LP609" in report.codes
    report = run_check(CheckRequest(arguments=arguments, plugins=("nf4-bnb",), gpus=8, gpu_capability=(8, 0)))
    assert "LP609" not in report.codes


def test_deepspeed_offload_with_a_torch_optimizer(cuda8: SimulatedGPU) -> None:
    """LP416: the preset's own config lets torch's AdamW step the offloaded state (slow, warned); LP417: a user's
    config that does not is refused before DeepSpeed's engine refuses it."""
    model = torch.nn.Linear(4, 4)
    fabric = Fabric(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8)
    assert fabric.strategy.config["zero_force_ds_cpu_optimizer"] is False
    with pytest.warns(PresetWarning, match="LP416"):
        fabric.strategy._lp_check_optimizers(model, [torch.optim.AdamW(model.parameters())])
    config = {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config=config)
    fabric = Fabric(strategy=strategy, accelerator="cuda", devices=8)
    assert refused(lambda: fabric.strategy._lp_check_optimizers(model, [torch.optim.AdamW(model.parameters())])) == (
        "LP417",
    )
    no_offload = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", offload_optimizer=False)
    fabric = Fabric(strategy=no_offload, accelerator="cuda", devices=8)
    accepted(lambda: fabric.strategy._lp_check_optimizers(model, [torch.optim.AdamW(model.parameters())]))


def test_deepspeeds_parser_runs_for_the_jobs_world(cuda8: SimulatedGPU) -> None:
    """LP418 parses for 8 processes: a train_batch_size that adds up for 8 is accepted (DeepSpeed alone, without a
    process group, would parse for 1)."""
    config = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config=config)
    accepted(lambda: Fabric(strategy=strategy, accelerator="cuda", devices=8))
    typo = {**config, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config=typo)
    assert refused(lambda: Fabric(strategy=strategy, accelerator="cuda", devices=8)) == ("LP418",)
    deprecated = {**config, "zero_optimization": {"stage": 2, "cpu_offload": True}}
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config=deprecated)
    with pytest.warns(PresetWarning, match="LP419"):
        Fabric(strategy=strategy, accelerator="cuda", devices=8)


def test_a_cluster_variable_that_loses_to_another_environment_triggers_nothing() -> None:
    """torchrun's environment wins over SLURM's variables (Lightning's own detection order): no SLURM finding."""
    request = CheckRequest(arguments={"accelerator": "cuda", "devices": 8, "num_nodes": 4}, gpus=8,
                           cluster="torchelastic", env={"SLURM_NTASKS": "8", "SLURM_NNODES": "2"})  # fmt: skip
    report = run_check(request)
    assert report.resolved is not None
    assert report.resolved.cluster_environment == "TorchElasticEnvironment"
    assert not {"LP705", "LP706", "LP707"} & set(report.codes)
    slurm = CheckRequest(arguments={"accelerator": "cuda", "devices": 8, "num_nodes": 4}, gpus=8, cluster="slurm",
                         env={"SLURM_NTASKS": "8"})  # fmt: skip
    assert "LP707" in run_check(slurm).codes
