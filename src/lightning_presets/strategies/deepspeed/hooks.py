"""The DeepSpeed presets' lifecycle hooks (the mixins between the guard head and Lightning's ``DeepSpeedStrategy``),
and the activation checkpointing of the repeated blocks that the ``_ckpt`` preset applies."""

from __future__ import annotations

import os
from functools import partial
from typing import Any

from torch import nn

from lightning_presets.guards.strategy import PresetHooks
from lightning_presets.inspection.blocks import find_repeated_blocks
from lightning_presets.registry import compat, private
from lightning_presets.strategies.deepspeed.config import FORCE_DS_CPU_OPTIMIZER
from lightning_presets.strategies.deepspeed.options import DeepSpeedOptions


def checkpoint_blocks(model: nn.Module, blocks: set[type[nn.Module]]) -> int:
    """Wrap every instance of ``blocks`` in non-reentrant activation checkpointing; returns how many."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    classes = tuple(blocks)
    count = sum(1 for module in model.modules() if isinstance(module, classes))
    if count:
        apply_activation_checkpointing(
            model,
            checkpoint_wrapper_fn=partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda module: isinstance(module, classes),
        )
    return count


class _DeepSpeedHooks(PresetHooks):
    """What both sides share: a config Lightning builds from the preset's arguments lets a torch optimizer step the
    offloaded state (warned, LP416) instead of DeepSpeed refusing it, and the presets that checkpoint activations wrap
    the repeated blocks once the model is complete (the guards read the config the strategy holds through
    ``Preset.resolve``)."""

    config: Any
    lightning_module: Any
    DEEPSPEED_ENV_VAR: str

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        built_by_lightning = kwargs.get("config") is None and not os.environ.get(type(self).DEEPSPEED_ENV_VAR)
        if built_by_lightning and isinstance(self.config, dict):
            # ZeRO-Offload with the user's torch optimizer: slower than DeepSpeed's CPU Adam (LP416), not refused
            self.config.setdefault(FORCE_DS_CPU_OPTIMIZER, False)

    def _lp_prepare_model(self, model: nn.Module) -> None:
        """Setup rules, then activation checkpointing of the repeated blocks (presets that checkpoint only)."""
        self._lp_check_setup(model)
        if not self._lp_preset.activation_checkpointing:
            return
        blocks = DeepSpeedOptions.of(self._lp_options).checkpoint_blocks or find_repeated_blocks(model)
        if blocks:
            checkpoint_blocks(model, set(blocks))
            self.lp_blocks = set(blocks)


class DeepSpeedTrainerHooks(_DeepSpeedHooks, private.InitOptimizersHook):
    """Trainer side: the model is complete (``configure_model`` has run) when ``setup`` starts."""

    def setup(self, trainer: Any) -> None:
        self._lp_prepare_model(trainer.lightning_module)
        super().setup(trainer)

    def _lp_after_init_optimizers(self, optimizer: Any, scheduler: Any) -> None:
        """DeepSpeed takes the optimizer from ``configure_optimizers`` in Lightning's ``_init_optimizers``, not in
        ``setup_optimizers``: the optimizer rules run on it there."""
        self._lp_check_optimizers(self.lightning_module, [optimizer])


class DeepSpeedFabricHooks(_DeepSpeedHooks):
    """Fabric side: DeepSpeed sets the model up with its optimizer, which bypasses ``setup_module``."""

    def setup_module_and_optimizers(self, module: nn.Module, optimizers: list[Any], scheduler: Any = None) -> Any:
        self._lp_check_model(module)
        self._lp_prepare_model(module)
        return compat.setup_module_and_optimizers(super().setup_module_and_optimizers, module, optimizers, scheduler)

    def setup_module(self, module: nn.Module) -> Any:
        self._lp_prepare_model(module)
        return super().setup_module(module)
