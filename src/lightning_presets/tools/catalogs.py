"""The catalogs ``list`` and ``show`` read: strategy presets and, when installed, precision presets."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

from lightning_presets.registry import catalog


@dataclass(frozen=True, slots=True)
class Listed:
    """One catalog entry as the commands show it."""

    kind: str
    """``strategy`` or ``precision``."""
    entry: Any
    """The catalog's :class:`~lightning_presets._catalog.Entry`."""

    @property
    def item(self) -> Any:
        return self.entry.item

    def as_dict(self) -> dict[str, Any]:
        item = self.item
        requires = getattr(item, "requires", ()) or ()
        return {
            "name": self.entry.name,
            "kind": self.kind,
            "family": getattr(item, "family", None),
            "targets": list(getattr(item, "targets", ()) or ()),
            "extras": sorted({requirement.extra for requirement in requires}),
            "description": getattr(item, "description", None),
            "distribution": self.entry.distribution,
            "version": self.entry.version,
            "entry_point": self.entry.value,
            "status": self.entry.status,
            "findings": [finding.as_dict() for finding in self.entry.findings],
        }


def all_entries() -> list[Listed]:
    """Every entry of both groups, loaded or not (broken, refused, conflicting and denied ones included)."""
    with warnings.catch_warnings():  # the listing shows each problem; no need to warn as well
        warnings.simplefilter("ignore")
        listed = [Listed("strategy", entry) for entry in catalog.strategy_catalog().entries]
        listed += [Listed("precision", entry) for entry in catalog.precision_catalog().entries]
    return listed


def find(name: str) -> Listed | None:
    return next((each for each in all_entries() if each.entry.name == name), None)
