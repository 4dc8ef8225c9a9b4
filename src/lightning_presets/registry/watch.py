"""The watchdog of a catalog load, and how the catalog speaks: one line on stderr, warnings that never raise.

While entry points load, a daemon thread names on stderr the one a load is stuck in once it has taken the catalog's
``SLOW_SECONDS`` (:class:`Watch`); :func:`notify` warns about a finding without ever raising into ``import
lightning``, whatever the warnings filters say.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
import warnings

from lightning_presets.core.findings import Finding, PresetWarning


class Watch:
    """Names, on stderr, the entry point a load is stuck in once it has taken ``seconds``.

    One daemon thread per catalog load, sleeping until the load ends: a plugin that sleeps, hangs on the network
    or waits on a lock at import is named while ``import lightning`` waits for it.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.current: tuple[str, float] | None = None
        self.done = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> Watch:
        thread = threading.Thread(target=self._run, name="lightning-presets-slow-plugin", daemon=True)
        with contextlib.suppress(RuntimeError):  # no new thread at interpreter shutdown: load without the watch
            thread.start()
            self._thread = thread
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()

    def _run(self) -> None:
        named = None
        seconds = self.seconds
        while not self.done.wait(min(seconds, 1.0)):
            current = self.current
            if current is not None and current != named and time.monotonic() - current[1] >= seconds:
                named = current
                say(f"lightning-presets: still loading {current[0]} after {seconds:g} s; "
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
