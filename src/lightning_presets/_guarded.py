"""The guard hooks every preset strategy class carries, for the Trainer and for Fabric."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from lightning_presets._context import Context, snapshot
from lightning_presets._errors import report
from lightning_presets._rules import Rule, run_rules

if TYPE_CHECKING:
    from torch.nn import Module

    from lightning_presets._namespaces import Namespace
    from lightning_presets._preset import Preset


class Guarded:
    """Runs the preset's rules at the last step of ``Trainer``/``Fabric`` construction.

    Lightning's connector sets accelerator, precision, devices, number of nodes and cluster
    environment, then calls ``_configure_launcher()`` exactly once: that is where the snapshot is
    taken and the construction rules run, before any process, process group or CUDA context exists.
    """

    _lp_preset: ClassVar[Preset]
    _lp_namespace: ClassVar[Namespace]
    _lp_options: Mapping[str, Any]
    _lp_context: Context | None = None

    def _configure_launcher(self) -> None:
        context = snapshot(self, self._lp_preset.name, self._lp_namespace, self._lp_options)
        self._lp_context = context
        report(run_rules(self._construction_rules(context), "construction", context), stacklevel=6)
        super()._configure_launcher()  # type: ignore[misc]

    def _construction_rules(self, context: Context) -> tuple[Rule, ...]:
        """The preset's rules, plus the strategy × precision-preset rules when a precision preset is in use."""
        rules = self._lp_preset.rules
        if context.precision_preset is None:
            return rules
        from lightning_presets._precision import PRECISION_CROSS_RULES

        return (*rules, *(each for each in PRECISION_CROSS_RULES if each not in rules))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by preset name and target (spawn launchers pickle the strategy; its class is made at run time)."""
        state = dict(self.__dict__)
        state["_lp_options"] = dict(state.get("_lp_options", {}))
        state.pop("_lp_context", None)  # taken again in the new process
        return (_rebuild, (self._lp_preset.name, self._lp_namespace.target), state)

    def _lp_check_model(self, model: Module) -> None:
        """Run the model rules; called before the first collective."""
        context = self._lp_context
        if context is not None:
            report(run_rules(self._lp_preset.rules, "model", context, model), stacklevel=5)


def _rebuild(name: str, target: str) -> Any:
    """Unpickling: an empty instance of the preset's guarded class; pickle then restores its state."""
    from lightning_presets._api import get_preset
    from lightning_presets._bridge import guarded_class
    from lightning_presets._namespaces import namespace_for_target

    cls: Any = guarded_class(get_preset(name), namespace_for_target(target))
    return cls.__new__(cls)


class GuardedTrainerStrategy(Guarded):
    """Trainer side: the model is known in ``connect``, which runs in every process before setup."""

    def connect(self, model: Module) -> None:
        self._lp_check_model(model)
        super().connect(model)  # type: ignore[misc]


class GuardedFabricStrategy(Guarded):
    """Fabric side: the model is known in ``setup_module``, before it is wrapped or sharded."""

    def setup_module(self, module: Module) -> Module:
        self._lp_check_model(module)
        return super().setup_module(module)  # type: ignore[misc,no-any-return]
