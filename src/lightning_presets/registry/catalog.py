"""Loading presets from entry points: provenance, trust filters, name checks, broken plugins."""

from __future__ import annotations

import dataclasses
import difflib
import re
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any, Generic, Literal, TypeVar

from lightning_presets.core.environment import (
    ALLOW_VARIABLE,
    DENY_VARIABLE,
    distribution_names,
    normalize_distribution,
)
from lightning_presets.core.findings import Finding, PresetConfigError, PresetWarning
from lightning_presets.core.preset import PRECISION, STRATEGY, PrecisionPreset, Preset

STRATEGY_GROUP = STRATEGY.group
PRECISION_GROUP = PRECISION.group
OWN_DISTRIBUTION = "lightning-presets"

# Names Lightning 2.6 registers itself, in either registry (plus "auto"). A preset may not take them.
LIGHTNING_BUILTIN_NAMES = frozenset(
    {
        "auto", "ddp", "ddp_find_unused_parameters_false", "ddp_find_unused_parameters_true",
        "ddp_fork", "ddp_fork_find_unused_parameters_false", "ddp_fork_find_unused_parameters_true",
        "ddp_notebook", "ddp_notebook_find_unused_parameters_false",
        "ddp_notebook_find_unused_parameters_true", "ddp_spawn",
        "ddp_spawn_find_unused_parameters_false", "ddp_spawn_find_unused_parameters_true",
        "deepspeed", "deepspeed_stage_1", "deepspeed_stage_1_offload", "deepspeed_stage_2",
        "deepspeed_stage_2_offload", "deepspeed_stage_3", "deepspeed_stage_3_offload",
        "deepspeed_stage_3_offload_nvme", "dp", "fsdp", "fsdp_cpu_offload", "single_device",
        "single_tpu", "single_xla", "xla", "xla_debug", "xla_fsdp",
    }
)  # fmt: skip
_NAME = re.compile(r"[a-z][a-z0-9_\-]*")

Status = Literal["ok", "broken", "conflict", "refused", "denied"]
T = TypeVar("T", bound=Preset | PrecisionPreset)


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


def trust_status(distribution: str) -> Status:
    """``denied`` when ``LIGHTNING_PRESETS_DENY`` names it or an ``ALLOW`` list leaves it out."""
    name = normalize_distribution(distribution)
    if name in distribution_names(DENY_VARIABLE):
        return "denied"
    allow = distribution_names(ALLOW_VARIABLE)
    if allow and name not in allow and name != OWN_DISTRIBUTION:
        return "denied"
    return "ok"


def _entry_points(group: str) -> Iterator[metadata.EntryPoint]:
    seen = set()
    for entry_point in metadata.entry_points(group=group):
        dist = entry_point.dist
        key = (
            normalize_distribution(dist.metadata["Name"]) if dist else "",
            entry_point.name,
            entry_point.value,
        )
        if key not in seen:
            seen.add(key)
            yield entry_point


def _distribution_of(entry_point: metadata.EntryPoint) -> tuple[str, str]:
    dist = entry_point.dist
    if dist is None:
        return "unknown", "unknown"
    return str(dist.metadata["Name"]), str(dist.version)


def _suggest_name(name: str) -> str:
    return re.sub(r"[^a-z0-9_-]", "_", name.lower())


def _finding(code: str, message: str, hint: str) -> Finding:
    return Finding(code=code, severity="error", message=message, hint=hint)


def _load_one(entry_point: metadata.EntryPoint, kind: type[T]) -> Entry[T]:
    noun = kind.TYPE.noun
    distribution, version = _distribution_of(entry_point)
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
    try:
        loaded: Any = entry_point.load()
        item = loaded if isinstance(loaded, kind) or not callable(loaded) else loaded()
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        finding = _finding(
            "LP004",
            f"{where} failed to load: {type(exc).__name__}: {first_line}",
            f"fix or upgrade {distribution}, or skip it with LIGHTNING_PRESETS_DENY={distribution}",
        )
        return Entry(**base, status="broken", findings=(finding,))
    if not isinstance(item, kind):
        finding = _finding(
            "LP005",
            f"{where} gave a {type(item).__name__}, not a {kind.__name__}",
            f"point the entry point at a lightning_presets.{kind.__name__} (or a function returning one); "
            f"skip it meanwhile with LIGHTNING_PRESETS_DENY={distribution}",
        )
        return Entry(**base, status="broken", findings=(finding,))
    item_name = getattr(item, "name", entry_point.name)
    if item_name != entry_point.name:
        finding = _finding(
            "LP009",
            f"{where} names its {noun} {item_name!r}, but the entry point is called {entry_point.name!r}",
            f"use one name in both places: call the entry point {item_name!r} in {distribution}'s entry points",
        )
        return Entry(**base, status="refused", findings=(finding,))
    if not _NAME.fullmatch(item_name):
        finding = _finding(
            "LP001",
            f"{noun} name {item_name!r} from {distribution} {version} is not lower-case letters, digits, '_' or '-'; "
            f"Lightning lower-cases strategy names before lookup, so {item_name!r} could never be selected",
            f"rename it to {_suggest_name(item_name)!r} in {distribution}'s entry points",
        )
        return Entry(**base, status="refused", findings=(finding,))
    if kind.TYPE is STRATEGY and item_name in LIGHTNING_BUILTIN_NAMES:
        finding = _finding(
            "LP002",
            f"strategy preset {item_name!r} from {distribution} {version} takes the name of a Lightning built-in "
            "strategy; it is not registered and Lightning's own keeps the name",
            f"rename it in {distribution}, e.g. {(distribution.replace('-', '_') + '_' + item_name)!r}",
        )
        return Entry(**base, status="refused", findings=(finding,))
    item = dataclasses.replace(item, distribution=distribution, version=version)
    return Entry(**base, status="ok", item=item)


def _conflict(name: str, claimants: list[Entry[T]], noun: str) -> Finding:
    """One finding per contested name, identical for every claimant (so it is reported once)."""
    owners = sorted({f"{e.distribution} {e.version}" for e in claimants})
    ours = any(normalize_distribution(e.distribution) == OWN_DISTRIBUTION for e in claimants)
    others = sorted({e.distribution for e in claimants if normalize_distribution(e.distribution) != OWN_DISTRIBUTION})
    return _finding(
        "LP003",
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
        result.append(dataclasses.replace(entry, status="ok" if keeps else "conflict", findings=(finding,)))
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


def load(kind: type[T]) -> Catalog[T]:
    """Load the group of a preset type: ours first, then third parties by distribution name; warn about each bad
    entry."""
    group, noun = kind.TYPE.group, kind.TYPE.noun
    loaded = [_load_one(entry_point, kind) for entry_point in _entry_points(group)]
    loaded.sort(key=lambda e: (normalize_distribution(e.distribution) != OWN_DISTRIBUTION, e.distribution, e.name))
    catalog = Catalog(_resolve_duplicates(loaded, noun))
    for finding in catalog.findings:
        warnings.warn(PresetWarning(finding), stacklevel=2)
    return catalog


_lock = threading.RLock()
_cache: dict[str, Catalog[Any]] = {}
_loading: set[str] = set()
_thread = threading.local()


def cached(group: str, loader: Callable[[], Catalog[T]]) -> Catalog[T]:
    """Load a group once per process (thread-safe; a use from inside its own loading is an error, not a hang)."""
    with _lock:
        if group not in _cache:
            if group in _loading:
                raise RuntimeError(
                    f"the {group} catalog was used while it was being loaded: a preset module must not "
                    "look presets up when it is imported"
                )
            _loading.add(group)
            _thread.depth = getattr(_thread, "depth", 0) + 1
            try:
                _cache[group] = loader()
            finally:
                _loading.discard(group)
                _thread.depth -= 1
        result = _cache[group]
    _run_deferred()
    return result


def catalog(kind: type[T]) -> Catalog[T]:
    """The presets of one type (``Preset`` or ``PrecisionPreset``) from every trusted distribution, loaded once."""
    return cached(kind.TYPE.group, lambda: load(kind))


def strategy_catalog() -> Catalog[Preset]:
    return catalog(Preset)


def precision_catalog() -> Catalog[PrecisionPreset]:
    return catalog(PrecisionPreset)


def unknown_name(name: str, available: list[str], noun: str) -> PresetConfigError:
    """LP010, with the closest names and every name that exists."""
    close = difflib.get_close_matches(name, available, n=3)
    maybe = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    return PresetConfigError(
        [
            Finding(
                code="LP010",
                severity="error",
                message=f"`lightning_presets.{noun}({name!r})`: no {noun} preset is called {name!r}",
                hint=f"{maybe}available: {', '.join(available) or 'none'} (`lightning-presets list` shows all)",
            )
        ]
    )


def get(kind: type[T], name: str) -> T:
    """The usable preset of a type called ``name``; an unknown or unusable name raises :class:`PresetConfigError`."""
    loaded = catalog(kind)
    if name in loaded.presets:
        return loaded.presets[name]
    entry = loaded.entry(name)
    if entry is not None and entry.findings:
        raise PresetConfigError(list(entry.findings))
    raise unknown_name(name, sorted(loaded.presets), kind.TYPE.noun)


_deferred: list[Callable[[], None]] = []


def loading_in_this_thread() -> bool:
    """Whether this thread is inside a catalog load (a preset module being imported)."""
    return getattr(_thread, "depth", 0) > 0


def after_loading(work: Callable[[], None]) -> None:
    """Run ``work`` now, or once the catalog this thread is loading is loaded.

    A preset module that imports Lightning makes the start-up hook register presets while the catalog is
    being loaded; that registration waits for the catalog instead of waiting on its lock.
    """
    if not loading_in_this_thread():
        work()
        return
    with _lock:
        _deferred.append(work)


def _run_deferred() -> None:
    if loading_in_this_thread():
        return
    with _lock:
        pending = list(_deferred)
        _deferred.clear()
    for work in pending:
        work()


def clear_cache() -> None:
    """Forget loaded catalogs, so the next use reads entry points and the trust variables again.

    Registries filled earlier keep the factories they got (registration never overrides); this is for
    tests and tools that read the catalog, not a way to reload presets into a running Lightning.
    """
    with _lock:
        _cache.clear()
