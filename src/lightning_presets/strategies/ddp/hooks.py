"""The DDP presets' lifecycle hooks (the mixins): Fabric's guarded ``no_sync`` under the static graph, Fabric's
registration of the comm hook, and the Trainer's flush of the static graph's first backward."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import nn

from lightning_presets.core.findings import report
from lightning_presets.core.rules import run_rules
from lightning_presets.guards.strategy import PresetHooks
from lightning_presets.registry import compat
from lightning_presets.strategies.ddp import rules  # the module: LP308 is declared in rules, not here
from lightning_presets.strategies.ddp.options import DDPOptions


class StaticGraphFabricHooks(PresetHooks):
    """Fabric: ``fabric.no_backward_sync(model, enabled=True)`` enters the wrapped module's ``no_sync``. torch's static
    graph enqueues its delayed all-reduce in the first backward that synchronises, so a backward that skips the
    synchronisation before any forward has synchronised fails on every rank (LP308), and one after trains (Fabric's
    recipe: iteration 0 synchronises). The wrapped module's ``no_sync`` refuses exactly then, at the user's call; a
    forward pre-hook notes the first forward that runs with gradients and synchronisation on."""

    def setup_module(self, module: Any) -> Any:
        wrapped = super().setup_module(module)
        context = self._lp_context
        if context is not None and DDPOptions.of(context).static_graph and hasattr(wrapped, "no_sync"):
            unguarded = wrapped.no_sync
            synchronised: list[bool] = []

            def note_synchronised_forward(module: nn.Module, args: Any) -> None:
                if not synchronised and torch.is_grad_enabled() and module.require_backward_grad_sync:
                    synchronised.append(True)

            def no_sync() -> Any:
                if not synchronised:  # no forward (so no backward) has synchronised yet
                    skipping = dataclasses.replace(context, accumulate_grad_batches=2)  # a backward without its sync
                    report(run_rules((rules.static_graph_without_accumulation,), "construction", skipping))
                return unguarded()

            wrapped.register_forward_pre_hook(note_synchronised_forward)
            wrapped.no_sync = no_sync
        return wrapped


class CommHookFabricHooks(StaticGraphFabricHooks):
    """Fabric's DDPStrategy has no ``ddp_comm_hook`` argument: register the hook once the module is wrapped."""

    def setup_module(self, module: Any) -> Any:
        wrapped = super().setup_module(module)
        view = DDPOptions.of(self._lp_options)
        if view.comm_hook is not None:
            wrapped.register_comm_hook(state=view.comm_state, hook=view.comm_hook)
        return wrapped


class StaticGraphTrainerHooks(PresetHooks):
    """Manual optimization: all-reduce the static graph's first backward where Lightning does not (2.5, ``compat``)."""

    def post_backward(self, closure_loss: Any) -> None:
        super().post_backward(closure_loss)
        compat.flush_static_graph_first_backward(self)
