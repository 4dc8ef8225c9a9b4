"""What Lightning resolved a configuration to: strategy class, precision plugin, world size, device mesh."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lightning_presets._context import accelerator_name

_LIGHTNING_PACKAGES = ("lightning.", "pytorch_lightning.", "lightning_fabric.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Resolved:
    """The pieces of the constructed strategy a report shows."""

    strategy_class: str
    """Lightning's class, fully qualified, e.g. ``lightning.pytorch.strategies.fsdp.FSDPStrategy``."""
    preset: str | None
    """The preset whose guards the strategy carries, if any."""
    accelerator: str
    precision: str
    precision_plugin: str
    devices_per_node: int
    num_nodes: int
    world_size: int
    cluster_environment: str
    launcher: str | None
    device_mesh: dict[str, int]
    """Dimension name to size, outermost first."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _lightning_class(strategy: Any) -> type:
    for klass in type(strategy).__mro__:
        if klass.__module__.startswith(_LIGHTNING_PACKAGES):
            return klass
    return type(strategy)


def _size(value: Any, auto: int) -> int | None:
    if value == "auto":
        return auto
    return value if type(value) is int else None


def device_mesh(strategy: Any, devices: int, num_nodes: int) -> dict[str, int]:
    """The mesh the strategy would build once processes exist, from its arguments (nothing is initialized)."""
    world = devices * num_nodes
    if hasattr(strategy, "_tensor_parallel_size"):  # ModelParallelStrategy: "auto" = (nodes, devices per node)
        data = _size(strategy._data_parallel_size, num_nodes)
        tensor = _size(strategy._tensor_parallel_size, devices)
        if data is not None and tensor is not None:
            return {"data_parallel": data, "tensor_parallel": tensor}
    fsdp_kwargs = getattr(strategy, "kwargs", None) or getattr(strategy, "_fsdp_kwargs", None) or {}
    mesh = fsdp_kwargs.get("device_mesh") if isinstance(fsdp_kwargs, dict) else None
    if isinstance(mesh, tuple) and len(mesh) == 2:
        return {"replicate": int(mesh[0]), "shard": int(mesh[1])}
    sharding = str(getattr(strategy, "sharding_strategy", ""))
    if "HYBRID" in sharding:
        return {"replicate": num_nodes, "shard": devices}
    return {"data_parallel": world}


def resolve(strategy: Any, caller: str) -> Resolved:
    """Read the final configuration off a strategy Lightning has finished setting up."""
    plugin = getattr(strategy, "precision_plugin" if caller == "Trainer" else "precision", None)
    devices_list = getattr(strategy, "parallel_devices", None)
    devices = len(devices_list) if devices_list else 1
    num_nodes = int(getattr(strategy, "num_nodes", 1) or 1)
    environment = getattr(strategy, "cluster_environment", None)
    launcher = getattr(strategy, "_launcher", None)
    accelerator = getattr(strategy, "accelerator", None)
    klass = _lightning_class(strategy)
    preset = getattr(getattr(strategy, "_lp_preset", None), "name", None)
    return Resolved(
        strategy_class=f"{klass.__module__}.{klass.__qualname__}",
        preset=preset,
        accelerator=accelerator_name(accelerator) if accelerator is not None else "none",
        precision=str(getattr(plugin, "precision", "32-true")),
        precision_plugin=type(plugin).__name__,
        devices_per_node=devices,
        num_nodes=num_nodes,
        world_size=devices * num_nodes,
        cluster_environment=type(environment).__name__ if environment is not None else "none",
        launcher=type(launcher).__name__ if launcher is not None else None,
        device_mesh=device_mesh(strategy, devices, num_nodes),
    )
