"""The declarative description of a strategy preset, independent of any Lightning namespace."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lightning_presets._namespaces import NAMESPACES, Kind
from lightning_presets._rules import Rule

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class Requirement:
    """An optional dependency a preset needs, and the extra that installs it."""

    module: str
    """The import name, e.g. ``deepspeed``."""
    extra: str
    """The extra of ``lightning-presets`` that installs it, e.g. ``deepspeed``."""

    @property
    def install_command(self) -> str:
        return f"pip install 'lightning-presets[{self.extra}]'"

    def is_installed(self) -> bool:
        return importlib.util.find_spec(self.module) is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class Preset:
    """A named, guarded strategy configuration for the Trainer and/or Fabric.

    Declared once, namespace-agnostic: ``strategy`` names the Lightning class per kind and the
    bridge resolves it in each of the four namespaces. Published through the entry-point group
    ``lightning_presets.strategies``.
    """

    name: str
    """Lower-case name users pass as ``strategy=``."""
    description: str
    """One or two lines: what it is for."""
    family: str
    """``fsdp``, ``model_parallel``, ``ddp``, ``deepspeed``, ``xla`` or a third party's own."""
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
    tested_with: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Versions its tests ran on and the evidence level reached, e.g. ``{"lightning": "2.6.6", "torch": "2.13.0",
    "evidence": "runtime (CPU, gloo, 2 processes)"}``; ``show`` prints it."""
    distribution: str | None = None
    """The distribution that published it (set when loaded from an entry point)."""
    version: str | None = None
    """That distribution's version."""

    @property
    def kinds(self) -> tuple[Kind, ...]:
        return tuple(kind for kind in ("trainer", "fabric") if kind in self.strategy)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(namespace.target for namespace in NAMESPACES if namespace.kind in self.strategy)

    def rules_of(self, stage: str) -> tuple[Rule, ...]:
        return tuple(each for each in self.rules if each.stage == stage)
