"""The child processes the tools run user code in (``check --model``'s rehearsal, ``plan --model``'s tracer): each in
a session of its own, whose whole process group is killed when the parent is done with it, on every way out: its end,
a timeout, Ctrl-C, and SIGTERM or SIGHUP (which otherwise end only the parent, and leave the child running on)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType


@contextlib.contextmanager
def terminated_as_interrupt() -> Iterator[None]:
    """SIGTERM and SIGHUP raise ``KeyboardInterrupt`` in the main thread while the block runs, so that the caller's
    ``finally`` (which kills its child's process group) runs before this process ends; the handlers are restored
    afterwards. Off the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(number: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt(signal.Signals(number).name)

    saved = {number: signal.signal(number, interrupt) for number in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for number, handler in saved.items():
            signal.signal(number, handler)


def kill_group(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads (a child started in a session of its own)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
