"""The catalogs ``list`` and ``show`` read: strategy presets and, when installed, precision presets."""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.environment import normalize_distribution
from lightning_presets.core.namespaces import NAMESPACES
from lightning_presets.registry import catalog
from lightning_presets.registry.catalog import Entry
from lightning_presets.registry.classes import unresolved


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
    """Every entry of both groups, loaded or not (broken, refused, conflicting and denied ones included).

    A third party's usable entry is also checked against Lightning: a class that does not resolve marks it
    broken (LP011) here, as it would fail in ``Trainer(...)``. The built-ins' classes are checked by our tests,
    so ``list`` imports Lightning only when a third-party preset needs it.
    """
    with warnings.catch_warnings():  # the listing shows each problem; no need to warn as well
        warnings.simplefilter("ignore")
        listed = [Listed("strategy", _checked(entry)) for entry in catalog.strategy_catalog().entries]
        listed += [Listed("precision", _checked(entry)) for entry in catalog.precision_catalog().entries]
    return listed


def usable(kind: str = "strategy") -> dict[str, Any]:
    """The presets of a kind that are usable after the checks of :func:`all_entries`, by name."""
    return {each.entry.name: each.item for each in all_entries() if each.kind == kind and each.entry.status == "ok"}


def _checked(entry: Entry[Any]) -> Entry[Any]:
    item = entry.item
    if entry.status != "ok" or item is None or normalize_distribution(entry.distribution) == catalog.OWN_DISTRIBUTION:
        return entry
    found = []
    for kind in item.kinds:
        namespace = next((ns for ns in NAMESPACES if ns.kind == kind and _installed(ns.package)), None)
        try:
            finding = unresolved(item, namespace) if namespace is not None else None
        except Exception:  # Lightning itself does not import: `doctor` reports that, not this preset
            finding = None
        if finding is not None:
            found.append(finding)
    if not found:
        return entry
    return dataclasses.replace(entry, status="broken", findings=(*entry.findings, *found))


def _installed(package: str) -> bool:
    try:
        return importlib.util.find_spec(package.partition(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def find(name: str) -> Listed | None:
    return next((each for each in all_entries() if each.entry.name == name), None)
