"""The one door to Lightning's and DeepSpeed's private names, and the list of torch's the package uses.

A Lightning or torch release may rename any of these without notice. Each is declared here once, with what the package
does with it and where (:data:`LIGHTNING`, :data:`DEEPSPEED`, :data:`TORCH`). Lightning's and DeepSpeed's are also
only *used* here: the other modules call the accessors below (:func:`launcher_of`, :func:`trainer_of`, ...) or inherit
the mixins whose methods are Lightning's private hooks (:class:`LauncherHook`, :class:`SetupModelHook`,
:class:`InitOptimizersHook`), which delegate to ``_lp_`` methods of ours. torch's stay where they are used, listed.

``registry.private_check`` resolves every declaration against the installed releases, and the private-names test
fails, naming the entry, on a release that lacks one (CI runs it on both Lightning legs and both ends of the torch
range). The test also scans the package: a Lightning or DeepSpeed private name outside this module, or a torch one in
a module its entry does not name, fails it.
"""

from __future__ import annotations

import importlib
import types
from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

from lightning_presets.core.mixins import Next

Use = Literal["call", "read", "override", "patch", "attribute", "import", "probe"]


@dataclass(frozen=True, slots=True)
class Private:
    """One private name of another package, and what this package does with it."""

    owner: str
    """``module`` or ``module:Class`` it lives in (the ``lightning.*`` spelling; the ``pytorch_lightning`` twin is
    checked when installed)."""
    name: str
    """The private name itself (``_configure_launcher``); empty when ``owner`` is the private thing (a module)."""
    use: Use
    where: tuple[str, ...]
    """The modules of this package that use it (relative to ``lightning_presets``)."""
    optional: str = ""
    """The distribution it belongs to when that is optional (``deepspeed``): not checked where it is missing."""

    @property
    def label(self) -> str:
        return f"{self.owner}{'.' + self.name if self.name else ''}"


_PL = "lightning.pytorch"
_FABRIC = "lightning.fabric"
_STRATEGY = f"{_PL}.strategies.strategy:Strategy"
_CONNECTOR = f"{_PL}.trainer.connectors.accelerator_connector"
_DDP, _FABRIC_DDP = f"{_PL}.strategies.ddp:DDPStrategy", f"{_FABRIC}.strategies.ddp:DDPStrategy"
_FSDP, _FABRIC_FSDP = f"{_PL}.strategies.fsdp:FSDPStrategy", f"{_FABRIC}.strategies.fsdp:FSDPStrategy"
_MP = f"{_PL}.strategies.model_parallel:ModelParallelStrategy"
_FABRIC_MP = f"{_FABRIC}.strategies.model_parallel:ModelParallelStrategy"
_MODULE = f"{_PL}.core.module:LightningModule"
_RUNTIME = ("guards.runtime.handshake", "diagnose.hangs")
_HOOK_CALLERS = ("_call_lightning_module_hook", "_call_callback_hooks", "_call_strategy_hook",
                 "_call_callbacks_state_dict")  # fmt: skip
_XLA_FLAGS = ("_XLA_AVAILABLE", "_XLA_GREATER_EQUAL_2_1", "_XLA_GREATER_EQUAL_2_5")

LIGHTNING: tuple[Private, ...] = (
    Private(_STRATEGY, "_configure_launcher", "override",
            ("guards.strategy", "strategies.model_parallel.hooks", "strategies.fsdp.hooks", "tools.check.construct")),
    Private(f"{_FABRIC}.strategies.strategy:Strategy", "_configure_launcher", "override",
            ("guards.strategy", "strategies.model_parallel.hooks", "strategies.fsdp.hooks")),
    Private(_STRATEGY, "_launcher", "attribute", ("tools.check.engine", "tools.check.resolved")),
    Private(_DDP, "_start_method", "attribute", ("guards.strategy",)),
    Private(_FABRIC_DDP, "_start_method", "attribute", ("guards.strategy",)),
    Private(_DDP, "_process_group_backend", "attribute", _RUNTIME[:1]),
    Private(_FABRIC_DDP, "_process_group_backend", "attribute", _RUNTIME[:1]),
    Private(_DDP, "_timeout", "attribute", (*_RUNTIME[1:], "guards.runtime.join")),
    Private(_FABRIC_DDP, "_timeout", "attribute", (*_RUNTIME[1:], "guards.runtime.join")),
    Private(_DDP, "_pl_static_graph_delay_done", "probe", ("registry.compat",)),
    Private(_FSDP, "_setup_model", "override", ("strategies.fsdp.hooks",)),
    Private(_FSDP, "_activation_checkpointing_kwargs", "attribute", ("strategies.fsdp.hooks",)),
    Private(_FABRIC_FSDP, "_activation_checkpointing_kwargs", "attribute", ("strategies.fsdp.hooks",)),
    Private(_FABRIC_FSDP, "_fsdp_kwargs", "attribute", ("strategies.fsdp.hooks", "tools.check.resolved")),
    Private(f"{_FABRIC}.strategies.xla_fsdp:XLAFSDPStrategy", "_auto_wrap_policy", "attribute",
            ("strategies.xla.hooks",)),
    Private(f"{_FABRIC}.strategies.xla_fsdp:XLAFSDPStrategy", "_activation_checkpointing_policy", "attribute",
            ("strategies.xla.hooks",)),
    Private(_MP, "_data_parallel_size", "attribute",
            ("strategies.model_parallel.hooks", "tools.check.resolved", "tools.simulation.lightning")),
    Private(_MP, "_tensor_parallel_size", "attribute",
            ("strategies.model_parallel.hooks", "tools.check.resolved", "tools.simulation.lightning")),
    Private(_FABRIC_MP, "_data_parallel_size", "attribute",
            ("strategies.model_parallel.hooks", "tools.check.resolved")),
    Private(_FABRIC_MP, "_tensor_parallel_size", "attribute",
            ("strategies.model_parallel.hooks", "tools.check.resolved")),
    Private(_FABRIC_MP, "_parallelize_fn", "attribute", ("strategies.model_parallel.hooks",)),
    Private(_MP, "_forward_redirection", "attribute", ("strategies.model_parallel.hooks",)),
    Private(f"{_PL}.strategies.strategy", "_ForwardRedirection", "import", ("tools.simulation.step",)),
    Private(f"{_PL}.strategies.deepspeed:DeepSpeedStrategy", "_init_optimizers", "override",
            ("strategies.deepspeed.hooks",)),
    Private(f"{_PL}.strategies.deepspeed:DeepSpeedStrategy", "_format_config", "call",
            ("strategies.deepspeed.parser",)),
    Private(f"{_FABRIC}.strategies.deepspeed:DeepSpeedStrategy", "_format_config", "call",
            ("strategies.deepspeed.parser",)),
    Private(_MODULE, "_trainer", "attribute", ("guards.strategy",)),
    Private(_MODULE, "_device_mesh", "attribute", ("tools.plan.trace", "tools.simulation.lightning")),
    Private(_MODULE, "_current_fx_name", "attribute", ("diagnose.hangs",)),
    Private(f"{_FABRIC}.connector", "_Connector", "import",
            ("inspection.arguments", "tools.check.construct", "tools.check.engine")),
    Private(f"{_FABRIC}.connector:_Connector", "_choose_auto_accelerator", "call", ("inspection.arguments",)),
    Private(f"{_FABRIC}.connector:_Connector", "_choose_gpu_accelerator_backend", "call", ("inspection.arguments",)),
    Private(f"{_FABRIC}.connector:_Connector", "_choose_and_init_cluster_environment", "call",
            ("tools.check.engine",)),
    Private(f"{_FABRIC}.connector:_Connector", "_cluster_environment_flag", "attribute", ("tools.check.engine",)),
    Private(f"{_FABRIC}.connector", "_convert_precision_to_unified_args", "call", ("inspection.arguments",)),
    Private(f"{_FABRIC}.connector", "_IS_INTERACTIVE", "patch", ("tools.simulation.lightning",)),
    Private(_CONNECTOR, "_AcceleratorConnector", "import", ("tools.check.construct", "tools.check.engine")),
    Private(f"{_CONNECTOR}:_AcceleratorConnector", "_choose_and_init_cluster_environment", "call",
            ("tools.check.engine",)),
    Private(f"{_CONNECTOR}:_AcceleratorConnector", "_cluster_environment_flag", "attribute",
            ("tools.check.engine",)),
    Private(_CONNECTOR, "_IS_INTERACTIVE", "patch", ("tools.simulation.lightning",)),
    Private(f"{_PL}.trainer.connectors.callback_connector", "_load_external_callbacks", "patch",
            ("tools.simulation.lightning",)),
    Private(f"{_FABRIC}.fabric", "_load_external_callbacks", "patch", ("tools.simulation.lightning",)),
    Private(f"{_FABRIC}.plugins.precision.precision", "_PRECISION_INPUT", "read", ("tools.check.names",)),
    *(Private(f"{_PL}.trainer.call", name, "read", _RUNTIME[1:]) for name in _HOOK_CALLERS),
    Private(f"{_PL}.trainer.connectors.logger_connector.result", "_ResultMetric", "read", _RUNTIME[1:]),
    Private(f"{_PL}.trainer.trainer:Trainer", "_run", "read", _RUNTIME[:1]),
    Private(f"{_PL}.trainer.configuration_validator", "_verify_loop_configurations", "call",
            ("tools.check.fit_start",)),
    Private(f"{_FABRIC}.utilities.load", "_load_distributed_checkpoint", "call", ("tools.convert.loading",)),
    Private(f"{_PL}.strategies.deepspeed:DeepSpeedStrategy", "_init_optimizers", "call",
            ("tools.check.rehearsal.child",)),
    Private(_CONNECTOR, "_register_external_accelerators_and_strategies", "probe", ("registry.compat",)),
    *(Private(f"{_FABRIC}.accelerators.xla", flag, "patch", ("tools.simulation.stand_ins",)) for flag in _XLA_FLAGS),
    Private(f"{_FABRIC}.plugins.precision.transformer_engine", "_TRANSFORMER_ENGINE_AVAILABLE", "patch",
            ("tools.simulation.stand_ins",)),
)  # fmt: skip
"""Lightning's private names (both namespaces: ``pytorch_lightning``/``lightning_fabric`` are checked too)."""

TORCH: tuple[Private, ...] = (
    Private("torch._subclasses.fake_tensor", "FakeTensorMode", "import",
            ("tools.check.stages", "tools.plan.trace")),
    Private("torch._subclasses.fake_tensor", "unset_fake_temporarily", "import", ("tools.simulation.tracing",)),
    Private("torch.nn.init", "_no_grad_uniform_", "patch", ("tools.simulation.user_model",)),
    Private("torch.nn.init", "_no_grad_normal_", "patch", ("tools.simulation.user_model",)),
    Private("torch.nn.init", "_no_grad_trunc_normal_", "patch", ("tools.simulation.user_model",)),
    Private("torch.nn.init", "_no_grad_fill_", "patch", ("tools.simulation.user_model",)),
    Private("torch.nn.init", "_no_grad_zero_", "patch", ("tools.simulation.user_model",)),
    Private("torch._subclasses.fake_tensor", "DataDependentOutputException", "import",
            ("tools.simulation.untraceable",)),
    Private("torch._subclasses.fake_tensor", "DynamicOutputShapeException", "import",
            ("tools.simulation.untraceable",)),
    Private("torch._subclasses", "fake_impls", "import", ("tools.simulation.tracing",)),
    Private("torch._dynamo.eval_frame", "OptimizedModule", "import", ("tools.simulation.step",)),
    Private("torch.distributed._composable.checkpoint_activation", "checkpoint", "import",
            ("strategies.model_parallel.fsdp2", "tools.plan.trace")),
    Private("torch.distributed._tools.mem_tracker", "MemTracker", "import", ("tools.plan.tracking",)),
    Private("torch.distributed._tools.fsdp2_mem_tracker", "FSDPMemTracker", "import", ("tools.plan.tracking",)),
    Private("torch.distributed._tools.common_utils", "get_untyped_storages", "import", ("tools.plan.tracking",)),
    Private("torch.distributed.algorithms._checkpoint.checkpoint_wrapper", "checkpoint_wrapper", "import",
            ("strategies.deepspeed.hooks",)),
    Private("torch.distributed.tensor._sharding_prop", "", "import", ("tools.simulation.tracing",)),
    Private("torch.testing._internal.distributed.fake_pg", "FakeStore", "import",
            ("tools.simulation.lightning", "tools.simulation.world")),
    Private("torch.utils._python_dispatch", "TorchDispatchMode", "import",
            ("tools.plan.counting", "tools.simulation.untraceable")),
    Private("torch.utils._pytree", "tree_flatten", "import", ("tools.plan.counting", "tools.simulation.step")),
    Private("torch.utils._pytree", "tree_map_only", "import",
            ("tools.plan.trace", "tools.simulation.user_model", "tools.check.rehearsal.fake")),
    Private("torch.nn.modules.batchnorm", "_BatchNorm", "read", ("inspection.models",)),
    Private("torch.distributed.tensor:DTensor", "_local_tensor", "attribute", ("tools.plan.trace",)),
    Private("torch.nn:Module", "_modules", "attribute", ("inspection.blocks",)),
    Private("torch.nn:Module", "_parameters", "attribute", ("inspection.blocks",)),
    Private("torch._C._distributed_c10d:Reducer", "_delay_all_reduce", "call", ("registry.compat",)),
    # the rehearsal's process group of the job's size: torch's own fake backend under a Python group, named
    Private("torch.testing._internal.distributed.fake_pg", "_create_fake_pg", "call",
            ("tools.check.rehearsal.mirror",)),
    Private("torch.distributed:ProcessGroup", "_register_backend", "call", ("tools.check.rehearsal.mirror",)),
    Private("torch.distributed:ProcessGroup", "_set_group_name", "call", ("tools.check.rehearsal.mirror",)),
)  # fmt: skip
"""torch's private names the package uses (listed, and checked like Lightning's)."""

DEEPSPEED: tuple[Private, ...] = (
    Private("deepspeed.runtime.config", "dist", "patch", ("strategies.deepspeed.parser",), optional="deepspeed"),
    Private("deepspeed.runtime.config:DeepSpeedConfig", "world_size", "attribute", ("strategies.deepspeed.parser",),
            optional="deepspeed"),
)  # fmt: skip
"""DeepSpeed's internals the config parser relies on: its module's ``dist`` (rebound for one parse, so the constructor
sees the job's world size without a process group) and the parsed ``world_size``; not underscore names, but not an API
either."""

NAMES: tuple[Private, ...] = (*LIGHTNING, *DEEPSPEED, *TORCH)

# --- the door: every read, write, call and override of a Lightning or DeepSpeed private name ------------------------
# Nothing outside this module names one (the private-names test scans for it): a module that needs one calls the
# accessor here, or its class inherits the mixin whose method is Lightning's private hook.


def child_modules(module: Any) -> list[Any]:
    """``nn.Module._modules``: a module's direct children as torch keeps them, ``None`` slots left out (one dict read,
    no generator and no name prefixes, for a walk of a deep module tree)."""
    return [child for child in module._modules.values() if child is not None]


def own_parameters(module: Any) -> list[Any]:
    """``nn.Module._parameters``: the parameters a module registers itself (not its children's), ``None`` slots left
    out."""
    return [parameter for parameter in module._parameters.values() if parameter is not None]


def launcher_of(strategy: Any) -> Any:
    """``Strategy._launcher``: the launcher the connector configured (``None`` before ``_configure_launcher``)."""
    return getattr(strategy, "_launcher", None)


def start_method_of(strategy: Any) -> Any:
    """``DDPStrategy._start_method`` (``popen``: Lightning's script launcher; a strategy without one says so too)."""
    return getattr(strategy, "_start_method", "popen")


def process_group_backend_of(strategy: Any) -> Any:
    """``DDPStrategy._process_group_backend`` (``None`` before ``setup_environment`` or on a strategy without one)."""
    return getattr(strategy, "_process_group_backend", None)


def timeout_of(strategy: Any) -> Any:
    """``DDPStrategy._timeout``: the process group's ``timedelta`` (``None`` on a strategy without one)."""
    return getattr(strategy, "_timeout", None)


def flushes_static_graph(strategy: Any) -> bool:
    """Whether the strategy carries Lightning 2.6's ``_pl_static_graph_delay_done`` flag (a release probe: 2.5 has
    neither the flag nor the flush it marks)."""
    return hasattr(strategy, "_pl_static_graph_delay_done")


def parallel_sizes_of(strategy: Any) -> tuple[Any, Any]:
    """``ModelParallelStrategy``'s ``(_data_parallel_size, _tensor_parallel_size)`` (``None`` for what it lacks)."""
    return getattr(strategy, "_data_parallel_size", None), getattr(strategy, "_tensor_parallel_size", None)


def set_parallel_sizes(strategy: Any, data: Any, tensor: Any) -> None:
    """Set ``ModelParallelStrategy``'s data- and tensor-parallel sizes before it builds its mesh."""
    strategy._data_parallel_size, strategy._tensor_parallel_size = data, tensor


def forward_redirection_of(strategy: Any) -> Any:
    """The Trainer's ``ModelParallelStrategy._forward_redirection``: calls a step through the root's ``forward``."""
    return strategy._forward_redirection


def forward_redirection() -> Any:
    """A new ``_ForwardRedirection`` of the Trainer (what its strategies route steps through)."""
    from lightning.pytorch.strategies.strategy import _ForwardRedirection

    return _ForwardRedirection()


def parallelize_fn_of(strategy: Any) -> Any:
    """Fabric's ``ModelParallelStrategy._parallelize_fn``: the function ``setup_module`` shards the module with."""
    return strategy._parallelize_fn


def set_parallelize_fn(strategy: Any, function: Any) -> None:
    strategy._parallelize_fn = function


def fabric_fsdp_kwargs(strategy: Any) -> Any:
    """Fabric's ``FSDPStrategy._fsdp_kwargs``: the dict of keyword arguments it passes to FSDP (to fill in place);
    ``None`` where the strategy holds none."""
    return vars(strategy).get("_fsdp_kwargs") if hasattr(strategy, "__dict__") else None


def set_activation_checkpointing_kwargs(strategy: Any, kwargs: dict[str, Any]) -> None:
    """``FSDPStrategy._activation_checkpointing_kwargs`` (both sides): what it checkpoints the wrapped model with."""
    strategy._activation_checkpointing_kwargs = kwargs


def xla_fsdp_policies(strategy: Any) -> tuple[Any, Any]:
    """Fabric's ``XLAFSDPStrategy`` ``(_auto_wrap_policy, _activation_checkpointing_policy)``."""
    return strategy._auto_wrap_policy, strategy._activation_checkpointing_policy


def set_xla_fsdp_policies(strategy: Any, *, auto_wrap: Any, checkpointing: Any) -> None:
    strategy._auto_wrap_policy, strategy._activation_checkpointing_policy = auto_wrap, checkpointing


def trainer_of(module: Any) -> Any:
    """``LightningModule._trainer`` (``None`` while the module is attached to no Trainer, or not a LightningModule)."""
    return getattr(module, "_trainer", None)


def current_fx_name_of(module: Any) -> str:
    """``LightningModule._current_fx_name``: the hook Lightning is running (empty outside one)."""
    return str(getattr(module, "_current_fx_name", "") or "")


def set_device_mesh(module: Any, mesh: Any) -> None:
    """What ``ModelParallelStrategy`` gives a LightningModule as its ``device_mesh`` (``_device_mesh``)."""
    object.__setattr__(module, "_device_mesh", mesh)


def verify_loop_configurations(trainer: Any) -> None:
    """Lightning's ``_verify_loop_configurations``: what ``fit`` checks of the model before it runs anything (raises
    Lightning's own ``MisconfigurationException``)."""
    from lightning.pytorch.trainer.configuration_validator import _verify_loop_configurations

    _verify_loop_configurations(trainer)


def deepspeed_init_optimizers(module: Any) -> None:
    """Lightning's ``DeepSpeedStrategy._init_optimizers`` on ``module`` (a LightningModule attached to a Trainer):
    what DeepSpeed's set-up makes of ``configure_optimizers`` (raises Lightning's ``MisconfigurationException`` for
    more than one optimizer or scheduler). It reads nothing of the strategy but the module."""
    from lightning.pytorch.strategies.deepspeed import DeepSpeedStrategy

    DeepSpeedStrategy._init_optimizers(SimpleNamespace(lightning_module=module))


def load_distributed_checkpoint(folder: Any) -> dict[str, Any]:
    """Lightning's ``_load_distributed_checkpoint``: a ``torch.distributed.checkpoint`` folder read whole into CPU
    memory without a process group, with Lightning's ``meta.pt`` (the Trainer's or Fabric's other state) merged in."""
    from pathlib import Path

    from lightning.fabric.utilities.load import _load_distributed_checkpoint

    loaded: dict[str, Any] = _load_distributed_checkpoint(Path(folder))
    return loaded


def has_launcher_hook(owner: object) -> bool:
    """Whether ``owner`` has Lightning's ``_configure_launcher`` hook (a strategy, of the Trainer or Fabric)."""
    return hasattr(owner, "_configure_launcher")


CONNECTOR_CLASS_NAMES = ("_AcceleratorConnector", "_Connector")
"""The class names of the Trainer's and Fabric's connectors (to recognize one in a traceback's frames)."""
_CONNECTOR_CLASSES = {
    "trainer": (_CONNECTOR, "_AcceleratorConnector"),
    "fabric": (f"{_FABRIC}.connector", "_Connector"),
}


def _fabric_connector() -> Any:
    return importlib.import_module(f"{_FABRIC}.connector")._Connector


def choose_auto_accelerator() -> str:
    """The accelerator Fabric's connector picks for ``accelerator="auto"`` on this machine."""
    return str(_fabric_connector()._choose_auto_accelerator())


def choose_gpu_accelerator_backend() -> str:
    """The accelerator Fabric's connector picks for ``accelerator="gpu"`` (``RuntimeError`` when there is none)."""
    return str(_fabric_connector()._choose_gpu_accelerator_backend())


def unified_precision(value: Any) -> Any:
    """``precision=value`` as Fabric's connector converts it (its warnings and ``ValueError`` are the caller's)."""
    return importlib.import_module(f"{_FABRIC}.connector")._convert_precision_to_unified_args(value)


def connector_class(kind: str) -> Any:
    """The connector class of the ``trainer`` (``_AcceleratorConnector``) or of ``fabric`` (``_Connector``)."""
    module_name, class_name = _CONNECTOR_CLASSES[kind]
    return getattr(importlib.import_module(module_name), class_name)


def choose_cluster_environment(connector: Any) -> Any:
    """The cluster environment ``connector`` (a class) selects from the process's variables, run as on a connector
    that was given no environment (its own detection order; what it raises is the caller's)."""
    return connector._choose_and_init_cluster_environment(SimpleNamespace(_cluster_environment_flag=None))


INTERACTIVE_FLAGS = (f"{_CONNECTOR}._IS_INTERACTIVE", f"{_FABRIC}.connector._IS_INTERACTIVE")
"""What ``mock.patch`` makes true for Lightning to believe it runs in a notebook (its launchers then refuse to re-run a
script)."""
EXTERNAL_CALLBACK_LOADERS = (
    (f"{_PL}.trainer.connectors.callback_connector", "_load_external_callbacks"),
    (f"{_FABRIC}.fabric", "_load_external_callbacks"),
)
"""``(module, function)``: where the Trainer and Fabric scan the installed distributions for callback factories."""


HOOK_CALLERS = _HOOK_CALLERS
"""The functions of the Trainer (``trainer.call``) that call a user's hook: their frame's ``hook_name`` names it."""
TRAINER_RUN = "_run"
"""The name of ``Trainer._run``, whose frame holds the ``ckpt_path`` of ``fit``/``validate``/..."""
EXTERNAL_REGISTRATION = "_register_external_accelerators_and_strategies"
"""What the Trainer connector's module of 2.5.0–2.5.5 calls at the start of each construction (a release probe)."""
XLA_FLAGS = _XLA_FLAGS
"""Lightning's "torch_xla is installed" flags, in each XLA module that has them (the simulation sets them)."""
TRANSFORMER_ENGINE_FLAG = "_TRANSFORMER_ENGINE_AVAILABLE"
"""Fabric's "Transformer Engine is installed" flag (the simulation sets it)."""


def is_result_metric(owner: object) -> bool:
    """Whether ``owner`` is the Trainer's logged-metric holder (``_ResultMetric``), by class name."""
    return type(owner).__name__ == "_ResultMetric"


def precision_input() -> Any:
    """The ``Literal`` annotation of every value ``precision=`` accepts (Fabric's ``_PRECISION_INPUT``)."""
    return importlib.import_module(f"{_FABRIC}.plugins.precision.precision")._PRECISION_INPUT


def format_deepspeed_config(strategy: Any, scratch: Any) -> None:
    """``DeepSpeedStrategy._format_config`` of the strategy's class, run on ``scratch`` (a copy of the strategy)."""
    type(strategy)._format_config(scratch)


def deepspeed_config_init(communicator: Any) -> Callable[..., None] | None:
    """``DeepSpeedConfig.__init__`` with the name ``dist`` of ``deepspeed.runtime.config`` bound to ``communicator``
    for this function only (nothing global changes); ``None`` when the installed constructor does not read the rank
    and world size through ``dist``."""
    from deepspeed.runtime.config import DeepSpeedConfig

    init = DeepSpeedConfig.__init__
    code = getattr(init, "__code__", None)
    if code is None or "dist" not in code.co_names or "dist" not in init.__globals__:
        return None
    scope = {**init.__globals__, "dist": communicator}
    return types.FunctionType(code, scope, init.__name__, init.__defaults__, init.__closure__)


if TYPE_CHECKING:

    class _Hooks(Next):
        _configure_launcher: Any
        _init_optimizers: Any
        _setup_model: Any

else:
    _Hooks = object


class LauncherHook(_Hooks):
    """Lightning's ``_configure_launcher``, which the connector calls once, as the last step of ``Trainer``/``Fabric``
    construction: :meth:`_lp_before_launcher` runs first, then Lightning's. A class that adds to it overrides
    ``_lp_before_launcher`` and calls ``super()._lp_before_launcher()`` (the head first, then the family's mixins)."""

    def _configure_launcher(self) -> None:
        self._lp_before_launcher()
        super()._configure_launcher()

    def _lp_before_launcher(self) -> None:
        """Nothing here: the end of the chain."""


class SetupModelHook(_Hooks):
    """The Trainer's ``FSDPStrategy._setup_model`` (it wraps the model there): :meth:`_lp_before_setup_model` on the
    complete model first."""

    def _setup_model(self, model: Any) -> Any:
        self._lp_before_setup_model(model)
        return super()._setup_model(model)

    def _lp_before_setup_model(self, model: Any) -> None:
        """Nothing here: the end of the chain."""


class InitOptimizersHook(_Hooks):
    """The Trainer's ``DeepSpeedStrategy._init_optimizers`` (it takes the optimizer from ``configure_optimizers``
    there, not in ``setup_optimizers``): :meth:`_lp_after_init_optimizers` sees what it returned."""

    def _init_optimizers(self) -> tuple[Any, Any]:
        optimizer, scheduler = super()._init_optimizers()
        self._lp_after_init_optimizers(optimizer, scheduler)
        return optimizer, scheduler

    def _lp_after_init_optimizers(self, optimizer: Any, scheduler: Any) -> None:
        """Nothing here: the end of the chain."""
