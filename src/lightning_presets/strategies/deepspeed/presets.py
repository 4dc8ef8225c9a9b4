"""The two DeepSpeed presets, ``deepspeed_zero2_offload`` and ``deepspeed_zero3_offload_ckpt``, as data: their
arguments, rules, hooks, and what the guards read off the strategy (``Preset.resolve``)."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from lightning_presets.core.namespaces import Kind
from lightning_presets.core.preset import Preset, Requirement, every_kind
from lightning_presets.core.rules import Rule
from lightning_presets.core.versions import tested
from lightning_presets.guards.precision_rules import (
    PRECISION_CROSS_RULES,
    STRATEGY_HARDWARE_RULES,
)
from lightning_presets.strategies.deepspeed.config import RESOLVED_KEY, HeldConfig
from lightning_presets.strategies.deepspeed.config_rules import (
    auto_values_defaulted,
    contiguous_checkpointing_configurable,
    deepspeed_accepts_the_config,
    deepspeed_takes_the_config_as_written,
    fabric_batch_size_adds_up,
    no_auto_values,
    one_clipping_threshold,
    one_half_precision,
    param_offload_needs_stage3,
    trainer_batch_size_adds_up,
    trainer_owns_accumulation,
)
from lightning_presets.strategies.deepspeed.family import DEEPSPEED_FAMILY
from lightning_presets.strategies.deepspeed.hooks import (
    DeepSpeedFabricHooks,
    DeepSpeedTrainerHooks,
)
from lightning_presets.strategies.deepspeed.job_rules import (
    checkpoint_block_found,
    clipping_by_norm_only,
    deepspeed_needs_cuda,
    deepspeed_precision_plugin,
    devices_are_local_ranks,
    offload_steps_with_cpu_adam,
    offload_takes_the_optimizer,
    one_optimizer,
    zero_values_known,
)
from lightning_presets.strategies.deepspeed.parser import formatted_by_lightning

DEEPSPEED = Requirement(module="deepspeed", extra="deepspeed", builds_against_torch=True)
_PRESET_ONLY_KEYS = frozenset({"checkpoint_blocks"})

RULES: tuple[Rule, ...] = (
    deepspeed_needs_cuda,
    devices_are_local_ranks,
    param_offload_needs_stage3,
    one_half_precision,
    fabric_batch_size_adds_up,
    trainer_batch_size_adds_up,
    no_auto_values,
    auto_values_defaulted,
    trainer_owns_accumulation,
    zero_values_known,
    deepspeed_precision_plugin,
    contiguous_checkpointing_configurable,
    clipping_by_norm_only,
    one_clipping_threshold,
    deepspeed_accepts_the_config,
    deepspeed_takes_the_config_as_written,
    one_optimizer,
    offload_steps_with_cpu_adam,
    offload_takes_the_optimizer,
    *PRECISION_CROSS_RULES,
    *STRATEGY_HARDWARE_RULES,
)


def held_config(strategy: Any) -> dict[str, Any]:
    """``Preset.resolve`` of the DeepSpeed presets: the config the strategy holds and Lightning's formatting of it
    (:class:`~lightning_presets.strategies.deepspeed.config.HeldConfig`), copied once at construction."""
    config = getattr(strategy, "config", None)
    held = copy.deepcopy(config) if isinstance(config, dict) else None
    return {RESOLVED_KEY: HeldConfig(held, formatted_by_lightning(strategy))}


def _prepare(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if key not in _PRESET_ONLY_KEYS}


_EVIDENCE = "construction (Trainer and Fabric, simulated CUDA, deepspeed 0.19.8 installed; no GPU run)"
TESTED_WITH_ZERO2 = tested(
    _EVIDENCE,
    construction="the Trainer on 2 simulated nodes of 4 CUDA devices, with DeepSpeed 0.19.8 installed: ZeRO stage 2 "
    "with the optimizer offloaded to CPU in the config Lightning holds (ZeRO needs CUDA to run)",
    deepspeed="0.19.8",
)
TESTED_WITH_ZERO3 = tested(
    _EVIDENCE,
    construction="Trainer and Fabric on 8 simulated CUDA devices, with DeepSpeed 0.19.8 installed: ZeRO stage 3 with "
    "parameters and optimizer offloaded to CPU in the config (ZeRO needs CUDA to run)",
    deepspeed="0.19.8",
)

DEEPSPEED_ZERO2_OFFLOAD = Preset(
    name="deepspeed_zero2_offload",
    description="DeepSpeed ZeRO stage 2 (optimizer state and gradients sharded) with optimizer state offloaded "
    "to CPU. For models whose optimizer state does not fit in GPU memory. CUDA only.",
    family=DEEPSPEED_FAMILY,
    strategy=every_kind("DeepSpeedStrategy"),
    init_params={
        "stage": 2,
        "offload_optimizer": True,
        "offload_optimizer_device": "cpu",
    },
    rules=RULES,
    requires=(DEEPSPEED,),
    mixins={"trainer": DeepSpeedTrainerHooks, "fabric": DeepSpeedFabricHooks},
    resolve=held_config,
    cpu_offload=True,
    tested_with=TESTED_WITH_ZERO2,
)

DEEPSPEED_ZERO3_OFFLOAD_CKPT = dataclasses.replace(
    DEEPSPEED_ZERO2_OFFLOAD,
    name="deepspeed_zero3_offload_ckpt",
    description="DeepSpeed ZeRO stage 3 with parameters and optimizer state offloaded to CPU and activation "
    "checkpointing on the model's repeated blocks. For models that do not fit in GPU memory. CUDA only.",
    init_params={
        "stage": 3,
        "offload_optimizer": True,
        "offload_parameters": True,
        "offload_optimizer_device": "cpu",
        "offload_params_device": "cpu",
        "checkpoint_blocks": None,
    },
    rules=(*RULES, checkpoint_block_found),
    extra_keys=_PRESET_ONLY_KEYS,
    prepare=_prepare,
    activation_checkpointing=True,
    tested_with=TESTED_WITH_ZERO3,
)
