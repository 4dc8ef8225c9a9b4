"""Entry-point scanning: every entry point of a group once, and the name and version of the distribution behind each.

One distribution whose metadata cannot be read costs only itself (:class:`Unreadable`); each distribution's
``METADATA`` is parsed once per cache (:func:`clear` forgets them).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata

from lightning_presets.core.environment import normalize_distribution

OWN_DISTRIBUTION = "lightning-presets"


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An installed distribution whose entry points could not be read (broken metadata): reported, skipped."""

    where: str
    error: str


def entry_points(group: str) -> Iterator[metadata.EntryPoint | Unreadable]:
    """Every entry point of the group, once; one unreadable distribution costs only itself."""
    try:
        found: list[metadata.EntryPoint | Unreadable] = list(metadata.entry_points(group=group))
    except Exception:  # the standard scan stops at the first distribution it cannot name: one by one instead
        found = list(_one_by_one(group))
    seen = set()
    for entry_point in found:
        if isinstance(entry_point, Unreadable):
            yield entry_point
            continue
        key = (distribution_of(entry_point)[0], entry_point.name, entry_point.value)
        if key not in seen:
            seen.add(key)
            yield entry_point


def _one_by_one(group: str) -> Iterator[metadata.EntryPoint | Unreadable]:
    names = set()
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
            key = normalize_distribution(name) if isinstance(name, str) else location(dist)
            if key in names:  # the first one on sys.path wins, as importlib.metadata.entry_points() decides
                continue
            names.add(key)
            selected = list(dist.entry_points.select(group=group))
        except Exception as error:
            yield Unreadable(location(dist), f"{type(error).__name__}: {error}")
            continue
        yield from selected


def location(dist: metadata.Distribution) -> str:
    """Where a distribution's metadata lies."""
    # PathDistribution keeps it in `_path` (there is no public name for it).
    return str(getattr(dist, "_path", None) or dist)


_about: dict[str, tuple[str, str]] = {}
"""(name, version) by where a distribution's metadata lies: each METADATA is parsed once per cache."""


def distribution_of(entry_point: metadata.EntryPoint) -> tuple[str, str]:
    """(name, version) of the entry point's distribution; the name is ``""`` when its metadata has none."""
    dist = entry_point.dist
    if dist is None:
        return "unknown", "unknown"
    where = location(dist)
    found = _about.get(where)
    if found is None:
        try:
            about = dist.metadata  # parsed once: `dist.version` would parse it again
            name, version = about["Name"], about["Version"]
            found = (name.strip() if isinstance(name, str) else ""), str(version)
        except Exception:  # unreadable metadata: reported as a distribution without a name
            found = "", "unknown"
        _about[where] = found
    return found


def is_own(entry_point: metadata.EntryPoint | Unreadable) -> bool:
    """Whether the entry point is one of lightning-presets' own."""
    return not isinstance(entry_point, Unreadable) and (
        normalize_distribution(distribution_of(entry_point)[0]) == OWN_DISTRIBUTION
    )


def clear() -> None:
    """Forget the distributions' names and versions read so far."""
    _about.clear()
