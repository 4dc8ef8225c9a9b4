"""What Lightning resolved a configuration to: strategy class, precision plugin, world size, device mesh."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from lightning_presets.core.context import accelerator_name
from lightning_presets.core.mesh import HYBRID_SHARD, MODEL_PARALLEL, MeshSpec
from lightning_presets.registry import private

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


_HYBRID_SHARDING = ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")


def _mesh_of(strategy: Any) -> tuple[MeshSpec, dict[str, Any]] | None:
    """The strategy's mesh spec and the options it reads: the preset's own, or Lightning's class's."""
    preset = getattr(strategy, "_lp_preset", None)
    options = dict(getattr(strategy, "_lp_options", None) or {})
    if preset is not None and getattr(preset, "mesh", None) is not None:
        return preset.mesh, options
    names = {klass.__name__ for klass in type(strategy).__mro__}
    if "ModelParallelStrategy" in names:
        data, tensor = private.parallel_sizes_of(strategy)
        sizes = {"data_parallel_size": data, "tensor_parallel_size": tensor}
        return MODEL_PARALLEL, sizes
    if "FSDPStrategy" in names:
        fsdp_kwargs = getattr(strategy, "kwargs", None) or private.fabric_fsdp_kwargs(strategy) or {}
        mesh = fsdp_kwargs.get("device_mesh") if isinstance(fsdp_kwargs, dict) else None
        sharding = getattr(getattr(strategy, "sharding_strategy", None), "name", None)
        if mesh is not None or sharding in _HYBRID_SHARDING:
            return HYBRID_SHARD, {"device_mesh": mesh}
    return None


def device_mesh(strategy: Any, devices: int, num_nodes: int) -> dict[str, int]:
    """The mesh the strategy would build once processes exist, from its arguments (nothing is initialized)."""
    found = _mesh_of(strategy)
    mesh = found[0].resolve(found[1], devices, num_nodes) if found is not None else None
    return mesh if mesh is not None else {"data_parallel": devices * num_nodes}


def resolve(strategy: Any, kind: str) -> Resolved:
    """Read the final configuration off a strategy Lightning has finished setting up."""
    plugin = getattr(strategy, "precision_plugin" if kind == "trainer" else "precision", None)
    devices_list = getattr(strategy, "parallel_devices", None)
    devices = len(devices_list) if devices_list else 1
    num_nodes = int(getattr(strategy, "num_nodes", 1) or 1)
    environment = getattr(strategy, "cluster_environment", None)
    launcher = private.launcher_of(strategy)
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
