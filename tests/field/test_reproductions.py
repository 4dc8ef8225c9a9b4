"""CPU reproductions of library behaviour behind a rule's severity that are not failures (the failures an error rule
refuses are proven under ``tests/evidence/``)."""

from __future__ import annotations

import pytest

from lightning_presets.registry import requirements

needs_deepspeed = pytest.mark.skipif(not requirements.is_importable("deepspeed"), reason="deepspeed is not installed")


@needs_deepspeed
def test_deepspeed_drops_auto_in_the_sections_it_models() -> None:
    """LP414 is a warning, not an error: in zero_optimization, fp16, bf16... DeepSpeed replaces "auto" by defaults."""
    from deepspeed.runtime.config import DeepSpeedConfig

    config = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 8, "bf16": {"enabled": "auto"},
              "zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}  # fmt: skip
    built = DeepSpeedConfig(config, mpu=None, mesh_device=None)
    assert built.zero_config.reduce_bucket_size == 500_000_000
    assert built.bfloat16_config.enabled is False
