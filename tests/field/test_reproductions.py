"""CPU reproductions of what fails: the evidence that error rules name (``evidence="runtime: ...::test"``).

Each test calls the failing library code the way Lightning calls it, with the configuration the rule refuses,
and asserts that it fails; then the configuration the rule accepts, and asserts that it passes.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from lightning_presets.registry import requirements

needs_deepspeed = pytest.mark.skipif(not requirements.is_importable("deepspeed"), reason="deepspeed is not installed")


def test_bf16_compress_hook_needs_cuda_and_nccl() -> None:
    """LP303: torch refuses to register bf16_compress_hook on a torch build without CUDA and NCCL (gloo, CPU)."""
    import torch

    if torch.version.cuda is not None:
        pytest.skip("a CUDA build of torch registers the hook; the refusal is the CPU-only build's")
    code = textwrap.dedent(
        """
        import os, torch, torch.distributed as dist
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561")
        dist.init_process_group("gloo", rank=0, world_size=1)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
        try:
            model.register_comm_hook(None, bf16_compress_hook)
        except TypeError as error:
            print("REFUSED", error)
        dist.destroy_process_group()
        """
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "REFUSED BF16 all reduce communication hook required CUDA 11+ and NCCL 2.10+" in done.stdout, done.stderr


@needs_deepspeed
@pytest.mark.parametrize("key", ["train_micro_batch_size_per_gpu", "train_batch_size", "gradient_accumulation_steps"])
def test_deepspeed_fails_on_auto_batch_values(key: str) -> None:
    """LP408: "auto" is a Hugging Face placeholder; DeepSpeed uses top-level values as given and fails on it."""
    from deepspeed.runtime.config import DeepSpeedConfig

    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "zero_optimization": {"stage": 2}}
    with pytest.raises(TypeError):
        DeepSpeedConfig({**config, key: "auto"}, mpu=None, mesh_device=None)
    assert DeepSpeedConfig(config, mpu=None, mesh_device=None).train_batch_size == 8


@needs_deepspeed
def test_deepspeed_drops_auto_in_the_sections_it_models() -> None:
    """LP414 is a warning, not an error: in zero_optimization, fp16, bf16... DeepSpeed replaces "auto" by defaults."""
    from deepspeed.runtime.config import DeepSpeedConfig

    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": "auto"},
              "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}  # fmt: skip
    built = DeepSpeedConfig(config, mpu=None, mesh_device=None)
    assert built.zero_config.reduce_bucket_size == 500_000_000
    assert built.bfloat16_config.enabled is False


@needs_deepspeed
def test_deepspeed_refuses_unknown_stage_and_offload_device() -> None:
    """LP410: a ZeRO stage or offload device DeepSpeed does not know fails its config validation."""
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    with pytest.raises(ValueError, match="stage"):
        DeepSpeedZeroConfig(stage=5)
    with pytest.raises(ValueError, match="device"):
        DeepSpeedZeroConfig(stage=2, offload_optimizer={"device": "gpu"})
    assert DeepSpeedZeroConfig(stage=2, offload_optimizer={"device": "cpu"}).offload_optimizer is not None


@needs_deepspeed
@pytest.mark.parametrize("partition", [True, False])
def test_deepspeed_contiguous_checkpointing_fails_as_lightning_configures_it(partition: bool) -> None:
    """LP413: Lightning's _set_deepspeed_activation_checkpointing calls configure() with the config's flags but never
    passes number_checkpoints; with contiguous_memory_optimization DeepSpeed asserts before anything runs."""
    import deepspeed

    checkpoint_config = {"partition_activations": partition, "contiguous_memory_optimization": True}
    with pytest.raises(AssertionError, match=r"partitioned activations|number of layers"):
        deepspeed.checkpointing.configure(  # the call Lightning 2.6.6 makes, argument for argument
            mpu_=None,
            partition_activations=checkpoint_config.get("partition_activations"),
            contiguous_checkpointing=checkpoint_config.get("contiguous_memory_optimization"),
            checkpoint_in_cpu=checkpoint_config.get("cpu_checkpointing"),
            profile=checkpoint_config.get("profile"),
        )
