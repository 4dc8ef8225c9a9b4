"""The four Lightning namespaces a preset registers into, and what differs between them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["trainer", "fabric"]
"""Whose class tree a namespace holds: the Trainer's or Fabric's (the one word for that axis inside the package)."""
Target = Literal["trainer", "fabric", "pytorch_lightning", "lightning_fabric"]
"""A namespace as the public ``target=`` argument names it (two per :data:`Kind`)."""


def constructor(kind: str) -> str:
    """``Trainer`` or ``Fabric``: the class a user of ``kind`` constructs, as messages write it
    (``Trainer(strategy=...)``)."""
    return "Trainer" if kind == "trainer" else "Fabric"


@dataclass(frozen=True, slots=True)
class Namespace:
    """One Lightning namespace: the ``target=`` that names it, its kind, its package and its strategy registry."""

    target: Target
    """The value of ``target=`` in :func:`lightning_presets.strategy`."""
    kind: Kind
    """``"trainer"`` for the Trainer's class tree, ``"fabric"`` for Fabric's."""
    package: str
    """The importable package, e.g. ``lightning.pytorch``."""
    registry_attr: str
    """The registry's name inside ``<package>.strategies``."""

    @property
    def constructor(self) -> str:
        """``Trainer`` or ``Fabric``: :attr:`kind` as messages write it (:func:`constructor`)."""
        return constructor(self.kind)

    @property
    def strategies_module(self) -> str:
        return f"{self.package}.strategies"


NAMESPACES: tuple[Namespace, ...] = (
    Namespace("trainer", "trainer", "lightning.pytorch", "StrategyRegistry"),
    Namespace("fabric", "fabric", "lightning.fabric", "STRATEGY_REGISTRY"),
    Namespace("pytorch_lightning", "trainer", "pytorch_lightning", "StrategyRegistry"),
    Namespace("lightning_fabric", "fabric", "lightning_fabric", "STRATEGY_REGISTRY"),
)
TARGETS: tuple[str, ...] = tuple(namespace.target for namespace in NAMESPACES)


def namespace_for_target(target: str) -> Namespace:
    for namespace in NAMESPACES:
        if namespace.target == target:
            return namespace
    raise ValueError(f"target={target!r} is not one of {', '.join(map(repr, TARGETS))}")


def namespace_for_module(module_name: str) -> Namespace | None:
    for namespace in NAMESPACES:
        if namespace.strategies_module == module_name:
            return namespace
    return None


def fabric_package(namespace: Namespace) -> str:
    """The Fabric package that goes with a namespace (precision and accelerator classes live there)."""
    return (
        "lightning_fabric"
        if namespace.package.startswith(("pytorch_lightning", "lightning_fabric"))
        else ("lightning.fabric")
    )
