"""The catalog's caches and locks: each group loaded once per process, our own entries once per trust setting, and the
registrations deferred while a catalog is loading.

Three locks. ``own_lock`` guards our own entries; it is never held while a third party's code or Lightning is
imported (our preset modules import torch, nothing else), so the start-up hook may wait on it. ``lock`` is held while
a catalog loads, so preset modules are imported under it; ``state`` guards the list of deferred registrations and is
never held while anything is imported. A registration that the start-up hook asks for from inside an import never
waits on ``lock``: the import it runs in may hold a lock the loading thread needs (a preset module that imports
Lightning), and waiting would deadlock both threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from lightning_presets.registry import entry_points

C = TypeVar("C")

own_lock = threading.RLock()
own_cache: dict[tuple[str, str, str], tuple[Any, ...]] = {}
"""Our own entries by (group, ALLOW, DENY): what they depend on."""
own_loading = threading.local()

lock = threading.RLock()
state = threading.Lock()
cache: dict[str, Any] = {}
"""The loaded catalogs by group."""
loading: set[str] = set()
thread = threading.local()
deferred: list[Callable[[], None]] = []


def cached(group: str, loader: Callable[[], C]) -> C:
    """Load a group once per process (thread-safe; a use from inside its own loading is an error, not a hang)."""
    result: C | None = cache.get(group)
    if result is None:
        with lock:
            result = cache.get(group)
            if result is None:
                if group in loading:
                    raise RuntimeError(
                        f"the {group} catalog was used while it was being loaded: a preset module must not "
                        "look presets up when it is imported"
                    )
                loading.add(group)
                thread.depth = getattr(thread, "depth", 0) + 1
                try:
                    result = cache[group] = loader()
                finally:
                    loading.discard(group)
                    thread.depth -= 1
    run_deferred()
    return result


def loading_in_this_thread() -> bool:
    """Whether this thread is inside a catalog load (a preset module being imported)."""
    return getattr(thread, "depth", 0) > 0 or getattr(own_loading, "active", False)


def after_loading(work: Callable[[], None]) -> None:
    """Run ``work`` now, or as soon as no catalog is loading.

    A preset module that imports Lightning makes the start-up hook register presets while the catalog is
    being loaded, in this thread or in another one; that registration is run by the loading thread once its
    load is done, instead of waiting on its lock.
    """
    with state:
        deferred.append(work)
    run_deferred()


def run_deferred() -> None:
    """Run the deferred registrations, unless a catalog is loading: whoever holds the lock runs them on release."""
    while not loading_in_this_thread():
        with state:
            if not deferred:
                return
        if not lock.acquire(blocking=False):  # another thread is loading; it runs them once it is done
            return
        try:
            with state:
                pending = list(deferred)
                deferred.clear()
            for work in pending:
                work()
        finally:
            lock.release()


def clear_cache() -> None:
    """Forget loaded catalogs, so the next use reads entry points and the trust variables again.

    Registries filled earlier keep the factories they got (registration never overrides); this is for
    tests and tools that read the catalog, not a way to reload presets into a running Lightning.
    """
    with lock, own_lock:
        cache.clear()
        own_cache.clear()
        entry_points.clear()
