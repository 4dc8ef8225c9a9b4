"""Loading presets from entry points: provenance, name checks, broken plugins; the catalog of each preset type.

Loading a third party's entry point runs its code inside every ``import lightning``. Whatever it does costs
only that entry: an exception of any kind but ``KeyboardInterrupt`` (``SystemExit`` included), a malformed
preset, a distribution with broken metadata, output on stdout (sent to stderr), a read of stdin (it reads nothing:
stdin is detached while entry points load) or a slow import (named on stderr while it lasts). Each becomes a
finding on its entry, warned once and never raised. An entry point's object is called only when it is a preset
factory (a plain function that takes no argument); a class or any other callable is never called.

Our own entries load first, under a lock of their own: they import torch but never Lightning or a third party's
code, so the start-up hook can always wait for them and the built-in names are registered before ``import
lightning`` returns, whatever another thread is loading.

The concerns beside this module: scanning entry points and their distributions
(:mod:`~lightning_presets.registry.entry_points`), trust (:mod:`~lightning_presets.registry.trust`), the watchdog
and warnings (:mod:`~lightning_presets.registry.watch`), names and Lightning's own
(:mod:`~lightning_presets.registry.names`), caches, locks and deferred registrations
(:mod:`~lightning_presets.registry.loading`). Their public names are importable from here too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import io
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, Literal, TypeVar

from lightning_presets.core.environment import normalize_distribution
from lightning_presets.core.findings import Finding, PresetConfigError
from lightning_presets.core.preset import STRATEGY, PrecisionPreset, Preset
from lightning_presets.core.rules import error_text, record_origin
from lightning_presets.registry import codes, loading
from lightning_presets.registry.entry_points import (
    OWN_DISTRIBUTION,
    Unreadable,
    distribution_of,
    is_own,
    location,
)
from lightning_presets.registry.entry_points import entry_points as _entry_points
from lightning_presets.registry.loading import (
    after_loading,
    cached,
    clear_cache,
    loading_in_this_thread,
)
from lightning_presets.registry.names import (
    is_valid_name,
    lightning_builtin_names,
    suggested_name,
    unknown_name,
)
from lightning_presets.registry.trust import denied, trust_key, trust_status
from lightning_presets.registry.validation import malformed
from lightning_presets.registry.watch import Watch, notify, say

__all__ = [
    "OWN_DISTRIBUTION",
    "SLOW_SECONDS",
    "STRATEGY_GROUP",
    "Catalog",
    "Entry",
    "Status",
    "Unreadable",
    "after_loading",
    "builtin_entries",
    "cached",
    "catalog",
    "clear_cache",
    "denied",
    "get",
    "is_valid_name",
    "lightning_builtin_names",
    "load",
    "loading_in_this_thread",
    "notify",
    "precision_catalog",
    "say",
    "strategy_catalog",
    "suggested_name",
    "trust_status",
    "unknown_name",
]

STRATEGY_GROUP = STRATEGY.group

SLOW_SECONDS = 10.0
"""An entry point that takes longer than this to load is named on stderr while it loads, and warned about (LP014)."""

Status = Literal["ok", "broken", "conflict", "refused", "denied", "missing"]
"""``missing``: loaded, but an optional dependency it needs is not installed (set by ``list``/``show``/``doctor``)."""
T = TypeVar("T", bound=Preset | PrecisionPreset)

# The caches' objects under the names the tests reach them by (the same objects: never rebound).
_cache = loading.cache
_lock = loading.lock
_thread = loading.thread
_deferred = loading.deferred
_run_deferred = loading.run_deferred


@dataclass(frozen=True, slots=True, kw_only=True)
class Entry(Generic[T]):
    """One entry point of a catalog group, loaded or not, with where it came from."""

    name: str
    distribution: str
    version: str
    value: str
    """The entry point's ``module:attr``."""
    status: Status
    item: T | None = None
    findings: tuple[Finding, ...] = ()


def _unnamed(entry_point: metadata.EntryPoint | Unreadable, group: str) -> Entry[Any]:
    """LP013: an entry point of a distribution whose metadata has no name (or cannot be read at all)."""
    if isinstance(entry_point, Unreadable):
        where, what, name, value = entry_point.where, f"cannot be read ({entry_point.error})", "?", "?"
    else:
        dist = entry_point.dist
        where = location(dist) if dist is not None else "?"
        what, name, value = "has no Name", entry_point.name, entry_point.value
    finding = codes.NAMELESS_DISTRIBUTION.finding(
        f"the installed distribution at {where} {what}: its {group} entry points are skipped, the other "
        "distributions' presets load as usual",
        f"reinstall that distribution (pip install --force-reinstall NAME) or delete {where}",
    )
    return Entry(name=name, distribution=f"<{where}>", version="unknown", value=value, status="broken",
                 findings=(finding,))  # fmt: skip


def _is_factory(loaded: Any) -> bool:
    """A plain Python function that takes no argument (a lambda included): what may make a preset when called.

    Nothing else is ever called: a builtin (``builtins:input``), a class (it would be instantiated), a callable
    object, a coroutine or generator function, or a function that needs arguments.
    """
    if not inspect.isfunction(loaded) or inspect.iscoroutinefunction(loaded) or inspect.isgeneratorfunction(loaded):
        return False
    if inspect.isasyncgenfunction(loaded):
        return False
    try:
        inspect.signature(loaded).bind()
    except (TypeError, ValueError):
        return False
    return True


@contextlib.contextmanager
def _detached() -> Iterator[None]:
    """While entry points load: what they print goes to stderr, and stdin is empty (the program's stays unread)."""
    saved = sys.stdin
    with contextlib.redirect_stdout(sys.stderr):
        sys.stdin = io.StringIO()
        try:
            yield
        finally:
            sys.stdin = saved


def _imported(entry_point: metadata.EntryPoint, kind: type[T]) -> Any:
    """The entry point's object, called when it is a preset factory; loaded with stdin detached and stdout on
    stderr."""
    with _detached():
        loaded: Any = entry_point.load()
        return loaded() if _is_factory(loaded) else loaded


def _load_one(
    entry_point: metadata.EntryPoint | Unreadable,
    kind: type[T],
    watch: Watch,
    reserved: Callable[[], frozenset[str]],
) -> Entry[T]:
    """One entry point loaded and checked; ``reserved()``: the names Lightning holds (read only when needed)."""
    noun, group = kind.TYPE.noun, kind.TYPE.group
    if isinstance(entry_point, Unreadable):
        return _unnamed(entry_point, group)
    distribution, version = distribution_of(entry_point)
    if not distribution:
        return _unnamed(entry_point, group)
    where = f"{noun} entry point {entry_point.name!r} = {entry_point.value!r} from {distribution} {version}"
    base: dict[str, Any] = {
        "name": entry_point.name,
        "distribution": distribution,
        "version": version,
        "value": entry_point.value,
    }
    status = trust_status(distribution)
    if status == "denied":
        return Entry(**base, status="denied")
    started = time.monotonic()
    watch.current = (where, started)
    try:
        item = _imported(entry_point, kind)
    except KeyboardInterrupt:
        raise
    except BaseException as exc:  # SystemExit from an argparse call at its top included: only this entry is lost
        finding = codes.ENTRY_POINT_FAILED.finding(
            f"{where} failed to load: {error_text(exc)}",
            f"fix or upgrade {distribution}, or skip it with LIGHTNING_PRESETS_DENY={distribution}",
        )
        return Entry(**base, status="broken", findings=(finding,))
    finally:
        watch.current = None
    seconds = time.monotonic() - started
    slow = (
        (codes.SLOW_ENTRY_POINT.finding(
            f"{where} took {seconds:.1f} s to load (every process that imports Lightning waits for it)",
            f"ask {distribution} to import less at the top of its preset module, or skip it with "
            f"LIGHTNING_PRESETS_DENY={distribution}",
        ),)
        if seconds >= watch.seconds else ()
    )  # fmt: skip
    if not isinstance(item, kind):
        what = f"the class {item.__name__}" if isinstance(item, type) else f"a {type(item).__name__}"
        finding = codes.NOT_A_PRESET.finding(
            f"{where} gave {what}, not a {kind.__name__} (only a function that takes no argument is called)",
            f"point the entry point at a lightning_presets.{kind.__name__} (or a function returning one); "
            f"skip it meanwhile with LIGHTNING_PRESETS_DENY={distribution}",
        )
        return Entry(**base, status="broken", findings=(finding, *slow))
    item_name = getattr(item, "name", entry_point.name)
    if item_name != entry_point.name:
        finding = codes.ENTRY_POINT_MISNAMED.finding(
            f"{where} names its {noun} {item_name!r}, but the entry point is called {entry_point.name!r}",
            f"use one name in both places: call the entry point {item_name!r} in {distribution}'s entry points",
        )
        return Entry(**base, status="refused", findings=(finding, *slow))
    if not is_valid_name(item_name):
        finding = codes.NAME_NOT_LOWER_CASE.finding(
            f"{noun} name {item_name!r} from {distribution} {version} is not lower-case letters, digits, '_' or '-'; "
            f"Lightning lower-cases strategy names before lookup, so {item_name!r} could never be selected",
            f"rename it to {suggested_name(str(item_name), distribution)!r} in {distribution}'s entry points",
        )
        return Entry(**base, status="refused", findings=(finding, *slow))
    if kind.TYPE is STRATEGY and item_name in reserved():
        finding = codes.NAME_OF_LIGHTNING.finding(
            f"strategy preset {item_name!r} from {distribution} {version} takes the name of a Lightning built-in "
            "strategy; it is not registered and Lightning's own keeps the name",
            f"rename it in {distribution}, e.g. {suggested_name(item_name, distribution)!r}",
        )
        return Entry(**base, status="refused", findings=(finding, *slow))
    problems = malformed(item)
    if problems:
        finding = codes.MALFORMED_PRESET.finding(
            f"{noun} preset {item_name!r} from {distribution} {version} is malformed: {'; '.join(problems)}",
            f"fix the preset in {distribution}; skip it meanwhile with LIGHTNING_PRESETS_DENY={distribution}",
        )
        return Entry(**base, status="broken", findings=(finding, *slow))
    item = dataclasses.replace(item, distribution=distribution, version=version)
    return Entry(**base, status="ok", item=item, findings=slow)


def _conflict(name: str, claimants: list[Entry[T]], noun: str) -> Finding:
    """One finding per contested name, identical for every claimant (so it is reported once)."""
    owners = sorted({f"{e.distribution} {e.version}" for e in claimants})
    ours = any(normalize_distribution(e.distribution) == OWN_DISTRIBUTION for e in claimants)
    others = sorted({e.distribution for e in claimants if normalize_distribution(e.distribution) != OWN_DISTRIBUTION})
    return codes.NAME_DECLARED_TWICE.finding(
        f"{noun} preset {name!r} is declared by {' and by '.join(owners)}; "
        + (f"{OWN_DISTRIBUTION}'s built-in keeps the name" if ours else "neither is registered"),
        "uninstall one of them, rename one, or choose with "
        + " or ".join(f"LIGHTNING_PRESETS_DENY={distribution}" for distribution in others),
    )


def _resolve_duplicates(entries: list[Entry[T]], noun: str) -> list[Entry[T]]:
    """A name claimed by two distributions: an error naming both. Ours keeps its name; others lose it."""
    by_name: dict[str, list[Entry[T]]] = {}
    for entry in entries:
        if entry.status == "ok":
            by_name.setdefault(entry.name, []).append(entry)
    result = []
    for entry in entries:
        rivals = [other for other in by_name.get(entry.name, []) if other.distribution != entry.distribution]
        if entry.status != "ok" or not rivals:
            result.append(entry)
            continue
        finding = _conflict(entry.name, by_name[entry.name], noun)
        keeps = normalize_distribution(entry.distribution) == OWN_DISTRIBUTION
        status: Status = "ok" if keeps else "conflict"
        result.append(dataclasses.replace(entry, status=status, findings=(finding, *entry.findings)))
    return result


class Catalog(Generic[T]):
    """Every entry point of one group, loaded once per process; ``presets`` holds the usable ones."""

    def __init__(self, entries: list[Entry[T]]) -> None:
        self.entries = tuple(entries)
        self.presets: dict[str, T] = {
            entry.name: entry.item for entry in entries if entry.status == "ok" and entry.item is not None
        }

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(dict.fromkeys(finding for entry in self.entries for finding in entry.findings))

    def entry(self, name: str) -> Entry[T] | None:
        return next((entry for entry in self.entries if entry.name == name), None)


def _all_of_lightning() -> frozenset[str]:
    return lightning_builtin_names(read_missing=True)


def load(kind: type[T]) -> Catalog[T]:
    """Load the group of a preset type: ours first, then third parties by distribution name; warn about each bad
    entry (never raising, whatever the warnings filters say)."""
    own = builtin_entries(kind)  # before any third party's code runs
    with Watch(SLOW_SECONDS) as watch:
        theirs = [each for each in _entry_points(kind.TYPE.group) if not is_own(each)]
        if theirs and kind.TYPE is STRATEGY:  # Lightning's names, for their name checks and the bridge's stand-ins
            _all_of_lightning()
        others = [_load_one(each, kind, watch, _all_of_lightning) for each in theirs]
    loaded = sorted([*own, *others], key=lambda e: (normalize_distribution(e.distribution) != OWN_DISTRIBUTION,
                                                   e.distribution, e.name))  # fmt: skip
    catalog = Catalog(_resolve_duplicates(loaded, kind.TYPE.noun))
    for entry in catalog.entries:  # ours first: a rule function a third party reuses stays ours
        for each in entry.item.rules if entry.item is not None else ():
            record_origin(each, entry.distribution, entry.version)
    for finding in catalog.findings:
        notify(finding)
    return catalog


def builtin_entries(kind: type[T]) -> tuple[Entry[T], ...]:
    """Our own entries of a preset type, loaded without any third party's code and without importing Lightning.

    Their status is final (ours keep a name another distribution also declares), so the start-up hook registers
    them before ``import lightning`` returns, even while another thread is loading third parties' entries. Their
    names are checked against the Lightning registries already imported (reading the others would import Lightning).
    """
    key = (kind.TYPE.group, *trust_key())
    with loading.own_lock:
        found = loading.own_cache.get(key)
        if found is not None:
            return found
        if getattr(loading.own_loading, "active", False):  # asked from inside one of our own preset modules: not yet
            return ()
        loading.own_loading.active = True
        try:
            with Watch(SLOW_SECONDS) as watch:
                scanned = _entry_points(kind.TYPE.group)
                reserved = functools.cache(lightning_builtin_names)  # read once, if a strategy reaches the check
                found = loading.own_cache[key] = tuple(
                    _load_one(each, kind, watch, reserved) for each in scanned if is_own(each)
                )
        finally:
            loading.own_loading.active = False
    loading.run_deferred()  # a registration asked for while our own modules loaded (none of them imports Lightning)
    return found


def catalog(kind: type[T]) -> Catalog[T]:
    """The presets of one type (``Preset`` or ``PrecisionPreset``) from every trusted distribution, loaded once."""
    return cached(kind.TYPE.group, lambda: load(kind))


def strategy_catalog() -> Catalog[Preset]:
    return catalog(Preset)


def precision_catalog() -> Catalog[PrecisionPreset]:
    return catalog(PrecisionPreset)


def get(kind: type[T], name: str) -> T:
    """The usable preset of a type called ``name``; an unknown or unusable name raises :class:`PresetConfigError`."""
    loaded = catalog(kind)
    if name in loaded.presets:
        return loaded.presets[name]
    entry = loaded.entry(name)
    if entry is not None and entry.status == "denied":
        raise PresetConfigError([denied(entry, kind.TYPE.noun)])
    if entry is not None and entry.findings:
        raise PresetConfigError(list(entry.findings))
    raise unknown_name(name, sorted(loaded.presets), kind.TYPE.noun)
