"""The cases of the construction sample (``late_failures_sample``): the ``Trainer(...)``/``Fabric(...)`` keyword
arguments and the simulated hardware, cluster variables and stand-ins each is built under.

A case is valid or deliberately wrong (an unknown name, conflicting flags, a plugin of the wrong type), so that the
lines deciding each of Lightning's construction-time errors execute too. It builds its arguments inside the
simulation (some constructors read the simulated hardware) from the namespace's own classes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

DEEPSPEED_PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")
QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


@dataclass(frozen=True)
class Namespace:
    """One Lightning target's classes, looked up by name (``None`` where this release has no such class)."""

    target: str
    strategies: ModuleType
    plugins: ModuleType
    accelerators: ModuleType
    environments: ModuleType
    factory: Any

    def get(self, name: str) -> Any:
        for module in (self.strategies, self.plugins, self.accelerators, self.environments):
            if hasattr(module, name):
                return getattr(module, name)
        return None


@dataclass(frozen=True)
class Case:
    """One construction: ``arguments(ns)`` gives the keyword arguments of ``Trainer``/``Fabric``."""

    arguments: Callable[[Namespace], dict[str, Any] | None]
    gpus: int = 0
    cluster: str = "none"
    env: dict[str, str] = field(default_factory=dict)
    stand_ins: tuple[str, ...] = ()
    interactive: bool = False
    no_fork: bool = False
    targets: tuple[str, ...] = ("trainer", "fabric")
    build_only: bool = False
    """The arguments' constructors are the case (a strategy or plugin built by the user); nothing more is built."""


def namespace(target: str) -> Namespace:
    if target == "trainer":
        import lightning.pytorch as root

        return Namespace(
            target,
            importlib.import_module("lightning.pytorch.strategies"),
            importlib.import_module("lightning.pytorch.plugins"),
            importlib.import_module("lightning.pytorch.accelerators"),
            importlib.import_module("lightning.fabric.plugins.environments"),
            lambda **kwargs: root.Trainer(**{**QUIET, **kwargs}),
        )
    import lightning.fabric as froot

    return Namespace(
        target,
        importlib.import_module("lightning.fabric.strategies"),
        importlib.import_module("lightning.fabric.plugins"),
        importlib.import_module("lightning.fabric.accelerators"),
        importlib.import_module("lightning.fabric.plugins.environments"),
        froot.Fabric,
    )


def strategy_names(ns: Namespace) -> list[str]:
    registry = ns.strategies.StrategyRegistry if ns.target == "trainer" else ns.strategies.STRATEGY_REGISTRY
    return sorted(dict.keys(registry))


def _parallelize(module: Any, device_mesh: Any) -> Any:
    return module


def _instance(name: str, **kwargs: Any) -> Callable[[Namespace], Any]:
    """A strategy/plugin built by the user; Fabric's ModelParallelStrategy gets the parallelize_fn it requires."""

    def build(ns: Namespace) -> Any:
        cls = ns.get(name)
        if cls is None:
            return None
        if name == "ModelParallelStrategy" and ns.target == "fabric" and "parallelize_fn" not in kwargs:
            return cls(parallelize_fn=_parallelize, **kwargs)
        return cls(**kwargs)

    return build


def _with(**builders: Any) -> Callable[[Namespace], dict[str, Any] | None]:
    """Arguments where a value may be a builder of the namespace's objects (or a list of them)."""

    def arguments(ns: Namespace) -> dict[str, Any] | None:
        built: dict[str, Any] = {}
        for key, value in builders.items():
            if callable(value):
                value = value(ns)
                if value is None:
                    return None  # this release has no such class
            elif isinstance(value, list):
                value = [each(ns) if callable(each) else each for each in value]
                if any(each is None for each in value):
                    return None
            built[key] = value
        return built

    return arguments


def _cpu(ns: Namespace) -> Any:
    return ns.get("CPUAccelerator")()


def _cuda(ns: Namespace) -> Any:
    return ns.get("CUDAAccelerator")()


def _devices(kind: str, count: int) -> Callable[[Namespace], Any]:
    def build(ns: Namespace) -> Any:
        import torch

        return [torch.device(kind, index) for index in range(count)]

    return build


def _junk(ns: Namespace) -> Any:
    return object()


def _layer_sync(ns: Namespace) -> Any:
    base = ns.get("LayerSync")
    if base is None:
        return None

    class OtherSync(base):  # type: ignore[misc, valid-type]
        def apply(self, model: Any) -> Any:
            return model

        def revert(self, model: Any) -> Any:
            return model

    return OtherSync()


def _checkpoint_io(ns: Namespace) -> Any:
    return ns.get("TorchCheckpointIO")()


PRECISIONS = ("transformer-engine", "transformer-engine-float16", "16-true", "16-mixed", "bf16-true", "bf16-mixed",
              "32-true", "64-true", 64, 32, 16, "64", "32", "16", "bf16", "bogus")  # fmt: skip
ACCELERATORS = ("auto", "cpu", "cuda", "gpu", "mps", "tpu", "bogus")
DEVICES: tuple[Any, ...] = (0, "0", [], -1, "-1", "auto", 1, 2, 3, [0, 1], "0,1", "1,", [5])


def cases() -> Iterator[Case]:
    """Every construction of the sample."""
    yield from _accelerators_and_devices()
    yield from _strategy_names_sweep()
    yield from _precisions()
    yield from _plugins()
    yield from _strategy_instances()
    yield from _clusters()
    yield from _environment_specials()
    yield from _user_built()


def _accelerators_and_devices() -> Iterator[Case]:
    for accelerator, gpus in (("cpu", 0), ("cuda", 2), ("auto", 0), ("auto", 2)):
        for devices in DEVICES:
            yield Case(_with(accelerator=accelerator, devices=devices), gpus=gpus)
    for accelerator in ACCELERATORS:
        for gpus in (0, 2):
            yield Case(_with(accelerator=accelerator), gpus=gpus)
    for instance in (_cpu, _cuda):
        yield Case(_with(accelerator=instance, devices=2), gpus=2)
    for num_nodes in (0, -1, 2):
        yield Case(_with(accelerator="cpu", devices=2, num_nodes=num_nodes))
    for accelerator in ("auto", "gpu", "mps", "cpu"):
        for strategy in (*("ddp", "deepspeed", "fsdp_offload_ckpt", "auto"), _instance("DDPStrategy")):
            yield Case(_with(accelerator=accelerator, strategy=strategy), stand_ins=("mps",))
    for accelerator in ("auto", "tpu"):
        for devices in ("auto", 1, 8, [1]):
            yield Case(_with(accelerator=accelerator, devices=devices), stand_ins=("torch_xla",))
    yield Case(_with(accelerator="cpu", strategy=7))
    yield Case(_with(accelerator=7))


REGISTRY_SIZE = 48
"""More than either registry holds (Lightning's names and the presets'): each index is one name, or skipped."""


def _strategy_names_sweep() -> Iterator[Case]:
    for accelerator, gpus, devices, stand_ins in (
        ("cpu", 0, 2, ()), ("cuda", 8, 2, ()), ("tpu", 0, 8, ("torch_xla",)), ("auto", 0, "auto", ()),
    ):  # fmt: skip
        for index in range(REGISTRY_SIZE):
            yield Case(_nth(index, accelerator=accelerator, devices=devices), gpus=gpus, stand_ins=stand_ins)
    for index in range(REGISTRY_SIZE):
        yield Case(_nth(index, accelerator="cpu", devices=2), interactive=True)
    for name in ("ddp_fork", "ddp_notebook", "ddp_spawn", "ddp"):
        yield Case(_with(strategy=name, accelerator="cpu", devices=2), no_fork=True)


def _nth(index: int, **flags: Any) -> Callable[[Namespace], dict[str, Any] | None]:
    """The ``index``-th name of the namespace's strategy registry with ``flags`` (``None`` past its end)."""

    def arguments(ns: Namespace) -> dict[str, Any] | None:
        names = strategy_names(ns)
        return {"strategy": names[index], **flags} if index < len(names) else None

    return arguments


_STRATEGIES_ON_CUDA = ("ddp", "fsdp", "deepspeed", "single_device", "dp", "fsdp_offload_ckpt", "tp2d_hybrid", "fsdp2",
                       "deepspeed_zero2_offload", _instance("ModelParallelStrategy"))  # fmt: skip


def _precisions() -> Iterator[Case]:
    for precision in PRECISIONS:
        yield Case(_with(precision=precision, accelerator="cpu"), stand_ins=("transformer_engine",))
        yield Case(_with(precision=precision, accelerator="cuda"), gpus=2, stand_ins=("transformer_engine",))
        yield Case(_with(precision=precision, accelerator=_cpu))
    for precision in ("16-mixed", "bf16-true", "64-true", "transformer-engine", "bogus", "32-true"):
        for strategy in _STRATEGIES_ON_CUDA:
            yield Case(_with(precision=precision, strategy=strategy, accelerator="cuda", devices=2), gpus=2,
                       stand_ins=("transformer_engine",))  # fmt: skip
        for strategy in ("fsdp_offload_ckpt", "ddp"):
            yield Case(_with(precision=precision, strategy=strategy, accelerator="cpu", devices=2))
        yield Case(_with(precision=precision, strategy="xla", accelerator="tpu"), stand_ins=("torch_xla",))
        yield Case(_with(precision=precision, accelerator="mps"), stand_ins=("mps",))


def _precision_plugins() -> Iterator[Callable[[Namespace], Any]]:
    import torch

    yield _instance("MixedPrecision", precision="16-mixed", device="cuda")
    yield _instance("MixedPrecision", precision="bf16-mixed", device="cpu")
    yield _instance("HalfPrecision", precision="bf16-true")
    yield _instance("DoublePrecision")
    yield _instance("Precision")
    yield _instance("FSDPPrecision", precision="bf16-mixed")
    yield _instance("DeepSpeedPrecision", precision="bf16-mixed")
    yield _instance("XLAPrecision", precision="bf16-true")
    yield _instance("TransformerEnginePrecision", weights_dtype=torch.bfloat16)
    yield _instance("BitsandbytesPrecision", mode="nf4")


_PLUGIN_LISTS: tuple[Any, ...] = (
    [_junk], [_checkpoint_io, _checkpoint_io], [_instance("LightningEnvironment"), _instance("SLURMEnvironment")],
    [_instance("MixedPrecision", precision="16-mixed", device="cuda"), _instance("DoublePrecision")],
    [_layer_sync], [_instance("TorchSyncBatchNorm")], [_checkpoint_io], "bogus",
)  # fmt: skip


def _plugins() -> Iterator[Case]:
    both = ("torch_xla", "transformer_engine")
    for plugin in _precision_plugins():
        for strategy, accelerator, gpus in (
            ("auto", "cpu", 0), ("fsdp", "cuda", 2), ("deepspeed", "cuda", 2), ("xla", "tpu", 0), ("auto", "tpu", 0),
            ("tp2d_hybrid", "cuda", 2), ("fsdp_offload_ckpt", "cuda", 2), ("ddp", "cuda", 2),
            (_instance("ModelParallelStrategy"), "cuda", 2),
        ):  # fmt: skip
            yield Case(_with(plugins=[plugin], strategy=strategy, accelerator=accelerator, devices=2), gpus=gpus,
                       stand_ins=both)  # fmt: skip
        yield Case(_with(plugins=plugin, precision="bf16-mixed"), stand_ins=both)
    for plugins in _PLUGIN_LISTS:
        for strategy in ("ddp", "fsdp", "xla"):
            yield Case(_with(plugins=plugins, strategy=strategy, devices=2), gpus=2)
        yield Case(_with(plugins=plugins, sync_batchnorm=True), targets=("trainer",))
    yield Case(_with(sync_batchnorm=True, plugins=[_layer_sync]), targets=("trainer",))
    for deterministic, benchmark in ((True, True), ("warn", True), (False, None), (None, None)):
        yield Case(_with(deterministic=deterministic, benchmark=benchmark), targets=("trainer",))


_CONFLICTS: tuple[tuple[dict[str, Any], dict[str, Any]], ...] = (
    ({"accelerator": _cpu}, {"accelerator": "cpu"}),
    ({"accelerator": _cpu}, {}),
    ({"precision_plugin": _instance("DoublePrecision")}, {"precision": "64-true"}),
    ({"precision_plugin": _instance("DoublePrecision")}, {"plugins": [_instance("DoublePrecision")]}),
    ({"precision": _instance("DoublePrecision")}, {"plugins": [_instance("DoublePrecision")]}),
    ({"precision_plugin": _instance("DoublePrecision")}, {}),
    ({"precision": _instance("DoublePrecision")}, {}),
    ({"checkpoint_io": _checkpoint_io}, {"plugins": [_checkpoint_io]}),
    ({"checkpoint_io": _checkpoint_io}, {}),
    ({"cluster_environment": _instance("LightningEnvironment")}, {"plugins": [_instance("LightningEnvironment")]}),
    ({"cluster_environment": _instance("LightningEnvironment")}, {}),
    ({"parallel_devices": _devices("cpu", 2)}, {"accelerator": "cuda"}),
    ({"parallel_devices": _devices("cpu", 2)}, {"accelerator": "gpu"}),
    ({"parallel_devices": _devices("cpu", 2)}, {}),
    ({"parallel_devices": _devices("cuda", 2)}, {"accelerator": "cpu"}),
    ({"parallel_devices": _devices("cuda", 2)}, {}),
    ({"start_method": "bogus"}, {}),
    ({"start_method": "spawn"}, {}),
    ({}, {"devices": 2}),
    ({}, {"devices": 2, "accelerator": "cpu"}),
)


def _strategy_instances() -> Iterator[Case]:
    for name in ("DDPStrategy", "FSDPStrategy", "DeepSpeedStrategy", "DataParallelStrategy", "ModelParallelStrategy"):
        for own, flags in _CONFLICTS:
            yield Case(_with(strategy=_instance_with(name, own), **flags), gpus=2)
        yield Case(_with(strategy=_instance(name), devices=2), gpus=2, interactive=True)
    for name in ("SingleDeviceStrategy", "SingleDeviceXLAStrategy"):
        for device in ("cpu", "cuda:0"):
            for accelerator in ("cpu", "cuda", "tpu"):
                yield Case(_with(strategy=_instance(name, device=device), accelerator=accelerator), gpus=2,
                           stand_ins=("torch_xla",))  # fmt: skip
    for name, kwargs in (("XLAStrategy", {}), ("XLAFSDPStrategy", {}), ("SingleDeviceXLAStrategy", {"device": 0})):
        for accelerator in ("cpu", "tpu", "auto"):
            yield Case(_with(strategy=_instance(name, **kwargs), accelerator=accelerator), gpus=2,
                       stand_ins=("torch_xla",))  # fmt: skip
        for plugin in (_checkpoint_io, _instance("DoublePrecision")):
            yield Case(_with(strategy=_instance(name, **kwargs), accelerator="tpu", plugins=[plugin]),
                       stand_ins=("torch_xla",))  # fmt: skip
    for strategy in ("xla", "xla_fsdp", "single_xla", "xla_fsdp_ckpt"):
        yield Case(_with(strategy=strategy, accelerator="tpu", plugins=[_checkpoint_io]), stand_ins=("torch_xla",))
        yield Case(_with(strategy=strategy, accelerator="tpu", plugins=[_instance("DoublePrecision")]),
                   stand_ins=("torch_xla",))  # fmt: skip
    for strategy in ("fsdp", "fsdp_offload_ckpt", "tp2d_hybrid", "fsdp2"):
        yield Case(_with(strategy=strategy, accelerator="cuda", devices=2, plugins=[_checkpoint_io]), gpus=2)


def _instance_with(name: str, own: dict[str, Any]) -> Callable[[Namespace], Any]:
    def build(ns: Namespace) -> Any:
        arguments = _with(**own)(ns)
        if arguments is None:
            return None
        if ns.target == "fabric" and "precision_plugin" in arguments:
            return None  # Fabric's strategies take `precision`
        if ns.target == "trainer" and "precision" in arguments:
            return None
        return _instance(name, **arguments)(ns)

    return build


_KUBEFLOW = {"KUBERNETES_PORT": "tcp://10.0.0.1:443", "MASTER_ADDR": "m", "MASTER_PORT": "1", "WORLD_SIZE": "2",
             "RANK": "0"}  # fmt: skip
_ENVIRONMENTS: tuple[dict[str, str], ...] = (
    _KUBEFLOW, {"SLURM_NTASKS": "2", "SLURM_JOB_NAME": "bash"}, {"SLURM_JOB_NAME": "interactive"},
    {"SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "2", "SLURM_NNODES": "2"}, {"SLURM_NTASKS": "2"},
    {"LSB_DJOB_RANKFILE": ""}, {"LSB_JOBID": "", "LSB_DJOB_RANKFILE": "/nonexistent"},
    {"TORCHELASTIC_RUN_ID": "x"}, {"WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"},
    {"LT_ACCELERATOR": "cpu"}, {"LT_STRATEGY": "ddp"}, {"LT_DEVICES": "2"}, {"LT_NUM_NODES": "2"},
    {"LT_PRECISION": "bf16-mixed"}, {"LT_CLI_USED": "1", "LT_ACCELERATOR": "cuda"},
    {"LT_CLI_USED": "1", "LT_STRATEGY": "fsdp", "LT_DEVICES": "3", "LT_PRECISION": "16-true"},
)  # fmt: skip


def _clusters() -> Iterator[Case]:
    for cluster in ("slurm", "torchelastic", "lsf"):
        for strategy in ("ddp", "fsdp_offload_ckpt", "ddp_spawn"):
            for devices, nodes in ((2, 2), (1, 4)):
                yield Case(_with(strategy=strategy, accelerator="cuda", devices=devices, num_nodes=nodes), gpus=2,
                           cluster=cluster)  # fmt: skip
            yield Case(_with(strategy=strategy, accelerator="cuda", devices=2, num_nodes=2), gpus=2, cluster=cluster,
                       interactive=True)  # fmt: skip
    for env in _ENVIRONMENTS:
        cluster = "slurm" if any(k.startswith("SLURM") for k in env) else "none"
        cluster = "lsf" if any(k.startswith("LSB") for k in env) else cluster
        for arguments in (
            {"strategy": "ddp", "accelerator": "cpu", "devices": 2},
            {"strategy": "fsdp", "accelerator": "cuda", "devices": 2, "num_nodes": 2, "precision": "bf16-true"},
        ):
            yield Case(_with(**arguments), gpus=2, cluster=cluster, env=env)


_ENVIRONMENT_CLASSES = ("LightningEnvironment", "SLURMEnvironment", "TorchElasticEnvironment", "LSFEnvironment",
                        "KubeflowEnvironment", "MPIEnvironment", "XLAEnvironment")  # fmt: skip


def _environment_specials() -> Iterator[Case]:
    """Cluster environments handed in by the user: constructors and what construction asks of them."""
    for name in _ENVIRONMENT_CLASSES:
        for cluster in ("none", "slurm", "torchelastic", "lsf"):
            yield Case(_with(plugins=[_instance(name)], strategy="ddp", accelerator="cpu", devices=2, num_nodes=2),
                       cluster=cluster, stand_ins=("torch_xla",))  # fmt: skip


def _user_strategies() -> dict[str, tuple[dict[str, Any], ...]]:
    """Arguments users give the strategies they build, valid and not, by class name."""
    import torch

    layer = torch.nn.Linear
    return {
        "FSDPStrategy": (
            {}, {"activation_checkpointing": layer, "activation_checkpointing_policy": {layer}},
            {"activation_checkpointing": [layer]}, {"activation_checkpointing_policy": {layer}},
            {"sharding_strategy": "HYBRID_SHARD"}, {"sharding_strategy": "BOGUS"}, {"sharding_strategy": "FULL_SHARD"},
            {"process_group": object(), "device_mesh": (1, 2)}, {"device_mesh": (1, 2)}, {"state_dict_type": "bogus"},
            {"state_dict_type": "sharded"}, {"cpu_offload": True}, {"mixed_precision": object()},
            {"auto_wrap_policy": {layer}}, {"precision": "bf16-mixed"}, {"sharding_strategy": "_HYBRID_SHARD_ZERO2"},
            {"sharding_strategy": "HYBRID_SHARD", "auto_wrap_policy": {layer}},
            {"sharding_strategy": "HYBRID_SHARD", "device_mesh": (1, 2)}, {"use_orig_params": False},
        ),
        "DeepSpeedStrategy": (
            {}, {"config": "/nonexistent/ds.json"}, {"config": {}}, {"config": {"zero_optimization": {"stage": 3}}},
            {"stage": 5}, {"offload_optimizer": True, "offload_optimizer_device": "bogus"}, {"logging_level": 10},
            {"config": {"gradient_accumulation_steps": 2}}, {"stage": 3, "offload_parameters": True},
            {"partition_activations": True, "contiguous_memory_optimization": True}, {"zero_optimization": False},
            {"config": "AAA"}, {"precision_plugin": object()}, {"process_group_backend": "gloo"},
        ),
        "ModelParallelStrategy": ({}, {"data_parallel_size": 2, "tensor_parallel_size": 1},
                                  {"data_parallel_size": "bogus"}),
        "DDPStrategy": ({}, {"start_method": "bogus"}, {"ddp_comm_hook": object()}, {"model_averaging_period": 4},
                        {"find_unused_parameters": True}, {"static_graph": True}),
        "XLAStrategy": ({}, {"sync_module_states": False}, {"debug": True}),
        "XLAFSDPStrategy": (
            {}, {"activation_checkpointing_policy": {layer}}, {"activation_checkpointing_policy": [layer]},
            {"auto_wrapper_callable": object(), "activation_checkpointing_policy": {layer}},
            {"state_dict_type": "bogus"}, {"state_dict_type": "sharded"}, {"auto_wrap_policy": {layer}},
        ),
        "SingleDeviceStrategy": ({"device": "cpu"}, {"device": 0}, {"device": "cuda:0"}),
        "SingleDeviceXLAStrategy": ({"device": "cpu"}, {"device": 0}, {"device": "cuda:0"}),
        "DataParallelStrategy": ({}, {"parallel_devices": [torch.device("cuda", 0)]}),
    }  # fmt: skip


def _user_built() -> Iterator[Case]:
    """Strategies and plugins the user builds (their constructors run before Trainer/Fabric does)."""
    import torch

    for name, variants in _user_strategies().items():
        for kwargs in variants:
            yield Case(_with(strategy=_instance(name, **kwargs)), build_only=True, gpus=2,
                       stand_ins=("torch_xla", "transformer_engine"))  # fmt: skip

    def plugin(
        name: str, *args: Any, stand_ins: tuple[str, ...] = ("torch_xla", "transformer_engine"), **kwargs: Any
    ) -> Case:
        def arguments(ns: Namespace) -> dict[str, Any] | None:
            cls = ns.get(name)
            return None if cls is None else {"plugins": [cls(*args, **kwargs)]}

        return Case(arguments, build_only=True, gpus=2, stand_ins=stand_ins)

    scaler = torch.amp.GradScaler(device="cpu", enabled=False)
    for precision in (*DEEPSPEED_PRECISIONS, "64-true", "transformer-engine", "bogus"):
        yield plugin("MixedPrecision", precision, "cuda")
        yield plugin("MixedPrecision", precision, "cuda", scaler)
        yield plugin("FSDPPrecision", precision)
        yield plugin("FSDPPrecision", precision, scaler)
        yield plugin("DeepSpeedPrecision", precision)
        yield plugin("XLAPrecision", precision)
        yield plugin("HalfPrecision", precision)
    for mode in ("nf4", "nf4-dq", "fp4", "fp4-dq", "int8", "int8-training", "bogus"):
        for dtype in (None, torch.bfloat16, torch.float16):
            yield plugin("BitsandbytesPrecision", mode, dtype)
            yield plugin("BitsandbytesPrecision", mode, dtype, stand_ins=("bitsandbytes",))
    engine: tuple[dict[str, Any], ...] = (
        {"weights_dtype": torch.bfloat16}, {"weights_dtype": torch.float16, "recipe": {"fp8_format": "HYBRID"}},
        {"weights_dtype": torch.float32, "replace_layers": False},
        {"weights_dtype": torch.bfloat16, "recipe": object()},
        {"weights_dtype": torch.bfloat16, "fallback_compute_dtype": torch.float32},
    )  # fmt: skip
    for kwargs in engine:
        yield plugin("TransformerEnginePrecision", **kwargs)
    for name in _ENVIRONMENT_CLASSES:
        yield plugin(name)
