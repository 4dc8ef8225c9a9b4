"""The guard head every preset strategy class starts with, for the Trainer and for Fabric."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, ClassVar, cast

from lightning_presets.core import hardware
from lightning_presets.core.context import Context, Options, accelerator_name
from lightning_presets.core.findings import report
from lightning_presets.core.namespaces import Namespace
from lightning_presets.core.preset import Preset
from lightning_presets.core.rules import Rule, Stage, conditional_findings, run_rules
from lightning_presets.failures import explained, explaining
from lightning_presets.guards.launch_rules import LAUNCH_RULES
from lightning_presets.guards.machine import MACHINE_RULES
from lightning_presets.guards.precision_rules import PRECISION_CROSS_RULES, STRATEGY_HARDWARE_RULES
from lightning_presets.inspection.arguments import call_arguments
from lightning_presets.registry import compat
from lightning_presets.registry.private import LauncherHook, start_method_of, trainer_of

if TYPE_CHECKING:
    from torch.nn import Module

    from lightning_presets.registry.build import Heads


def torch_build() -> Mapping[str, Any]:
    """``cuda``, ``hip`` and ``nccl`` of the installed torch build (never a CUDA context: NCCL's version is the one
    compiled in)."""
    import torch
    import torch.distributed as dist

    nccl = None
    if torch.version.cuda is not None and dist.is_available() and dist.is_nccl_available():
        version: Any = torch.cuda.nccl.version()  # type: ignore[no-untyped-call]  # torch leaves it untyped
        nccl = tuple(version)
    return MappingProxyType({"cuda": torch.version.cuda, "hip": torch.version.hip, "nccl": nccl})


def environment_refusal(strategy: Any, devices: int, nodes: int) -> str | None:
    """What the cluster environment's own ``validate_settings`` says of the job, run now instead of when Lightning's
    script launcher (start method ``popen``, every preset family's but XLA's) launches ``fit``; ``None`` when it
    accepts the job or no such launcher will ask it."""
    environment = getattr(strategy, "cluster_environment", None)
    if environment is None or start_method_of(strategy) != "popen" or accelerator_name(strategy.accelerator) == "xla":
        return None
    try:
        environment.validate_settings(num_devices=devices, num_nodes=nodes)
    except Exception as error:  # the environment's ValueError, as Lightning would raise it at launch
        return f"{type(error).__name__}: {error}"
    return None


def launched_world(environment: Any, devices: int, nodes: int, refusal: str | None) -> int | None:
    """The world a launcher made, where the cluster environment reads it from the launcher and it differs from
    devices × num_nodes: Ray's, Kubeflow's, LSF's, MPI's environments start their processes outside Lightning and keep
    their world when Lightning sets one (``set_world_size(devices × num_nodes)`` changes nothing they report), where
    Lightning's own environment reports what it was set to. ``None`` for an environment that takes Lightning's count,
    one that refuses the job (its refusal says it) or one that cannot say yet.

    Asked of a copy of the environment, so the user's object keeps its state until Lightning sets it itself."""
    if environment is None or refusal is not None or not getattr(environment, "creates_processes_externally", False):
        return None
    asked = devices * nodes
    try:
        probe = copy.copy(environment)
        probe.set_world_size(asked)  # what Lightning's set_world_ranks does at launch
        world = int(probe.world_size())
    except Exception:  # an environment that reads a variable not set (yet): no launcher's world to read
        return None
    return world if world > 0 and world != asked else None


def snapshot(strategy: Any, preset: Preset, namespace: Namespace, options: Mapping[str, Any]) -> Context:
    """Read the final configuration off a strategy whose connector has finished with it."""
    precision = strategy.precision_plugin if namespace.kind == "trainer" else strategy.precision
    devices = getattr(strategy, "parallel_devices", None)
    environment = getattr(strategy, "cluster_environment", None)
    accelerator = accelerator_name(strategy.accelerator)
    arguments = call_arguments(namespace.kind)
    devices_per_node = len(devices) if devices else 1
    num_nodes = int(getattr(strategy, "num_nodes", 1) or 1)
    accumulation = arguments.get("accumulate_grad_batches")
    refusal = environment_refusal(strategy, devices_per_node, num_nodes)
    return Context(
        preset=preset.name,
        target=namespace.target,
        kind=namespace.kind,
        accelerator=accelerator,
        devices_per_node=devices_per_node,
        num_nodes=num_nodes,
        precision=str(getattr(precision, "precision", "32-true")),
        precision_plugin=type(precision).__name__,
        cluster_environment=type(environment).__name__ if environment is not None else "none",
        options=MappingProxyType(dict(options)),
        resolved=MappingProxyType(dict(preset.resolve(strategy)))
        if preset.resolve is not None
        else MappingProxyType({}),
        family=preset.family,
        precision_classes=tuple(cls.__name__ for cls in type(precision).__mro__),
        precision_preset=getattr(precision, "_lp_preset", None),
        gpu_capability=hardware.observed_capability() if accelerator == "cuda" else None,
        activation_checkpointing=preset.activation_checkpointing,
        accumulate_grad_batches=accumulation if type(accumulation) is int else None,
        torch_build=torch_build(),
        environment_refusal=refusal,
        launched_world=launched_world(environment, devices_per_node, num_nodes, refusal),
        arguments=MappingProxyType(arguments),
        device_indices=device_indices(devices),
    )


def device_indices(devices: Sequence[Any] | None) -> tuple[int, ...] | None:
    """The index of each of Lightning's ``parallel_devices`` (``torch.device``), or ``None`` when one has none."""
    indices = tuple(getattr(device, "index", None) for device in devices or ())
    return indices if indices and all(type(index) is int for index in indices) else None  # type: ignore[return-value]


class Guarded(LauncherHook):
    """Runs the preset's rules at the last step of ``Trainer``/``Fabric`` construction.

    Lightning's connector sets accelerator, precision, devices, number of nodes and cluster
    environment, then calls ``_configure_launcher()`` exactly once: that is where the snapshot is
    taken and the construction rules run, before any process, process group or CUDA context exists.
    The registry composes the class and sets the class attributes below.
    """

    _lp_preset: ClassVar[Preset]
    _lp_namespace: ClassVar[Namespace]
    _lp_rebuild: ClassVar[Any]
    _lp_rebuild_args: ClassVar[tuple[Any, ...]]
    _lp_options: Mapping[str, Any]
    _lp_context: Context | None = None

    # --- what the registry's build asks of a head (registry.build.Head) ---------------------------------

    @classmethod
    def _lp_usage(cls, preset: Preset, namespace: Namespace) -> str:
        return f"{namespace.constructor}(strategy={preset.name!r})"

    @classmethod
    def _lp_options_context(
        cls, preset: Preset, namespace: Namespace, values: Mapping[str, Any], overrides: Mapping[str, Any]
    ) -> Options:
        return Options(
            preset=preset.name,
            target=namespace.target,
            values=MappingProxyType(dict(values)),
            overrides=MappingProxyType(dict(overrides)),
        )

    @classmethod
    def _lp_options_rules(cls, preset: Preset) -> tuple[Rule, ...]:
        return preset.rules

    @classmethod
    def _lp_attach(cls, instance: Any, context: Options) -> None:
        instance._lp_options = context.values

    # --- Lightning hooks ----------------------------------------------------------------------------------

    def _lp_before_launcher(self) -> None:
        """Lightning's ``_configure_launcher`` (``registry.private.LauncherHook``): the snapshot and the construction
        rules, then the family mixins' additions."""
        context = self._lp_snapshot()
        self._lp_context = context
        findings = run_rules(self._construction_rules(context), "construction", context)
        report([*findings, *conditional_findings(self._lp_preset.rules, context)])
        super()._lp_before_launcher()

    def _lp_snapshot(self) -> Context:
        """The configuration the construction rules read (a head for an engine that lays the processes out itself, such
        as Ray's, reads its layout here)."""
        return snapshot(self, self._lp_preset, self._lp_namespace, self._lp_options)

    def setup_environment(self) -> None:
        """Lightning forms the process group here, in every family (Trainer and Fabric): the runtime guards watch the
        ranks join, then compare their fingerprints before the model's first collective (``guards.runtime``)."""
        from lightning_presets.guards.runtime import around_process_group

        with around_process_group(self):
            super().setup_environment()

    def _construction_rules(self, context: Context) -> tuple[Rule, ...]:
        """The preset's rules, the rules every strategy preset gets, and the strategy × precision-preset rules when a
        precision preset is in use."""
        added = (*STRATEGY_HARDWARE_RULES, *LAUNCH_RULES, *MACHINE_RULES)
        if context.precision_preset is not None:
            added = (*added, *PRECISION_CROSS_RULES)
        rules = self._lp_preset.rules
        return (*rules, *(each for each in added if each not in rules))

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle by preset name and target (spawn launchers pickle the strategy; its class is made at run time)."""
        state = dict(self.__dict__)
        state["_lp_options"] = dict(state.get("_lp_options", {}))
        state.pop("_lp_context", None)  # taken again in the new process
        return (type(self)._lp_rebuild, type(self)._lp_rebuild_args, state)

    def _lp_run(self, stage: Stage, model: Module) -> None:
        """Run the preset's rules of a model stage once the construction snapshot exists."""
        context = self._lp_context
        if context is not None:
            report(run_rules(self._lp_preset.rules, stage, context, model))

    def _lp_check_trainer(self, trainer: Any) -> None:
        """The ``trainer`` rules, on the construction snapshot completed with the Trainer's own settings.

        Called when ``fit`` connects the model, and by ``lightning-presets check`` right after construction.
        """
        context = self._lp_context
        accumulation = getattr(trainer, "accumulate_grad_batches", None)
        if context is None or trainer is None:
            return
        completed = dataclasses.replace(
            context, accumulate_grad_batches=accumulation if type(accumulation) is int else None
        )
        report(run_rules(self._lp_preset.rules, "trainer", completed))

    def _lp_check_model(self, model: Module) -> None:
        """The model rules; called before the first collective."""
        self._lp_run("model", model)

    def _lp_check_setup(self, model: Module) -> None:
        """The setup rules, on the complete model just before the strategy wraps it (each family's hook calls it)."""
        self._lp_run("setup", model)

    def _lp_check_optimizers(self, model: Module | None, optimizers: Sequence[Any]) -> None:
        """The ``optimizers`` rules, on the optimizers ``configure_optimizers`` returned (Fabric: those passed to
        ``setup``), before the strategy (or DeepSpeed's engine) takes them over."""
        context = self._lp_context
        if context is not None and optimizers:
            report(run_rules(self._lp_preset.rules, "optimizers", context, model, tuple(optimizers)))

    def _lp_check_resume(
        self,
        path: Any,
        *,
        how: str,
        restores_optimizer: bool,
        state_optimizers: tuple[str, ...] | None = None,
        strict: bool = True,
    ) -> None:
        """The resume rules, before Lightning's ``load_checkpoint`` reads a byte of ``path`` or broadcasts it. Every
        rank reads the same files and configuration, so every rank reaches the same verdict without communicating."""
        from lightning_presets.guards.resume import resume_findings  # imports torch: not at `import lightning_presets`

        context = self._lp_context or self._lp_snapshot()
        findings = resume_findings(
            path,
            context,
            strategy=self,
            how=how,
            restores_optimizer=restores_optimizer,
            own=self._lp_preset.rules,
            state_optimizers=state_optimizers,
            strict=strict,
        )
        report(findings)


class GuardedTrainerStrategy(Guarded):
    """Trainer side: the model is known in ``connect``, which runs in every process before setup."""

    def connect(self, model: Module) -> None:
        self._lp_check_trainer(trainer_of(model))
        self._lp_check_model(model)
        super().connect(model)

    def setup_optimizers(self, trainer: Any) -> None:
        super().setup_optimizers(trainer)
        self._lp_check_optimizers(getattr(self, "lightning_module", None), getattr(self, "optimizers", ()))

    def load_checkpoint(self, checkpoint_path: Any, *args: Any, **kwargs: Any) -> Any:
        """``fit``/``validate``/``test``/``predict`` with ``ckpt_path``: the resume rules first."""
        trainer = trainer_of(getattr(self, "lightning_module", None))
        state = getattr(getattr(trainer, "state", None), "fn", None)
        function = str(getattr(state, "value", state) or "fit")
        self._lp_check_resume(checkpoint_path, how=f"{function}(ckpt_path=...)", restores_optimizer=function == "fit")
        return super().load_checkpoint(checkpoint_path, *args, **kwargs)

    def on_exception(self, exception: BaseException) -> None:
        """Lightning's interrupt handling (every exception of ``fit``/``validate``/``test``/``predict``): the cause and
        fix of a known failure are appended to the exception as notes, its message kept (``failures``)."""
        with explained(exception):
            super().on_exception(exception)


@explaining("setup_environment", "setup_module_and_optimizers", "setup_module", "setup_optimizer", "backward",
            "optimizer_step", "barrier", "broadcast", "all_reduce", "all_gather", "load_checkpoint")  # fmt: skip
class GuardedFabricStrategy(Guarded):
    """Fabric side: the model is known in ``setup_module``, before it is wrapped or sharded."""

    def setup_module(self, module: Module) -> Module:
        self._lp_check_model(module)
        return cast("Module", super().setup_module(module))

    def setup_module_and_optimizers(self, module: Module, optimizers: list[Any], scheduler: Any = None) -> Any:
        self._lp_check_optimizers(module, optimizers)
        return compat.setup_module_and_optimizers(super().setup_module_and_optimizers, module, optimizers, scheduler)

    def setup_optimizer(self, optimizer: Any) -> Any:
        self._lp_check_optimizers(None, [optimizer])
        return super().setup_optimizer(optimizer)

    def load_checkpoint(self, path: Any, state: Any = None, *args: Any, **kwargs: Any) -> Any:
        """``Fabric.load``/``load_raw``: the resume rules first."""
        if isinstance(state, Mapping):
            optimizers = tuple(
                str(key)
                for key, value in state.items()
                if hasattr(value, "param_groups") and hasattr(value, "state_dict")
            )
            strict = kwargs.get("strict", args[0] if args else True) is not False
            self._lp_check_resume(
                path, how="load(...)", restores_optimizer=bool(optimizers), state_optimizers=optimizers, strict=strict
            )
        else:  # load_raw: one module's or optimizer's own state dict
            self._lp_check_resume(path, how="load_raw(...)", restores_optimizer=False)
        return super().load_checkpoint(path, state, *args, **kwargs)


if TYPE_CHECKING:
    PresetHooks = Guarded
else:

    class PresetHooks(LauncherHook):
        """Base of a family's mixin (``Preset.mixins``). The head comes first in the composed class, so at run time
        this is a plain class over ``LauncherHook`` (which then follows every family mixin in the composed class's
        order, so their ``_lp_before_launcher`` run before Lightning's hook); the type checker sees the head's
        attributes and hooks through it."""


HEADS: Heads = MappingProxyType({"trainer": GuardedTrainerStrategy, "fabric": GuardedFabricStrategy})
"""The head of every strategy preset class, by kind; the registry composes classes from them."""
