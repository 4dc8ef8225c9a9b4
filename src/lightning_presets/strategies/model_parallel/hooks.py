"""The ``ModelParallelStrategy`` presets' lifecycle hooks (the mixins): ``tp2d_hybrid``'s setup rules on the model
``configure_model`` parallelized; ``fsdp2``'s whole-world data parallelism, its sharding and its steps routed through
the sharded root."""

from __future__ import annotations

import functools
from typing import Any, cast

from torch import nn

from lightning_presets.guards.strategy import PresetHooks
from lightning_presets.registry import private
from lightning_presets.strategies.model_parallel import fsdp2


class ModelParallelTrainerHooks(PresetHooks):
    """Trainer side: the setup rules run on the model ``configure_model`` parallelized, before Lightning's setup."""

    model: nn.Module | None

    def setup(self, trainer: Any) -> None:
        if self.model is not None:
            self._lp_check_setup(self.model)
        super().setup(trainer)


class _DataParallelWorld(PresetHooks):
    """``data_parallel_size='auto'`` means the whole world here (Lightning's own 'auto' means nodes)."""

    def _lp_before_launcher(self) -> None:
        context = self._lp_context
        data, tensor = private.parallel_sizes_of(self)
        if context is not None and data == "auto":
            data = context.world_size
        private.set_parallel_sizes(self, data, 1 if tensor == "auto" else tensor)
        super()._lp_before_launcher()


class FSDP2TrainerHooks(_DataParallelWorld):
    """Trainer side: shards after ``configure_model`` when the module did not, then routes steps through the root.

    FSDP2 gathers the root's own parameters in the root's forward hooks; Lightning calls
    ``training_step`` directly, so the steps go through the root's ``__call__`` the way Lightning
    routes them through a DDP or FSDP wrapper.
    """

    model: nn.Module | None
    lightning_module: Any
    device_mesh: Any
    precision_plugin: Any

    @property
    def _lp_sharded_root(self) -> bool:
        return self.lightning_module in fsdp2._SHARDED_BY_PRESET

    def setup(self, trainer: Any) -> None:
        """Runs for every ``fit``/``validate``/``test``/``predict``; shards once, the first time."""
        model = self.model
        if model is not None:
            self._lp_check_setup(model)
        if model is not None and not fsdp2.is_parallelized(model):
            preset = self._lp_preset
            fsdp2.shard_blocks_and_root(
                model,
                self.device_mesh["data_parallel"],
                offload=preset.cpu_offload,
                checkpoint=preset.activation_checkpointing,
            )
        if not self._lp_sharded_root:
            super().setup(trainer)
            return
        with fsdp2._configure_model_defined(self.lightning_module):
            super().setup(trainer)

    def _lp_step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if not self._lp_sharded_root:
            return getattr(super(), name)(*args, **kwargs)
        module = self.lightning_module
        with getattr(self.precision_plugin, fsdp2._STEPS[name])():
            return private.forward_redirection_of(self)(module, module, name, *args, **kwargs)

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._lp_step("training_step", *args, **kwargs)

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._lp_step("validation_step", *args, **kwargs)

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._lp_step("test_step", *args, **kwargs)

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._lp_step("predict_step", *args, **kwargs)


class FSDP2FabricHooks(_DataParallelWorld):
    """Fabric side: the preset's ``parallelize_fn`` shards as the preset says; its setup rules run just before."""

    def _lp_before_launcher(self) -> None:
        if private.parallelize_fn_of(self) is fsdp2.shard_by_preset:
            preset = self._lp_preset
            private.set_parallelize_fn(
                self,
                functools.partial(
                    fsdp2.parallelize, offload=preset.cpu_offload, checkpoint=preset.activation_checkpointing
                ),
            )
        super()._lp_before_launcher()

    def setup_module(self, module: nn.Module) -> nn.Module:
        function = private.parallelize_fn_of(self)
        if (
            isinstance(function, functools.partial)
            and function.func is fsdp2.parallelize
            and not fsdp2.is_parallelized(module)
        ):
            self._lp_check_setup(module)
        return cast(nn.Module, super().setup_module(module))
