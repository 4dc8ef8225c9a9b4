"""Every private name of Lightning, DeepSpeed and torch the package reads, writes, calls or overrides, in one list.

A Lightning or torch release may rename any of these without notice. Each is declared here once, with what the package
does with it and where; :func:`missing` resolves every declaration against the installed releases, and
``tests/test_private_names.py`` fails, naming the entry, on a release that lacks one (CI runs it on both Lightning
legs and both ends of the torch range). A test also scans the package and fails on a private name used in a module
that this list does not name for it.

An instance attribute (``use="attribute"``) is checked in the source of the class's ``__init__`` (Lightning sets it
there: ``self._launcher = None``); a class attribute, function or module is resolved by import and ``getattr``.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

Use = Literal["call", "read", "override", "patch", "attribute", "import"]


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

LIGHTNING: tuple[Private, ...] = (
    Private(_STRATEGY, "_configure_launcher", "override",
            ("guards.strategy", "strategies.fsdp2", "strategies.fsdp_family", "tools.check.construct")),
    Private(f"{_FABRIC}.strategies.strategy:Strategy", "_configure_launcher", "override", ("guards.strategy",)),
    Private(_STRATEGY, "_launcher", "attribute", ("tools.check.engine", "tools.check.resolved")),
    Private(f"{_PL}.strategies.ddp:DDPStrategy", "_start_method", "attribute", ("guards.strategy",)),
    Private(f"{_PL}.strategies.ddp:DDPStrategy", "_process_group_backend", "attribute", ("guards.runtime.handshake",)),
    Private(f"{_PL}.strategies.ddp:DDPStrategy", "_timeout", "attribute", ("guards.runtime.hangs",)),
    Private(f"{_PL}.strategies.fsdp:FSDPStrategy", "_setup_model", "override", ("strategies.fsdp",)),
    Private(f"{_FABRIC}.strategies.fsdp:FSDPStrategy", "_fsdp_kwargs", "attribute", ("tools.check.resolved",)),
    Private(f"{_PL}.strategies.model_parallel:ModelParallelStrategy", "_data_parallel_size", "attribute",
            ("strategies.fsdp2", "tools.check.resolved", "tools.simulation.lightning")),
    Private(f"{_PL}.strategies.model_parallel:ModelParallelStrategy", "_tensor_parallel_size", "attribute",
            ("strategies.fsdp2", "tools.check.resolved", "tools.simulation.lightning")),
    Private(f"{_PL}.strategies.model_parallel:ModelParallelStrategy", "_forward_redirection", "attribute",
            ("strategies.fsdp2",)),
    Private(f"{_PL}.strategies.strategy", "_ForwardRedirection", "import", ("tools.plan.step",)),
    Private(f"{_PL}.strategies.deepspeed:DeepSpeedStrategy", "_init_optimizers", "override",
            ("strategies.deepspeed.hooks",)),
    Private(f"{_PL}.strategies.deepspeed:DeepSpeedStrategy", "_format_config", "call",
            ("strategies.deepspeed.parser",)),
    Private(f"{_PL}.core.module:LightningModule", "_trainer", "attribute", ("guards.strategy",)),
    Private(f"{_PL}.core.module:LightningModule", "_device_mesh", "attribute", ("tools.simulation.lightning",)),
    Private(f"{_PL}.core.module:LightningModule", "_current_fx_name", "attribute", ("guards.runtime.hangs",)),
    Private(f"{_FABRIC}.connector", "_Connector", "import", ("guards.arguments", "tools.check.construct")),
    Private(f"{_FABRIC}.connector:_Connector", "_choose_auto_accelerator", "call", ("guards.arguments",)),
    Private(f"{_FABRIC}.connector:_Connector", "_choose_gpu_accelerator_backend", "call", ("guards.arguments",)),
    Private(f"{_FABRIC}.connector", "_convert_precision_to_unified_args", "call", ("guards.arguments",)),
    Private(f"{_FABRIC}.connector", "_IS_INTERACTIVE", "patch", ("tools.simulation.lightning",)),
    Private(_CONNECTOR, "_AcceleratorConnector", "import", ("tools.check.construct",)),
    Private(f"{_CONNECTOR}:_AcceleratorConnector", "_choose_and_init_cluster_environment", "call",
            ("tools.check.engine",)),
    Private(_CONNECTOR, "_IS_INTERACTIVE", "patch", ("tools.simulation.lightning",)),
    Private(f"{_PL}.trainer.connectors.callback_connector", "_load_external_callbacks", "patch",
            ("tools.simulation.lightning",)),
    Private(f"{_FABRIC}.fabric", "_load_external_callbacks", "patch", ("tools.simulation.lightning",)),
    Private(f"{_FABRIC}.plugins.precision.precision", "_PRECISION_INPUT", "read", ("tools.check.names",)),
)  # fmt: skip
"""Lightning's private names (both namespaces: ``pytorch_lightning``/``lightning_fabric`` are checked too)."""

TORCH: tuple[Private, ...] = (
    Private("torch._subclasses.fake_tensor", "FakeTensorMode", "import",
            ("tools.check.stages", "tools.plan.trace")),
    Private("torch._subclasses.fake_tensor", "unset_fake_temporarily", "import", ("tools.simulation.tracing",)),
    Private("torch._subclasses.fake_tensor", "DataDependentOutputException", "import", ("tools.plan.untraceable",)),
    Private("torch._subclasses.fake_tensor", "DynamicOutputShapeException", "import", ("tools.plan.untraceable",)),
    Private("torch._subclasses", "fake_impls", "import", ("tools.simulation.tracing",)),
    Private("torch._dynamo.eval_frame", "OptimizedModule", "import", ("tools.plan.step",)),
    Private("torch.distributed._composable.checkpoint_activation", "checkpoint", "import",
            ("strategies.fsdp2", "tools.plan.trace")),
    Private("torch.distributed._tools.mem_tracker", "MemTracker", "import", ("tools.plan.tracking",)),
    Private("torch.distributed._tools.fsdp2_mem_tracker", "FSDPMemTracker", "import", ("tools.plan.tracking",)),
    Private("torch.distributed._tools.common_utils", "get_untyped_storages", "import", ("tools.plan.tracking",)),
    Private("torch.distributed.algorithms._checkpoint.checkpoint_wrapper", "checkpoint_wrapper", "import",
            ("strategies.deepspeed.hooks",)),
    Private("torch.distributed.tensor._sharding_prop", "", "import", ("tools.simulation.tracing",)),
    Private("torch.testing._internal.distributed.fake_pg", "FakeStore", "import",
            ("tools.plan.trace", "tools.simulation.lightning")),
    Private("torch.utils._python_dispatch", "TorchDispatchMode", "import",
            ("tools.plan.counting", "tools.plan.untraceable")),
    Private("torch.utils._pytree", "tree_flatten", "import", ("tools.plan.counting", "tools.plan.step")),
    Private("torch.utils._pytree", "tree_map_only", "import", ("tools.plan.trace", "tools.plan.user_model")),
    Private("torch.nn.modules.batchnorm", "_BatchNorm", "read", ("guards.models",)),
    Private("torch.distributed.tensor:DTensor", "_local_tensor", "attribute", ("tools.plan.trace",)),
    Private("torch.nn:Module", "_modules", "attribute", ("guards.blocks",)),
    Private("torch.nn:Module", "_parameters", "attribute", ("guards.blocks",)),
    Private("torch._C._distributed_c10d:Reducer", "_delay_all_reduce", "call", ("registry.compat",)),
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

_TWINS = {"lightning.pytorch": "pytorch_lightning", "lightning.fabric": "lightning_fabric"}


def _twin(owner: str) -> str | None:
    for prefix, twin in _TWINS.items():
        if owner == prefix or owner.startswith(prefix + "."):
            return twin + owner[len(prefix) :]
    return None


def _sets_in_init(cls: type, name: str) -> bool:
    """Whether ``__init__`` of ``cls`` or of one of its bases assigns ``self.<name>`` (Lightning's instance state)."""
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if init is None:
            continue
        try:
            source = inspect.getsource(init)
        except (OSError, TypeError):  # a C type or a class without source: its attributes are not Lightning's
            continue
        if f"self.{name} =" in source or f"self.{name}:" in source or f'"{name}"' in source:
            return True
    return False


def resolve(entry: Private, owner: str | None = None) -> str | None:
    """``None`` when ``entry`` exists in the installed release (under ``owner``, default its own); else what is
    missing, in words."""
    owner = owner or entry.owner
    module_name, _, class_name = owner.partition(":")
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as error:
        return f"{module_name} cannot be imported ({error})"
    if class_name:
        target = getattr(target, class_name, None)
        if not isinstance(target, type):
            return f"{module_name} has no class {class_name}"
    if not entry.name:
        return None
    if entry.use == "attribute":
        if isinstance(target, type) and (hasattr(target, entry.name) or _sets_in_init(target, entry.name)):
            return None
        return f"{owner} no longer sets {entry.name} in __init__"
    if not hasattr(target, entry.name):
        return f"{owner} has no {entry.name}"
    return None


def _installed(distribution: str) -> bool:
    try:
        importlib.import_module(distribution)
    except ImportError:
        return False
    return True


def missing(entries: Iterable[Private] = NAMES) -> list[str]:
    """What the installed releases lack of ``entries``: one line per entry and namespace (empty: all present)."""
    problems = []
    for entry in entries:
        if entry.optional and not _installed(entry.optional):
            continue
        owners = [entry.owner]
        twin = _twin(entry.owner)
        if twin is not None and _installed(twin.partition(".")[0].partition(":")[0]):
            owners.append(twin)
        for owner in owners:
            problem = resolve(entry, owner)
            if problem is not None:
                problems.append(f"{entry.label} ({entry.use}, used by {', '.join(entry.where)}): {problem}")
    return problems
