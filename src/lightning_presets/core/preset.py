"""The declarative models of strategy and precision presets, independent of any Lightning namespace."""

from __future__ import annotations

import functools
import importlib.util
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, ClassVar, cast

from lightning_presets.core.family import Family
from lightning_presets.core.findings import Severity
from lightning_presets.core.mesh import MeshSpec
from lightning_presets.core.namespaces import NAMESPACES, Kind
from lightning_presets.core.rules import Rule

_EMPTY: Mapping[str, Any] = MappingProxyType({})
KINDS: tuple[Kind, ...] = ("trainer", "fabric")


def every_kind(class_name: str) -> dict[str, str]:
    """A preset's Lightning class for every kind (``{"trainer": name, "fabric": name}``): its ``strategy`` or
    ``plugin`` when the Trainer and Fabric take the same class."""
    return dict.fromkeys(KINDS, class_name)


@dataclass(frozen=True, slots=True, kw_only=True)
class PresetType:
    """What differs between strategy and precision presets, as data the registry reads."""

    noun: str
    """``strategy`` or ``precision``: the API function (``lightning_presets.strategy``) and messages."""
    label: str
    """How messages name one preset of this type: ``preset`` or ``precision preset``."""
    group: str
    """The entry-point group its presets are published in."""
    module: str
    """Where a namespace keeps the Lightning classes, e.g. ``strategies`` (``lightning.pytorch.strategies``)."""
    base: str
    """The Lightning base class every preset class must subclass, in that module."""
    constructor_keys: bool
    """Whether the Lightning constructor's named parameters are valid overrides (strategies) or only the
    preset's own defaults are (precision plugins)."""
    named_after_mixin: bool
    """Whether a composed class takes its mixin's name (a new plugin) or Lightning's class name (hooks)."""


STRATEGY = PresetType(noun="strategy", label="preset", group="lightning_presets.strategies", module="strategies",
                      base="Strategy", constructor_keys=True, named_after_mixin=False)  # fmt: skip
PRECISION = PresetType(noun="precision", label="precision preset", group="lightning_presets.precision",
                       module="plugins.precision", base="Precision", constructor_keys=False,
                       named_after_mixin=True)  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """An optional dependency a preset needs, and the extra that installs it."""

    module: str
    """The import name, e.g. ``deepspeed``."""
    extra: str
    """The extra of ``lightning-presets`` that installs it, e.g. ``deepspeed``."""
    builds_against_torch: bool = False
    """Its source build imports the installed torch (DeepSpeed): pip must not build it in an isolated environment,
    where a plain ``torch`` requirement would download a CUDA build of several GB."""

    @property
    def install_command(self) -> str:
        """The pip line that installs it: the extra's requirement as lightning-presets' metadata declares it, which
        works however lightning-presets itself was installed (from a clone, or from an index); the extra itself when
        the metadata is not there (a source tree on ``sys.path``)."""
        requirement = extra_requirements().get(self.extra)
        if requirement is None:
            return f"pip install 'lightning-presets[{self.extra}]'"
        options = "--no-build-isolation " if self.builds_against_torch else ""
        return f"pip install {options}'{requirement}'"

    def is_installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None


@functools.cache
def extra_requirements(distribution: str = "lightning-presets") -> Mapping[str, str]:
    """Each extra of ``distribution`` with one requirement, marker removed: ``{"deepspeed": "deepspeed>=0.16"}``."""
    import importlib.metadata

    from packaging.requirements import InvalidRequirement
    from packaging.requirements import Requirement as Parsed

    try:
        declared = importlib.metadata.requires(distribution) or []
    except importlib.metadata.PackageNotFoundError:
        return {}
    by_extra: dict[str, list[str]] = {}
    for line in declared:
        try:
            parsed = Parsed(line)
        except InvalidRequirement:
            continue
        extra = re.search(r"""extra\s*==\s*['"]([^'"]+)['"]""", str(parsed.marker or ""))
        if extra is None:
            continue
        parsed.marker = None
        by_extra.setdefault(extra.group(1), []).append(str(parsed))
    return {extra: lines[0] for extra, lines in by_extra.items() if len(lines) == 1}


@dataclass(frozen=True, slots=True, kw_only=True)
class _Published(ABC):
    """What strategy and precision presets share: who published them, and the kinds their classes cover."""

    distribution: str | None = None
    """The distribution that published it (set when loaded from an entry point)."""
    version: str | None = None
    """That distribution's version."""

    @abstractmethod
    def class_spec(self, kind: str) -> str | None:
        """The Lightning class for a kind: a name in the namespace's strategies module (or, for a precision preset,
        its precision plugins module), or ``module:attr``."""

    @property
    def kinds(self) -> tuple[Kind, ...]:
        """The kinds (``trainer``, ``fabric``) it has a class for, in that order."""
        return tuple(kind for kind in KINDS if self.class_spec(kind) is not None)

    @property
    def targets(self) -> tuple[str, ...]:
        """The ``target=`` values it can be built for."""
        kinds = self.kinds
        return tuple(namespace.target for namespace in NAMESPACES if namespace.kind in kinds)


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset(_Published):
    """A named, guarded strategy configuration for the Trainer and/or Fabric.

    Declared once, namespace-agnostic: ``strategy`` names the Lightning class per kind and the
    registry resolves it in each of the four namespaces. Published through the entry-point group
    ``lightning_presets.strategies``.
    """

    TYPE: ClassVar[PresetType] = STRATEGY

    name: str
    """Lower-case name users pass as ``strategy=``."""
    description: str
    """One or two lines: what it is for."""
    family: Family
    """The strategy family (:class:`~lightning_presets.core.family.Family`): the built-in ``DDP_FAMILY``,
    ``FSDP_FAMILY``, ``MODEL_PARALLEL_FAMILY``, ``DEEPSPEED_FAMILY``, ``XLA_FAMILY`` (declared beside their strategies)
    or a third party's own; a name alone (``family="ddp"``) stands for the family declared under it."""
    strategy: Mapping[str, str]
    """Kind (``trainer``/``fabric``) to a class name in ``<namespace>.strategies``, or ``module:attr``."""
    init_params: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Default constructor arguments. Copied for every strategy built: never shared."""
    rules: tuple[Rule, ...] = ()
    """The guards, of every stage."""
    requires: tuple[Requirement, ...] = ()
    """Optional dependencies; checked when the strategy is built, never when the catalog loads."""
    mixins: Mapping[str, type] = field(default_factory=lambda: _EMPTY)
    """Kind to a plain class placed before the Lightning strategy class (family behaviour)."""
    extra_keys: frozenset[str] = frozenset()
    """Override keys accepted besides the strategy constructor's named parameters."""
    prepare: Callable[[Kind, dict[str, Any]], dict[str, Any]] | None = None
    """Turns the options into constructor arguments for a kind (drop preset-only keys, fill placeholders)."""
    resolve: Callable[[Any], Mapping[str, Any]] | None = None
    """Reads what the built strategy resolved from its arguments (e.g. the DeepSpeed config dict it will pass,
    loaded from a path or built from the arguments); the guards see it as ``Context.resolved``."""
    tested_with: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Versions its tests ran on and the evidence level reached, e.g. ``{"lightning": "2.6.6", "torch": "2.13.0",
    "evidence": "runtime (CPU, gloo, 2 processes)"}``; ``show`` prints it."""
    activation_checkpointing: bool = False
    """Whether the preset checkpoints the activations of the repeated blocks it finds."""
    cpu_offload: bool = False
    """Whether the preset keeps sharded state in CPU memory."""
    mesh: MeshSpec | None = None
    """How the preset lays its processes out on a device mesh, when it uses one."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "family", Family.of(cast("Family | str", self.family)))

    def class_spec(self, kind: str) -> str | None:
        """The Lightning class for a kind: a name in ``<namespace>.strategies`` or ``module:attr``."""
        return self.strategy.get(kind)

    def mixin_for(self, kind: str) -> type | None:
        return self.mixins.get(kind)

    def rules_of(self, stage: str) -> tuple[Rule, ...]:
        return tuple(each for each in self.rules if each.stage == stage)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrecisionPreset(_Published):
    """A named precision plugin configuration, published through ``lightning_presets.precision``."""

    TYPE: ClassVar[PresetType] = PRECISION

    name: str
    """Lower-case name passed to :func:`lightning_presets.precision`."""
    description: str
    """One or two lines: what it is for."""
    plugin: Mapping[str, str]
    """Kind (``trainer``/``fabric``) to a class name in ``<namespace>.plugins.precision``, or ``module:attr``."""
    mixin: type | None = None
    """A plain class placed before the Lightning plugin class (new behaviour, e.g. a ``convert_module``)."""
    init_params: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Default arguments; the keys are also the overrides users may pass."""
    prepare: Callable[[Kind, dict[str, Any]], dict[str, Any]] | None = None
    """Turns the options into the plugin constructor's arguments (e.g. dtype names into ``torch.dtype``)."""
    rules: tuple[Rule, ...] = ()
    """Guards: stage ``options`` on a :class:`PrecisionContext`, stage ``setup`` on it and the model."""
    requires: tuple[Requirement, ...] = ()
    needs_cuda: bool = True
    """Whether it only works on CUDA devices."""
    min_capability: tuple[int, int] | None = None
    """Lowest CUDA compute capability it works on, e.g. ``(8, 9)`` for FP8."""
    capability_reason: str = ""
    """Why, for the message."""
    capability_severity: Severity = "error"
    """``error`` when a GPU below ``min_capability`` makes it fail (LP604), ``warning`` when it only runs slower
    there (LP616)."""
    incompatible: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Strategy family (or preset name) to the reason the combination is known not to work."""
    tested_with: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Versions its tests ran on and the evidence level reached."""

    @property
    def extra_keys(self) -> frozenset[str]:
        """A precision preset takes exactly the keys of its defaults."""
        return frozenset()

    def class_spec(self, kind: str) -> str | None:
        """The Lightning plugin class for a kind: a name in ``<namespace>.plugins.precision`` or ``module:attr``."""
        return self.plugin.get(kind)

    def mixin_for(self, kind: str) -> type | None:
        return self.mixin

    def incompatibility(self, family: str | None, strategy_preset: str, kind: str = "") -> str | None:
        """Why it does not work with a strategy preset: looked up by preset name, ``family:trainer`` (or
        ``family:fabric``, by ``kind``), then family."""
        keys = (strategy_preset, f"{family}:{kind}" if family else None, family)
        return next((self.incompatible[key] for key in keys if key and key in self.incompatible), None)


AnyPreset = Preset | PrecisionPreset
