"""The four Lightning namespaces a preset registers into, and what differs between them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Kind = Literal["trainer", "fabric"]
Target = Literal["trainer", "fabric", "pytorch_lightning", "lightning_fabric"]


@dataclass(frozen=True, slots=True)
class Namespace:
    """One Lightning namespace: its package, its strategy registry and who calls it."""

    target: Target
    """The value of ``target=`` in :func:`lightning_presets.strategy`."""
    kind: Kind
    """``"trainer"`` for the Trainer's class tree, ``"fabric"`` for Fabric's."""
    package: str
    """The importable package, e.g. ``lightning.pytorch``."""
    registry_attr: str
    """The registry's name inside ``<package>.strategies``."""
    caller: str
    """How users construct it: ``Trainer`` or ``Fabric``."""

    @property
    def strategies_module(self) -> str:
        return f"{self.package}.strategies"


NAMESPACES: tuple[Namespace, ...] = (
    Namespace("trainer", "trainer", "lightning.pytorch", "StrategyRegistry", "Trainer"),
    Namespace("fabric", "fabric", "lightning.fabric", "STRATEGY_REGISTRY", "Fabric"),
    Namespace("pytorch_lightning", "trainer", "pytorch_lightning", "StrategyRegistry", "Trainer"),
    Namespace("lightning_fabric", "fabric", "lightning_fabric", "STRATEGY_REGISTRY", "Fabric"),
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
