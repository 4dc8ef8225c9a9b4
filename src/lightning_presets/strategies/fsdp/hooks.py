"""The FSDP presets' lifecycle hooks (the mixins): the repeated blocks wrapped (and checkpointed) where Lightning
wraps the model, and the hybrid preset's automatic mesh."""

from __future__ import annotations

from typing import Any, cast

from torch import nn

from lightning_presets.core.mesh import AUTO
from lightning_presets.guards.strategy import PresetHooks
from lightning_presets.inspection.blocks import find_repeated_blocks
from lightning_presets.registry import private
from lightning_presets.strategies.fsdp.options import FSDPOptions


class FSDPHooks(PresetHooks):
    """Wraps the repeated blocks it finds (and checkpoints them, for presets that do), unless the user passed
    a policy."""

    @property
    def _lp_fsdp_kwargs(self) -> dict[str, Any]:
        """The keyword arguments Lightning passes to FSDP: ``kwargs`` on the Trainer's class, ``_fsdp_kwargs`` on
        Fabric's."""
        trainer = self._lp_namespace.kind == "trainer"
        fsdp_kwargs: dict[str, Any] = vars(self)["kwargs"] if trainer else private.fabric_fsdp_kwargs(self)
        return fsdp_kwargs

    def _lp_apply_blocks(self, model: nn.Module) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        if any(isinstance(module, FullyShardedDataParallel) for module in model.modules()):
            return  # wrapped by hand (e.g. in configure_model): the user's layout wins, Lightning wraps nothing
        self._lp_check_setup(model)
        blocks = find_repeated_blocks(model)
        if not blocks:
            return
        view = FSDPOptions.of(self._lp_options)
        if view.auto_wrap_policy is None:
            self._lp_fsdp_kwargs["auto_wrap_policy"] = ModuleWrapPolicy(blocks)
        if not view.checkpointing_chosen and self._lp_preset.activation_checkpointing:
            private.set_activation_checkpointing_kwargs(self, {"auto_wrap_policy": ModuleWrapPolicy(blocks)})
        self.lp_blocks = blocks


class FSDPTrainerHooks(FSDPHooks, private.SetupModelHook):
    """Trainer side of the FSDP presets: the blocks are wrapped where Lightning wraps the model (``_setup_model``)."""

    def _lp_before_setup_model(self, model: nn.Module) -> None:
        self._lp_apply_blocks(model)


class FSDPFabricHooks(FSDPHooks):
    """Fabric side of the FSDP presets."""

    def setup_module(self, module: nn.Module) -> nn.Module:
        self._lp_apply_blocks(module)
        return cast(nn.Module, super().setup_module(module))


class _AutoMesh(FSDPHooks):
    """Fills ``device_mesh='auto'`` with (nodes, devices per node) from the final context, before Lightning builds the
    mesh from it."""

    def _lp_before_launcher(self) -> None:
        context = self._lp_context
        if context is not None and self._lp_fsdp_kwargs.get("device_mesh") == AUTO:
            self._lp_fsdp_kwargs["device_mesh"] = (context.num_nodes, context.devices_per_node)
        super()._lp_before_launcher()


class HybridTrainerHooks(_AutoMesh, FSDPTrainerHooks):
    """The Trainer side of the hybrid preset: the automatic mesh, then the FSDP presets' block wrapping."""


class HybridFabricHooks(_AutoMesh, FSDPFabricHooks):
    """The Fabric side of the hybrid preset."""
