"""Loading presets from entry points: provenance, trust filters, name checks, broken plugins.

Loading a third party's entry point runs its code inside every ``import lightning``. Whatever it does costs
only that entry: an exception of any kind but ``KeyboardInterrupt`` (``SystemExit`` included), a malformed
preset, a distribution with broken metadata, output on stdout (sent to stderr), a read of stdin (it reads nothing:
stdin is detached while entry points load) or a slow import (named on stderr while it lasts). Each becomes a
finding on its entry, warned once and never raised. An entry point's object is called only when it is a preset
factory (a plain function that takes no argument); a class or any other callable is never called.

Our own entries load first, under a lock of their own: they import torch but never Lightning or a third party's
code, so the start-up hook can always wait for them and the built-in names are registered before ``import
lightning`` returns, whatever another thread is loading.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import inspect
import io
import os
import re
import sys
import threading
import time
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
from lightning_presets.core.preset import STRATEGY, PrecisionPreset, Preset
from lightning_presets.core.rules import error_text, record_origin
from lightning_presets.registry import codes
from lightning_presets.registry.validation import malformed

STRATEGY_GROUP = STRATEGY.group
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


@dataclass(frozen=True, slots=True)
class Unreadable:
    """An installed distribution whose entry points could not be read (broken metadata): reported, skipped."""

    where: str
    error: str


def _entry_points(group: str) -> Iterator[metadata.EntryPoint | Unreadable]:
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
        key = (_distribution_of(entry_point)[0], entry_point.name, entry_point.value)
        if key not in seen:
            seen.add(key)
            yield entry_point


def _one_by_one(group: str) -> Iterator[metadata.EntryPoint | Unreadable]:
    names = set()
    for dist in metadata.distributions():
        try:
            name = dist.metadata["Name"]
            key = normalize_distribution(name) if isinstance(name, str) else _location(dist)
            if key in names:  # the first one on sys.path wins, as importlib.metadata.entry_points() decides
                continue
            names.add(key)
            selected = list(dist.entry_points.select(group=group))
        except Exception as error:
            yield Unreadable(_location(dist), f"{type(error).__name__}: {error}")
            continue
        yield from selected


def _location(dist: metadata.Distribution) -> str:
    # Where a distribution's metadata lies; PathDistribution keeps it in `_path` (there is no public name for it).
    return str(getattr(dist, "_path", None) or dist)


_about: dict[str, tuple[str, str]] = {}
"""(name, version) by where a distribution's metadata lies: each METADATA is parsed once per cache."""


def _distribution_of(entry_point: metadata.EntryPoint) -> tuple[str, str]:
    """(name, version) of the entry point's distribution; the name is ``""`` when its metadata has none."""
    dist = entry_point.dist
    if dist is None:
        return "unknown", "unknown"
    where = _location(dist)
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


def is_valid_name(name: object) -> bool:
    """Whether ``name`` can be a preset name: lower-case letters, digits, ``_`` or ``-``, starting with a letter."""
    return isinstance(name, str) and _NAME.fullmatch(name) is not None


def suggested_name(name: str, distribution: str) -> str:
    """A valid preset name close to ``name`` that is not Lightning's, prefixed by the distribution when needed."""
    cleaned = re.sub(r"[^a-z0-9_-]+", "_", name.lower()).strip("_-")
    prefix = re.sub(r"[^a-z0-9]+", "_", normalize_distribution(distribution)).strip("_")
    if not prefix or not prefix[0].isalpha():
        prefix = "team"
    if is_valid_name(cleaned) and cleaned not in LIGHTNING_BUILTIN_NAMES:
        return cleaned
    return f"{prefix}_{cleaned}" if cleaned else f"{prefix}_preset"


def _unnamed(entry_point: metadata.EntryPoint | Unreadable, group: str) -> Entry[Any]:
    """LP013: an entry point of a distribution whose metadata has no name (or cannot be read at all)."""
    if isinstance(entry_point, Unreadable):
        where, what, name, value = entry_point.where, f"cannot be read ({entry_point.error})", "?", "?"
    else:
        dist = entry_point.dist
        where = _location(dist) if dist is not None else "?"
        what, name, value = "has no Name", entry_point.name, entry_point.value
    finding = codes.NAMELESS_DISTRIBUTION.finding(
        f"the installed distribution at {where} {what}: its {group} entry points are skipped, the other "
        "distributions' presets load as usual",
        f"reinstall that distribution (pip install --force-reinstall NAME) or delete {where}",
    )
    return Entry(name=name, distribution=f"<{where}>", version="unknown", value=value, status="broken",
                 findings=(finding,))  # fmt: skip


SLOW_SECONDS = 10.0
"""An entry point that takes longer than this to load is named on stderr while it loads, and warned about (LP014)."""


class _Watch:
    """Names, on stderr, the entry point a load is stuck in once it has taken :data:`SLOW_SECONDS`.

    One daemon thread per catalog load, sleeping until the load ends: a plugin that sleeps, hangs on the network
    or waits on a lock at import is named while ``import lightning`` waits for it.
    """

    def __init__(self) -> None:
        self.current: tuple[str, float] | None = None
        self.done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> _Watch:
        thread = threading.Thread(target=self._run, name="lightning-presets-slow-plugin", daemon=True)
        with contextlib.suppress(RuntimeError):  # no new thread at interpreter shutdown: load without the watch
            thread.start()
            self._thread = thread
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()

    def _run(self) -> None:
        named = None
        while not self.done.wait(min(SLOW_SECONDS, 1.0)):
            current = self.current
            if current is not None and current != named and time.monotonic() - current[1] >= SLOW_SECONDS:
                named = current
                say(f"lightning-presets: still loading {current[0]} after {SLOW_SECONDS:g} s; "
                    "LIGHTNING_PRESETS_DENY skips a distribution")  # fmt: skip


def say(text: str) -> None:
    """Write one line to stderr, if there is one (never raises)."""
    with contextlib.suppress(Exception):
        if sys.stderr is not None:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()


def notify(finding: Finding, stacklevel: int = 2) -> None:
    """Warn about a catalog or registration finding without ever raising.

    Under ``-W error`` (or ``filterwarnings("error", category=PresetWarning)``) the warning would become an
    exception inside ``import lightning``; then it is written to stderr instead, so a broken third-party
    preset costs only that preset whatever the warnings filters say.
    """
    try:
        warnings.warn(PresetWarning(finding), stacklevel=stacklevel + 1)
    except Exception:  # a filter turned the warning into an error
        say(f"lightning-presets: {finding}")


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


def _load_one(entry_point: metadata.EntryPoint | Unreadable, kind: type[T], watch: _Watch | None = None) -> Entry[T]:
    noun, group = kind.TYPE.noun, kind.TYPE.group
    if isinstance(entry_point, Unreadable):
        return _unnamed(entry_point, group)
    distribution, version = _distribution_of(entry_point)
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
    if watch is not None:
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
        if watch is not None:
            watch.current = None
    seconds = time.monotonic() - started
    slow = (
        (codes.SLOW_ENTRY_POINT.finding(
            f"{where} took {seconds:.1f} s to load (every process that imports Lightning waits for it)",
            f"ask {distribution} to import less at the top of its preset module, or skip it with "
            f"LIGHTNING_PRESETS_DENY={distribution}",
        ),)
        if seconds >= SLOW_SECONDS else ()
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
    if kind.TYPE is STRATEGY and item_name in LIGHTNING_BUILTIN_NAMES:
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


def _is_own(entry_point: metadata.EntryPoint | Unreadable) -> bool:
    return not isinstance(entry_point, Unreadable) and (
        normalize_distribution(_distribution_of(entry_point)[0]) == OWN_DISTRIBUTION
    )


def load(kind: type[T]) -> Catalog[T]:
    """Load the group of a preset type: ours first, then third parties by distribution name; warn about each bad
    entry (never raising, whatever the warnings filters say)."""
    own = builtin_entries(kind)  # before any third party's code runs
    with _Watch() as watch:
        others = [_load_one(each, kind, watch) for each in _entry_points(kind.TYPE.group) if not _is_own(each)]
    loaded = sorted([*own, *others], key=lambda e: (normalize_distribution(e.distribution) != OWN_DISTRIBUTION,
                                                   e.distribution, e.name))  # fmt: skip
    catalog = Catalog(_resolve_duplicates(loaded, kind.TYPE.noun))
    for entry in catalog.entries:  # ours first: a rule function a third party reuses stays ours
        for each in entry.item.rules if entry.item is not None else ():
            record_origin(each, entry.distribution, entry.version)
    for finding in catalog.findings:
        notify(finding)
    return catalog


# Our own entries by (group, ALLOW, DENY): what they depend on. `_own_lock` is never held while a third party's code
# or Lightning is imported (our preset modules import torch, nothing else), so the start-up hook may wait on it.
_own_lock = threading.RLock()
_own_cache: dict[tuple[str, str, str], tuple[Entry[Any], ...]] = {}
_own_loading = threading.local()


def builtin_entries(kind: type[T]) -> tuple[Entry[T], ...]:
    """Our own entries of a preset type, loaded without any third party's code and without importing Lightning.

    Their status is final (ours keep a name another distribution also declares), so the start-up hook registers
    them before ``import lightning`` returns, even while another thread is loading third parties' entries.
    """
    key = (kind.TYPE.group, os.environ.get(ALLOW_VARIABLE, ""), os.environ.get(DENY_VARIABLE, ""))
    with _own_lock:
        found = _own_cache.get(key)
        if found is not None:
            return found
        if getattr(_own_loading, "active", False):  # asked from inside one of our own preset modules: not yet
            return ()
        _own_loading.active = True
        try:
            with _Watch() as watch:
                scanned = _entry_points(kind.TYPE.group)
                found = _own_cache[key] = tuple(_load_one(each, kind, watch) for each in scanned if _is_own(each))
        finally:
            _own_loading.active = False
    _run_deferred()  # a registration asked for while our own modules loaded (none of them imports Lightning today)
    return found


# Two locks. `_lock` is held while a catalog loads, so preset modules are imported under it; `_state` guards the
# list of deferred registrations and is never held while anything is imported. A registration that the start-up
# hook asks for from inside an import never waits on `_lock`: the import it runs in may hold a lock the loading
# thread needs (a preset module that imports Lightning), and waiting would deadlock both threads.
_lock = threading.RLock()
_state = threading.Lock()
_cache: dict[str, Catalog[Any]] = {}
_loading: set[str] = set()
_thread = threading.local()


def cached(group: str, loader: Callable[[], Catalog[T]]) -> Catalog[T]:
    """Load a group once per process (thread-safe; a use from inside its own loading is an error, not a hang)."""
    result = _cache.get(group)
    if result is None:
        with _lock:
            result = _cache.get(group)
            if result is None:
                if group in _loading:
                    raise RuntimeError(
                        f"the {group} catalog was used while it was being loaded: a preset module must not "
                        "look presets up when it is imported"
                    )
                _loading.add(group)
                _thread.depth = getattr(_thread, "depth", 0) + 1
                try:
                    result = _cache[group] = loader()
                finally:
                    _loading.discard(group)
                    _thread.depth -= 1
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
            codes.UNKNOWN_PRESET.finding(
                f"`lightning_presets.{noun}({name!r})`: no {noun} preset is called {name!r}",
                f"{maybe}available: {', '.join(available) or 'none'} (`lightning-presets list` shows all)",
            )
        ]
    )


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


def denied(entry: Entry[Any], noun: str) -> Finding:
    """LP015: the preset exists, but the trust variables leave its distribution out."""
    name = normalize_distribution(entry.distribution)
    deny = os.environ.get(DENY_VARIABLE, "")
    if name in distribution_names(DENY_VARIABLE):
        why, fix = f"denied by {DENY_VARIABLE}={deny}", f"remove {name} from {DENY_VARIABLE}"
    else:
        allow = os.environ.get(ALLOW_VARIABLE, "")
        why, fix = f"left out by {ALLOW_VARIABLE}={allow}", f"add {name} to {ALLOW_VARIABLE}"
    return codes.DENIED_PRESET.finding(
        f"{noun} preset {entry.name!r} from {entry.distribution} {entry.version} is {why}, so it is not loaded "
        "in this process",
        f"{fix} (in every process of the job: workers read it too), or pick another preset",
    )


_deferred: list[Callable[[], None]] = []


def loading_in_this_thread() -> bool:
    """Whether this thread is inside a catalog load (a preset module being imported)."""
    return getattr(_thread, "depth", 0) > 0 or getattr(_own_loading, "active", False)


def after_loading(work: Callable[[], None]) -> None:
    """Run ``work`` now, or as soon as no catalog is loading.

    A preset module that imports Lightning makes the start-up hook register presets while the catalog is
    being loaded, in this thread or in another one; that registration is run by the loading thread once its
    load is done, instead of waiting on its lock.
    """
    with _state:
        _deferred.append(work)
    _run_deferred()


def _run_deferred() -> None:
    """Run the deferred registrations, unless a catalog is loading: whoever holds the lock runs them on release."""
    while not loading_in_this_thread():
        with _state:
            if not _deferred:
                return
        if not _lock.acquire(blocking=False):  # another thread is loading; it runs them once it is done
            return
        try:
            with _state:
                pending = list(_deferred)
                _deferred.clear()
            for work in pending:
                work()
        finally:
            _lock.release()


def clear_cache() -> None:
    """Forget loaded catalogs, so the next use reads entry points and the trust variables again.

    Registries filled earlier keep the factories they got (registration never overrides); this is for
    tests and tools that read the catalog, not a way to reload presets into a running Lightning.
    """
    with _lock, _own_lock:
        _cache.clear()
        _own_cache.clear()
        _about.clear()
