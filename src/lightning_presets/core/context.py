"""The frozen snapshot guards read: the final configuration Lightning handed to the strategy."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal, NamedTuple

from lightning_presets.core.family import Family
from lightning_presets.core.mesh import MeshSpec
from lightning_presets.core.namespaces import Kind, constructor
from lightning_presets.core.preset import PrecisionPreset

_EMPTY: Mapping[str, Any] = MappingProxyType({})


def _call(kind: str, preset: str, parts: list[str]) -> str:
    return f"`{constructor(kind)}({', '.join([f'strategy={preset!r}', *parts])})`"


def devices_as_written(written: Any, resolved: int | None) -> str:
    """``devices=`` as a message repeats the user's call: the value as written (``-1``, ``[0, 1]``, ``"0,1"``), or the
    resolved count per node when nothing was written."""
    return f"devices={resolved}" if written is None else f"devices={written!r}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Options:
    """The arguments a preset is built with: its defaults merged with the user's overrides."""

    preset: str
    """The preset's name."""
    target: str
    """Where it is built for: ``trainer``, ``fabric``, ``pytorch_lightning`` or ``lightning_fabric``."""
    values: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Every argument, defaults included."""
    overrides: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Only what the user passed."""

    def call(self, *keys: str) -> str:
        """The user's call, e.g. ``lightning_presets.strategy('fsdp_offload_ckpt', sharding_strategy='X')``."""
        parts = [repr(self.preset), *(f"{key}={self.values.get(key)!r}" for key in keys)]
        if self.target != "trainer":
            parts.append(f"target={self.target!r}")
        return f"`lightning_presets.strategy({', '.join(parts)})`"


class Clipping(NamedTuple):
    """The Trainer's gradient clipping: ``gradient_clip_val`` and the algorithm Lightning applies it with."""

    value: float
    algorithm: Literal["norm", "value"]
    """``norm`` (Lightning's default when ``gradient_clip_algorithm`` is ``None``) or ``value``."""


def _clip_algorithm(algorithm: Any) -> Literal["norm", "value"] | None:
    """``norm``/``value`` for ``gradient_clip_algorithm`` (a string or Lightning's enum); ``None`` for anything else."""
    name = str(getattr(algorithm, "value", algorithm)).lower() if algorithm is not None else "norm"
    return "norm" if name == "norm" else "value" if name == "value" else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Context:
    """What a Trainer or Fabric is about to run with, taken once the connector has set everything."""

    preset: str
    """The preset's name."""
    target: str
    """``trainer``, ``fabric``, ``pytorch_lightning`` or ``lightning_fabric``."""
    kind: Kind
    """``trainer`` (a Trainer builds the strategy) or ``fabric``; written ``Trainer``/``Fabric`` by
    :attr:`constructor`."""
    accelerator: str
    """``cpu``, ``cuda``, ``mps``, ``xla`` or the accelerator class name in lower case."""
    devices_per_node: int
    """Processes per node (``len(parallel_devices)``)."""
    num_nodes: int
    precision: str
    """The precision plugin's precision, e.g. ``bf16-mixed``."""
    precision_plugin: str | None
    """The precision plugin's class name; ``None`` when no Trainer/Fabric was built (``check``'s syntax-level
    fallback), so which plugin Lightning would pick is not known and rules that read it do not decide."""
    cluster_environment: str
    """The cluster environment's class name."""
    options: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """The preset's arguments (defaults merged with overrides)."""
    resolved: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """What the strategy resolved from them (``Preset.resolve``), e.g. ``{"config": <the DeepSpeed config>}``."""
    family: Family | None = None
    """The strategy preset's family (:class:`~lightning_presets.core.family.Family`; also its name, ``fsdp``,
    ``deepspeed``, ...), for guards across presets: what it loads, how it is laid out. A name stands for the family
    declared under it."""
    precision_classes: tuple[str, ...] = ()
    """Class names of the precision plugin and its bases, for isinstance-style checks by name."""
    precision_preset: PrecisionPreset | None = None
    """The precision preset the plugin came from (``lightning_presets.precision(...)``), if any."""
    gpu_capability: tuple[int, int] | None = None
    """Lowest CUDA compute capability among the visible GPUs; ``None`` when unknown or not on CUDA."""
    activation_checkpointing: bool = False
    """Whether the strategy preset checkpoints the activations of the repeated blocks it finds."""
    accumulate_grad_batches: int | None = None
    """The Trainer's ``accumulate_grad_batches`` (``None`` with Fabric)."""
    environment_refusal: str | None = None
    """What the cluster environment's own ``validate_settings`` says of the devices and nodes (its error, one line),
    run when the snapshot is taken; ``None`` when it accepts them."""
    torch_build: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """What the installed torch was built with: ``cuda`` (``torch.version.cuda``), ``hip``, ``nccl`` (a version tuple,
    or ``None`` without NCCL); read once when the snapshot is taken."""
    arguments: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Every argument of the ``Trainer(...)``/``Fabric(...)`` call, defaults included, named as the installed
    Lightning's signature names them (``gradient_clip_val``, ``sync_batchnorm``, ``devices``, ...); empty when the
    strategy is not being built by one."""
    launched_world: int | None = None
    """The world the launcher made, where the cluster environment takes it from the launcher and not from devices ×
    num_nodes (Ray's workers, a Kubeflow PyTorchJob's ``WORLD_SIZE``, LSF, MPI): ``environment.world_size()`` when it
    differs from devices × num_nodes and the environment accepts the job; ``None`` otherwise."""
    device_indices: tuple[int, ...] | None = None
    """The device index of each process of a node as Lightning resolved them (``strategy.parallel_devices``: ``(1, 3)``
    for ``devices=[1, 3]`` on CUDA); ``None`` where the devices have no index (CPU) or nothing was resolved."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", Family.of(self.family))

    # --- the vocabulary rules read: the Trainer's settings, parsed once -------------------------------------------

    @property
    def clipping(self) -> Clipping | None:
        """The Trainer's gradient clipping, or ``None`` when it clips nothing (no or a zero ``gradient_clip_val``, an
        unknown algorithm, or Fabric, which has no such argument: ``fabric.clip_gradients`` is called explicitly)."""
        value = self.arguments.get("gradient_clip_val")
        if self.kind != "trainer" or isinstance(value, bool) or not isinstance(value, (int, float)) or not value:
            return None
        algorithm = _clip_algorithm(self.arguments.get("gradient_clip_algorithm"))
        return Clipping(float(value), algorithm) if algorithm is not None else None

    @property
    def clips_by_norm(self) -> bool:
        """Whether the Trainer clips gradients by their norm (``gradient_clip_val`` set, algorithm ``norm``)."""
        return self.clipping is not None and self.clipping.algorithm == "norm"

    @property
    def clips_by_value(self) -> bool:
        """Whether the Trainer clips gradients by value (``gradient_clip_algorithm='value'`` with a value)."""
        return self.clipping is not None and self.clipping.algorithm == "value"

    @property
    def clip_algorithm_requested(self) -> Literal["norm", "value"] | None:
        """The algorithm ``gradient_clip_algorithm`` names, even without a ``gradient_clip_val`` (``None``: not set)."""
        algorithm = self.arguments.get("gradient_clip_algorithm") if self.kind == "trainer" else None
        return _clip_algorithm(algorithm) if algorithm is not None else None

    @property
    def sync_batchnorm(self) -> bool:
        """Whether the Trainer was asked to convert batch norm layers to ``SyncBatchNorm`` (``sync_batchnorm=True``)."""
        return self.kind == "trainer" and self.arguments.get("sync_batchnorm") is True

    @property
    def detect_anomaly(self) -> bool:
        """Whether the Trainer runs the steps under ``torch.autograd.set_detect_anomaly`` (``detect_anomaly=True``)."""
        return self.kind == "trainer" and self.arguments.get("detect_anomaly") is True

    def precision_is(self, class_name: str) -> bool:
        """Whether the precision plugin is an instance of a class called ``class_name`` (in any namespace)."""
        return class_name in self.precision_classes

    @property
    def world_size(self) -> int:
        """The processes of the job: the launcher's world where the environment takes it from the launcher
        (:attr:`launched_world`), else devices × num_nodes."""
        return self.launched_world or self.devices_per_node * self.num_nodes

    def mesh_sizes(self, mesh: MeshSpec) -> tuple[Any, Any] | None:
        """The sizes of ``mesh`` (a preset's :class:`~lightning_presets.core.mesh.MeshSpec`) for this job: the preset's
        arguments with ``'auto'`` resolved on its devices, nodes and the launcher's world (values that are not sizes as
        given); ``None`` when the options give no mesh to read (a ``DeviceMesh`` object, a process group)."""
        return mesh.sizes(self.options, self.devices_per_node, self.num_nodes, self.world_size)

    @property
    def constructor(self) -> str:
        """``Trainer`` or ``Fabric``: :attr:`kind` as messages write it (``Trainer(strategy=...)``)."""
        return constructor(self.kind)

    def call(self, *fields: str) -> str:
        """The user's call with the named fields, e.g. ```Trainer(strategy='x', accelerator='cpu')```; a field that is
        not one of the context's own is read from :attr:`arguments` (``ctx.call("gradient_clip_val")``)."""
        rendered = {
            "accelerator": f"accelerator={self.accelerator!r}",
            "devices": devices_as_written(
                None if self.arguments.get("devices", "auto") == "auto" else self.arguments["devices"],
                self.devices_per_node,
            ),
            "num_nodes": f"num_nodes={self.num_nodes}",
            "precision": f"precision={self.precision!r}",
        }
        parts = [rendered.get(name) or f"{name}={self.arguments.get(name)!r}" for name in fields]
        return _call(self.kind, self.preset, parts)

    @property
    def world_arithmetic(self) -> str:
        if self.launched_world:
            return f"the {self.launched_world} processes {self.cluster_environment} reports (not devices × num_nodes)"
        return f"devices={self.devices_per_node} × num_nodes={self.num_nodes} = {self.world_size}"


_ACCELERATOR_NAMES = {
    "CPUAccelerator": "cpu",
    "CUDAAccelerator": "cuda",
    "MPSAccelerator": "mps",
    "XLAAccelerator": "xla",
}


def accelerator_name(accelerator: object) -> str:
    """``cpu``/``cuda``/``mps``/``xla`` for Lightning's accelerators (instances or classes) and their subclasses, else
    the class name."""
    cls = accelerator if isinstance(accelerator, type) else type(accelerator)
    for klass in cls.__mro__:
        if klass.__name__ in _ACCELERATOR_NAMES:
            return _ACCELERATOR_NAMES[klass.__name__]
    name = cls.__name__
    return name.removesuffix("Accelerator").lower() or "none"


@dataclass(frozen=True, slots=True, kw_only=True)
class PrecisionContext:
    """What a precision guard sees: the preset's arguments and the visible hardware (never probed by a guard)."""

    preset: str
    target: str
    values: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Every argument, defaults included."""
    cuda_devices: int = 0
    """CUDA devices visible to this process (fork-safe count, or the simulation's)."""
    capability: tuple[int, int] | None = None
    """Lowest compute capability among them; ``None`` when unknown."""
    when: str = "built"
    """``built`` (by :func:`lightning_presets.precision`) or ``converting`` (the model, in the training process)."""
    requirement: PrecisionPreset | None = None

    def call(self, *keys: str) -> str:
        parts = [repr(self.preset), *(f"{key}={self.values.get(key)!r}" for key in keys)]
        if self.target != "trainer":
            parts.append(f"target={self.target!r}")
        return f"`lightning_presets.precision({', '.join(parts)})`"
