"""Whether a rank moves, as diagnose mode's monitor thread sees it (:class:`Progress`), and what a rank waits in when
its innermost Python frame called into a collective torch issues from C++ (:func:`cxx_wait`).

A rank whose Python stack changes, whose process or DataLoader workers use the CPU, that reads or writes storage, or
that writes a checkpoint is slow, not hung (:mod:`lightning_presets.diagnose.hangs` reads this before it
reports).
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time
from contextlib import AbstractContextManager
from pathlib import Path
from types import FrameType
from typing import Any, Protocol


class Recorder(Protocol):
    """What this module reads of diagnose mode's recorder (:class:`lightning_presets.diagnose.hangs.Recorder`):
    the collective the rank waits in, and the checkpoint writes in flight."""

    current: dict[str, Any] | None
    writes: int

    def writing(self) -> AbstractContextManager[None]: ...


BUSY_SHARE = 0.1
"""A process that used at least this share of one CPU core between two polls is computing: making progress."""


def _torch_save_codes() -> frozenset[Any]:
    serialization = sys.modules.get("torch.serialization")
    codes = {getattr(getattr(serialization, name, None), "__code__", None) for name in ("save", "_save")}
    return frozenset(code for code in codes if code is not None)


def _children_cpu_seconds() -> float:
    """The CPU time of this process's live child processes (DataLoader workers load the batches the main thread
    waits for), from Linux's ``/proc``; 0 where it cannot be read."""
    total = 0
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return 0.0
    for task in tasks:
        try:
            children = Path(f"/proc/self/task/{task}/children").read_text().split()
        except OSError:
            continue
        for child in children:
            try:
                fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
            except (OSError, IndexError, ValueError):
                continue
    return total / _CLOCK_TICKS


_CLOCK_TICKS = float(os.sysconf("SC_CLK_TCK")) if hasattr(os, "sysconf") else 100.0


def _cpu_seconds() -> float:
    return time.process_time() + _children_cpu_seconds()


def _storage_bytes() -> int:
    """Bytes this process read from or wrote to storage (``/proc/self/io``: a load or a write in progress); 0 where
    it cannot be read. Sockets are not counted: the monitor's own store traffic is no progress."""
    try:
        text = Path("/proc/self/io").read_text()
    except OSError:
        return 0
    values = dict(line.split(": ", 1) for line in text.splitlines() if ": " in line)
    try:
        return int(values.get("read_bytes", 0)) + int(values.get("write_bytes", 0))
    except ValueError:
        return 0


_CXX_WAITS = (
    ("torch/autograd/", "the backward pass, whose gradient reductions DDP and FSDP issue from C++"),
    (
        "torch/nn/parallel/distributed.py",
        "DDP's forward pass (its bucket rebuild or buffer broadcast, issued from C++)",
    ),
    ("torch/distributed/", "a collective torch issues from C++"),
)
"""Where a rank's innermost Python frame is when it waits in a collective issued from C++, and what that is."""


def cxx_wait(frame: FrameType | None) -> str | None:
    """What the rank waits in when its innermost Python frame (``frame``) called into one of torch's collectives
    issued from C++; ``None`` when it is elsewhere (the user's code, a data source, the standard library)."""
    if frame is None:
        return None
    filename = frame.f_code.co_filename.replace(os.sep, "/")
    return next((what for part, what in _CXX_WAITS if f"/{part}" in filename), None)


class Progress:
    """Whether this rank moves, as its monitor thread sees it at each poll: a rank whose Python stack changes, whose
    process or DataLoader workers use the CPU (a long computation in C++ keeps one line), that reads or writes
    storage, or that writes a checkpoint is making progress; one that sleeps, blocks on a data source that never
    returns or waits in a collective is not."""

    def __init__(self, recorder: Recorder, main: threading.Thread) -> None:
        self.recorder = recorder
        self.main = main
        self.save_codes = _torch_save_codes()
        self.signature: tuple[tuple[int, int], ...] = ()
        self.cpu = _cpu_seconds()
        self.io = _storage_bytes()
        self.sampled = self.moved = time.monotonic()

    def writing(self) -> bool:
        """A checkpoint write in flight: the strategy's or its checkpoint IO's ``save_checkpoint`` (recorded), or
        ``torch.save`` on any thread's stack."""
        if self.recorder.writes:
            return True
        for frame in list(sys._current_frames().values()):
            while frame is not None:
                if frame.f_code in self.save_codes:
                    return True
                frame = frame.f_back  # type: ignore[assignment]  # typeshed: f_back is FrameType | None
        return False

    def sample(self, now: float) -> None:
        frame = sys._current_frames().get(self.main.ident or 0)
        signature = []
        while frame is not None:
            signature.append((id(frame.f_code), frame.f_lineno))
            frame = frame.f_back
        cpu, io = _cpu_seconds(), _storage_bytes()
        busy = cpu - self.cpu >= BUSY_SHARE * (now - self.sampled)
        moved = tuple(signature) != self.signature or busy or io != self.io
        if (self.recorder.current is None and moved) or self.writing():
            self.moved = now
        self.signature, self.cpu, self.io, self.sampled = tuple(signature), cpu, io, now

    def idle(self, now: float) -> float:
        """Seconds since this rank last made progress."""
        return now - self.moved


def _record_writing(owner: Any, recorder: Recorder) -> None:
    save = getattr(owner, "save_checkpoint", None)
    if not callable(save) or hasattr(save, "_lp_recorded"):
        return

    @functools.wraps(save)
    def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
        with recorder.writing():
            return save(*args, **kwargs)

    save_checkpoint._lp_recorded = save  # type: ignore[attr-defined]
    owner.save_checkpoint = save_checkpoint


def record_writes(strategy: Any, recorder: Recorder) -> None:
    """Count the checkpoint writes in flight: the strategy's ``save_checkpoint`` (Trainer and Fabric), its checkpoint
    IO's and, for a wrapping IO (``AsyncCheckpointIO`` writes on a thread of its own), the wrapped one's."""
    _record_writing(strategy, recorder)
    io = getattr(strategy, "checkpoint_io", None)
    for _ in range(3):
        if io is None:
            break
        _record_writing(io, recorder)
        io = getattr(io, "checkpoint_io", None)
