"""Device meshes: how a preset lays its processes out, resolved one way for guards, ``check`` and ``show``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

AUTO = "auto"
Auto = Literal["nodes", "devices", "world", "one"]
"""What ``'auto'`` means for one mesh dimension: the number of nodes, the devices per node, the world size, 1."""


def mesh_shape(value: Any) -> tuple[int, int] | None:
    """``(outer, inner)`` of a mesh given as a pair of positive integers (a YAML list too), else ``None``."""
    if isinstance(value, (tuple, list)) and len(value) == 2 and all(type(n) is int and n > 0 for n in value):
        return (value[0], value[1])
    return None


@dataclass(frozen=True, slots=True, kw_only=True)
class MeshSpec:
    """A two-dimensional mesh: its dimension names, where its sizes come from, and what ``'auto'`` means.

    The sizes come either from one option per dimension (``keys``, e.g. ``data_parallel_size`` and
    ``tensor_parallel_size``) or from one option holding the pair (``pair_key``, e.g. FSDP's ``device_mesh``).
    """

    dims: tuple[str, str]
    """Dimension names, outermost first."""
    auto: tuple[Auto, Auto]
    keys: tuple[str, str] | None = None
    pair_key: str | None = None

    def sizes(
        self, options: Mapping[str, Any], devices_per_node: int, num_nodes: int, world: int | None = None
    ) -> tuple[Any, Any] | None:
        """The sizes the strategy runs with, ``'auto'`` resolved; values that are not sizes come back as given.
        ``world``: the processes the launcher made where that is not devices × num_nodes (``Context.world_size``).

        ``None`` when the mesh cannot be known from the options (a ``DeviceMesh`` object or a process group).
        """
        resolved = tuple(_auto(meaning, devices_per_node, num_nodes, world) for meaning in self.auto)
        if self.keys is not None:
            values = [options.get(key, AUTO) for key in self.keys]
            return (
                resolved[0] if values[0] == AUTO else values[0],
                resolved[1] if values[1] == AUTO else values[1],
            )
        value = options.get(self.pair_key or "", AUTO)
        if value in (AUTO, None) and options.get("process_group") is None:
            return (resolved[0], resolved[1])
        return mesh_shape(value)

    def resolve(self, options: Mapping[str, Any], devices_per_node: int, num_nodes: int) -> dict[str, int] | None:
        """Dimension name to size, outermost first; ``None`` when unknown or not a pair of positive integers."""
        sizes = self.sizes(options, devices_per_node, num_nodes)
        if sizes is None or not all(type(size) is int and size > 0 for size in sizes):
            return None
        return dict(zip(self.dims, sizes, strict=True))

    def is_auto(self, options: Mapping[str, Any], index: int) -> bool:
        """Whether dimension ``index`` was left to ``'auto'``."""
        if self.keys is not None:
            return bool(options.get(self.keys[index], AUTO) == AUTO)
        return options.get(self.pair_key or "", AUTO) in (AUTO, None)


def _auto(meaning: Auto, devices_per_node: int, num_nodes: int, world: int | None = None) -> int:
    return {
        "nodes": num_nodes,
        "devices": devices_per_node,
        "world": world or devices_per_node * num_nodes,
        "one": 1,
    }[meaning]


MODEL_PARALLEL = MeshSpec(
    dims=("data_parallel", "tensor_parallel"),
    keys=("data_parallel_size", "tensor_parallel_size"),
    auto=("nodes", "devices"),
)
"""Lightning's ``ModelParallelStrategy``: ``'auto'`` is data = number of nodes, tensor = devices per node."""
DATA_PARALLEL_WORLD = MeshSpec(
    dims=("data_parallel", "tensor_parallel"),
    keys=("data_parallel_size", "tensor_parallel_size"),
    auto=("world", "one"),
)
"""FSDP2 over every device: ``'auto'`` is data = the world size, tensor = 1."""
HYBRID_SHARD = MeshSpec(dims=("replicate", "shard"), pair_key="device_mesh", auto=("nodes", "devices"))
"""FSDP hybrid sharding: ``device_mesh=(replicas, shard size)``; ``'auto'`` is (nodes, devices per node)."""
