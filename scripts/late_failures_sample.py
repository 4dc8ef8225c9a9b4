"""A broad sample of ``Trainer(...)``/``Fabric(...)`` constructions on simulated hardware, traced line by line.

``python scripts/late_failures_sample.py FILE...`` constructs every case below in this fresh interpreter, with
``sys.settrace`` recording which lines of the given source files execute, from Lightning's import to the end of the
last construction. Whatever executes here can run while a user builds a Trainer or Fabric (or the strategy and plugins
handed to it); what never executes happens later. Nothing trains: no process starts, no process group or CUDA context
is created. Then, untraced, it builds the config each DeepSpeed strategy passes and runs DeepSpeed's config parser on
those and on user configs, tracing DeepSpeed's own files only. It prints JSON: ``lines`` (``{file: [line, ...]}``),
``cases``, ``outcomes`` (how many constructions ended how), ``deepspeed_configs`` and ``deepspeed_models`` (the
pydantic config classes the parser built).

A case is valid or deliberately wrong (an unknown name, conflicting flags, a plugin of the wrong type), so that the
lines deciding each of Lightning's construction-time errors execute too. It builds its arguments inside the
simulation (some constructors read the simulated hardware) from the namespace's own classes.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import FrameType, ModuleType
from typing import Any
from unittest import mock

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


def _namespace(target: str) -> Namespace:
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


def _strategy_names(ns: Namespace) -> list[str]:
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
        names = _strategy_names(ns)
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


# --- DeepSpeed's config parser ------------------------------------------------------------------------------------

DEEPSPEED_PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true")


def lightning_deepspeed_configs(namespaces: dict[str, Namespace]) -> Iterator[dict[str, Any]]:
    """The config each DeepSpeed strategy of each registry passes to ``deepspeed.initialize``, for each precision.

    Lightning completes it at setup: the precision section (its own ``_format_config``), the batch size it logs with
    and, for the Trainer, ``gradient_accumulation_steps`` and ``gradient_clipping`` from the Trainer's flags.
    """
    import copy

    from lightning_presets.tools.simulation import simulated_cuda

    with simulated_cuda(2), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ns in namespaces.values():
            deepspeed_class = ns.get("DeepSpeedStrategy")
            for name in _strategy_names(ns):
                for precision in DEEPSPEED_PRECISIONS:
                    try:
                        built = ns.factory(strategy=name, accelerator="cuda", devices=2, precision=precision)
                    except Exception:
                        continue
                    strategy = built.strategy
                    if not isinstance(strategy, deepspeed_class):
                        break
                    strategy._format_config()
                    config = copy.deepcopy(strategy.config)
                    if ns.target == "trainer":
                        config.setdefault("gradient_accumulation_steps", 1)
                        config.setdefault("gradient_clipping", 0.0)
                    yield config


USER_CONFIGS: tuple[dict[str, Any], ...] = (
    {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4},
    {"train_batch_size": 16}, {"train_micro_batch_size_per_gpu": 2}, {"train_batch_size": 15,
     "train_micro_batch_size_per_gpu": 4}, {"train_batch_size": 0}, {"gradient_accumulation_steps": 2},
    {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"},
    {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
              "hysteresis": 2, "min_loss_scale": 1}},
    {"fp16": {"enabled": True, "loss_scale": True}}, {"fp16": {"enabled": True, "loss_scale": -1}},
    {"fp16": {"enabled": True, "loss_scale": float("inf")}}, {"fp16": {"enabled": True, "loss_scale": "x"}},
    {"fp16": {"enabled": True, "loss_scale_window": True, "min_loss_scale": 0.5}},
    {"fp16": {"enabled": True, "loss_scale_window": float("nan")}}, {"fp16": {"enabled": True, "min_loss_scale": 0}},
    {"fp16": {"enabled": True, "loss_scale_window": 0}}, {"fp16": {"enabled": "auto"}},
    {"fp16": {"enabled": True}, "bf16": {"enabled": True}}, {"bf16": {"enabled": True}},
    {"bfloat16": {"enabled": True}},
    {"amp": {"enabled": True}}, {"fp16": {"enabled": True, "auto_cast": True}},
    {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}},
    {"bf16": {"enabled": True, "bf16_optimizer_states": True}},
    {"torch_autocast": {"enabled": True, "dtype": "bfloat16"}},
    {"zero_optimization": True}, {"zero_optimization": False}, {"zero_optimization": 2},
    {"zero_optimization": {"stage": 0}}, {"zero_optimization": {"stage": 1}}, {"zero_optimization": {"stage": 2}},
    {"zero_optimization": {"stage": 3}}, {"zero_optimization": {"stage": 4}}, {"zero_optimization": {"stage": "auto"}},
    {"zero_optimization": {"stage": 2, "cpu_offload": True}},
    {"zero_optimization": {"stage": 3, "cpu_offload_param": True}},
    {"zero_optimization": {"stage": 3, "cpu_offload_use_pin_memory": True, "cpu_offload": True}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}},
    {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"},
                           "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "ratio": 0.5}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}},
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "bogus"}}},
    {"zero_optimization": {"stage": 2, "bogus_key": 1}}, {"zero_optimization": {"stage": 2, "overlap_comm": "auto"}},
    {"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True}},
    {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True,
                           "stage3_max_live_parameters": "auto", "stage3_prefetch_bucket_size": "auto",
                           "stage3_param_persistence_threshold": "auto", "reduce_bucket_size": "auto"}},
    {"zero_optimization": {"stage": 1, "compute_grad_norm": False}},
    {"zero_optimization": {"stage": 3, "compute_grad_norm": False}},
    {"zero_optimization": {"stage": 3, "elastic_checkpoint": True}},
    {"zero_optimization": {"stage": 2, "zenflow": {"topk_ratio": 0.1}}},
    {"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": True,
                           "mics_shard_size": 2, "leaf_module": {"classes": ["Linear"]}}},
    {"zero_optimization": {"stage": 2, "reduce_scatter": False, "contiguous_gradients": False,
                           "round_robin_gradients": True, "allgather_partitions": False}},
    {"zero_optimization": {"stage": 3}, "gradient_allreduce_op": "sum"},
    {"zero_optimization": {"stage": 1}, "gradient_allreduce_op": "bogus"},
    {"zero_optimization": {"stage": 1}, "gradient_allreduce_op": "mean"},
    {"zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False},
    {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "scheduler": {"type": "WarmupLR", "params": {}}},
    {"optimizer": {"type": "Adam", "params": {"lr": "auto"}}},
    {"optimizer": {"type": "OneBitAdam"}}, {"optimizer": {"type": "Lamb"}},
    {"gradient_clipping": 1.0}, {"gradient_clipping": "auto"}, {"gradient_clipping": -1},
    {"activation_checkpointing": {"partition_activations": True, "cpu_checkpointing": True,
                                  "contiguous_memory_optimization": True, "number_checkpoints": 2,
                                  "synchronize_checkpoint_boundary": True, "profile": True}},
    {"activation_checkpointing": {"contiguous_memory_optimization": True}},
    {"activation_checkpointing": {"bogus": 1}},
    {"communication_data_type": "fp16"}, {"communication_data_type": "bogus"},
    {"seq_parallel_communication_data_type": "bf16"}, {"prescale_gradients": True, "gradient_predivide_factor": 2.0},
    {"sparse_gradients": True}, {"disable_allgather": True}, {"steps_per_print": 0}, {"wall_clock_breakdown": True},
    {"dump_state": True}, {"memory_breakdown": True}, {"eigenvalue": {"enabled": True}},
    {"tensorboard": {"enabled": True, "output_path": "/tmp"}}, {"wandb": {"enabled": True}},
    {"csv_monitor": {"enabled": True}}, {"comet": {"enabled": True}}, {"comms_logger": {"enabled": True}},
    {"flops_profiler": {"enabled": True}}, {"aio": {"block_size": 1048576, "queue_depth": 8}},
    {"elasticity": {"enabled": True, "max_train_batch_size": 16, "micro_batch_sizes": [2]}},
    {"checkpoint": {"tag_validation": "bogus"}}, {"checkpoint": {"tag_validation": "Warn", "load_universal": True}},
    {"checkpoint": {"parallel_write": {"pipeline_stage": True}}},
    {"data_types": {"grad_accum_dtype": "bf16"}}, {"data_types": {"keep_in_fp32_modules": 3}},
    {"pipeline": {"stages": "auto"}}, {"pld": {"enabled": True}}, {"curriculum_learning": {"enabled": True}},
    {"data_efficiency": {"enabled": True}}, {"compile": {"deepcompile": True}}, {"tensor_parallel": {"autotp_size": 2}},
    {"sequence_parallel_size": 2}, {"zenflow": {}}, {"weight_quantization": {}}, {"compression_training": {}},
    {"nebula": {"enabled": True}}, {"autotuning": {"enabled": True}}, {"hybrid_engine": {"enabled": True}},
    {"quantize_training": {"enabled": True}}, {"graph_harvesting": True}, {"use_data_before_expert_parallelism": True},
    {"zero_optimisation": {"stage": 3}}, {"bogus_top_level": 1},
)  # fmt: skip
"""Configs a user passes in ``DeepSpeedStrategy(config=...)``: every section the parser reads, valid and not."""


def deepspeed_configs(namespaces: dict[str, Namespace]) -> Iterator[dict[str, Any]]:
    yield from lightning_deepspeed_configs(namespaces)
    for config in USER_CONFIGS:
        yield {"train_micro_batch_size_per_gpu": 1, **config}


def _models(value: Any, seen: set[int]) -> Iterator[type]:
    """The pydantic model classes (with their bases) reachable from a parsed config's attributes."""
    import pydantic

    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, pydantic.BaseModel):
        yield from type(value).__mro__
        for name in type(value).model_fields:
            yield from _models(getattr(value, name, None), seen)
    elif isinstance(value, dict | list | tuple):
        for each in value.values() if isinstance(value, dict) else value:
            yield from _models(each, seen)
    elif hasattr(value, "__dict__") and type(value).__module__.startswith("deepspeed"):
        for each in vars(value).values():
            yield from _models(each, seen)


# --- running the sample -------------------------------------------------------------------------------------------


def _returning(value: object) -> Callable[..., object]:
    def probe(*args: object, **kwargs: object) -> object:
        return value

    return probe


_XLA_MODULES = (
    "lightning.pytorch.strategies.xla", "lightning.pytorch.strategies.single_xla",
    "lightning.pytorch.strategies.launchers.xla", "lightning.pytorch.plugins.precision.xla",
    "lightning.fabric.strategies.xla", "lightning.fabric.strategies.single_xla",
    "lightning.fabric.strategies.launchers.xla", "lightning.fabric.strategies.xla_fsdp",
    "lightning.fabric.plugins.precision.xla", "lightning.fabric.plugins.environments.xla",
)  # fmt: skip


def _xla_device(index: int | None = None, *args: Any, **kwargs: Any) -> Any:
    import torch

    return torch.device("xla", index or 0)


@contextlib.contextmanager
def _settings(case: Case) -> Iterator[None]:
    from lightning_presets.tools.simulation import simulated_cluster, simulated_cuda
    from lightning_presets.tools.simulation.lightning import interactive_session
    from lightning_presets.tools.simulation.stand_ins import standing_in

    devices, nodes = 2, 2
    with contextlib.ExitStack() as stack:
        stack.enter_context(simulated_cuda(case.gpus))
        # A rank file the case names is Lightning's to read (the sample wants its failure); the simulation would refuse
        # an unreadable one, so it gets the case's variables without it, and the patch below sets it as given.
        simulated = {key: value for key, value in case.env.items() if key != "LSB_DJOB_RANKFILE"}
        stack.enter_context(simulated_cluster(case.cluster, devices, nodes, simulated))
        stack.enter_context(mock.patch.dict(os.environ, {k: v for k, v in case.env.items()}))
        stack.enter_context(standing_in(*(name for name in case.stand_ins if name != "bitsandbytes")))
        if "bitsandbytes" in case.stand_ins:  # its import skipped: the plugin's own argument checks run without it
            module = importlib.import_module("lightning.fabric.plugins.precision.bitsandbytes")
            stack.enter_context(mock.patch.object(module, "_import_bitsandbytes", _returning(None)))
        if "torch_xla" in case.stand_ins:  # the stand-in turns XLA on in Fabric's modules; the Trainer's too
            sys.modules["torch_xla"].core.xla_model.xla_device = _xla_device  # a real device, as torch_xla gives
            for name in _XLA_MODULES:
                module = importlib.import_module(name)
                if hasattr(module, "_XLA_AVAILABLE"):
                    stack.enter_context(mock.patch.object(module, "_XLA_AVAILABLE", True))
        if "mps" not in case.stand_ins:
            from lightning_presets.tools.simulation import without_mps

            stack.enter_context(without_mps())
        if case.interactive:
            stack.enter_context(interactive_session())
            launcher = importlib.import_module("lightning.fabric.strategies.launchers.multiprocessing")
            stack.enter_context(mock.patch.object(launcher, "_IS_INTERACTIVE", True))
        if case.no_fork:
            stack.enter_context(
                mock.patch("torch.multiprocessing.get_all_start_methods", _returning(["spawn", "forkserver"]))
            )
        yield


def _setting(case: Case) -> tuple[Any, ...]:
    return (case.gpus, case.cluster, tuple(sorted(case.env.items())), case.stand_ins, case.interactive, case.no_fork)


def run(namespaces: dict[str, Namespace]) -> dict[str, int]:
    """Construct every case, those of one simulated setting together (entering a setting costs more than most
    constructions); returns how many ended how (``built``, an exception's name, ``skipped``)."""
    outcomes: dict[str, int] = {}
    for _, group in itertools.groupby(sorted(cases(), key=lambda case: repr(_setting(case))), key=_setting):
        batch = list(group)
        with _settings(batch[0]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for case in batch:
                for target in case.targets:
                    outcome = _construct(case, namespaces[target])
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def _construct(case: Case, ns: Namespace) -> str:
    try:
        arguments = case.arguments(ns)
        if arguments is None:
            return "skipped"
        if not case.build_only:
            ns.factory(**arguments)
    except Exception as error:
        return type(error).__name__
    return "built"


SCRATCH_CALLERS = {
    (os.path.join("lightning_presets", "strategies", "deepspeed", "parser.py"), "formatted_by_lightning"),
    (os.path.join("lightning_presets", "guards", "strategy.py"), "environment_refusal"),
}
"""Where the guards run Lightning's own checks early, on a copy or ahead of time (the DeepSpeed config Lightning will
pass; the cluster environment's validate_settings): lines executed from there are not Lightning's construction."""


def _on_scratch(frame: FrameType | None) -> bool:
    while frame is not None:
        code = frame.f_code
        if any(code.co_name == name and code.co_filename.endswith(path) for path, name in SCRATCH_CALLERS):
            return True
        frame = frame.f_back
    return False


class _Tracer:
    """Records the executed lines of the watched files (a set of paths, or every file under a directory)."""

    def __init__(self, files: set[str], under: str = "") -> None:
        self.executed: dict[str, set[int]] = {}
        executed = self.executed

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                executed[frame.f_code.co_filename].add(frame.f_lineno)
            return local

        def in_files(frame: FrameType, event: str, arg: Any) -> Any:
            filename = frame.f_code.co_filename
            if filename not in files or _on_scratch(frame.f_back):
                return None
            executed.setdefault(filename, set()).add(frame.f_lineno)
            return local

        def under_directory(frame: FrameType, event: str, arg: Any) -> Any:
            filename = frame.f_code.co_filename
            if not filename.startswith(under):
                return None
            executed.setdefault(filename, set()).add(frame.f_lineno)
            return local

        self.tracer = under_directory if under else in_files

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        sys.settrace(self.tracer)
        try:
            yield
        finally:
            sys.settrace(None)


def _parse_deepspeed(namespaces: dict[str, Namespace]) -> tuple[dict[str, set[int]], list[str], int]:
    """Run DeepSpeed's config parser on every sampled config, tracing DeepSpeed's own files only while it parses."""
    import copy
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        return {}, [], 0
    from deepspeed.runtime.config import DeepSpeedConfig

    tracer = _Tracer(set(), under=next(iter(spec.submodule_search_locations)) + os.sep)
    models: set[str] = set()
    count = 0
    configs = list(deepspeed_configs(namespaces))
    for config in configs:  # once untraced: what the parser imports lazily is imported before the trace starts
        with warnings.catch_warnings(), contextlib.suppress(Exception):
            warnings.simplefilter("ignore")
            DeepSpeedConfig(copy.deepcopy(config))
    for config in configs:
        count += 1
        with tracer.on(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                parsed = DeepSpeedConfig(copy.deepcopy(config))
            except Exception:
                continue
        models.update(f"{cls.__module__}:{cls.__qualname__}" for cls in _models(vars(parsed), set()))
    return tracer.executed, sorted(models), count


UNTRACED_IMPORTS = ("torch", "torch.distributed", "torchmetrics", "lightning_utilities", "fsspec", "yaml", "deepspeed",
                    "bitsandbytes")  # fmt: skip
"""What Lightning imports that is not Lightning (deepspeed and bitsandbytes when a case builds their plugins):
imported before the trace starts, as tracing their import is slow."""


def main(files: list[str]) -> int:
    tracer = _Tracer(set(files))
    logging.disable(logging.WARNING)
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in UNTRACED_IMPORTS:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    with contextlib.redirect_stdout(sys.stderr):
        with tracer.on():
            import lightning_presets  # noqa: F401  (Lightning's import, and the presets' registration)
            from lightning_presets.tools.simulation.lightning import entry_points_scanned_once

            namespaces = {target: _namespace(target) for target in ("trainer", "fabric")}
            with entry_points_scanned_once():  # Lightning's scan for callback entry points, once instead of per case
                outcomes = run(namespaces)
        deepspeed_lines, models, configs = _parse_deepspeed(namespaces)
    lines = {name: sorted(numbers) for name, numbers in {**tracer.executed, **deepspeed_lines}.items()}
    report = {"lines": lines, "cases": sum(outcomes.values()), "outcomes": outcomes, "deepspeed_configs": configs,
              "deepspeed_models": models}  # fmt: skip
    json.dump(report, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
