"""Diagnose mode (``LIGHTNING_PRESETS_DIAGNOSE=1``): a recorder of the collectives each rank enters from Python, and
a monitor thread per rank that reports a collective which does not complete in time (LP034).

The recorder wraps ``torch.distributed``'s collectives: each entry has its group, a sequence number per group, the
user's source line and the Lightning hook it came from (a ``self.log(..., sync_dist=True)`` is found again from the
metric Lightning reduces at the end of the epoch: the log call's own line is recorded when it is made). The monitor
publishes the rank's state in the job's store; a collective still waiting after the limit (the process group's
timeout during set-up and the first step, ``LIGHTNING_PRESETS_COLLECTIVE_TIMEOUT`` seconds afterwards) makes its rank
ask every rank where it is, print one report on stderr (which ranks are in the collective, which never entered it and
where they are instead) and end the job's processes.

A rank that is behind but making progress is slow, not hung: before it reports, the waiting rank asks the others (it
counts up a ``probe`` key in the store at each poll; each rank says how it moves while the count changes, so in a
healthy run the monitors only read that key) and waits while any rank that did not enter the collective writes a
checkpoint, or has moved within the limit (its Python stack changed, its process or DataLoader workers used the CPU,
it read or wrote storage: :class:`Progress`). A rank is never ended inside a checkpoint write (the strategy's or its
checkpoint IO's ``save_checkpoint``, ``torch.save`` on any thread): the write finishes first, so diagnose mode never
truncates a checkpoint.

The collectives DDP and FSDP issue from C++ (the gradient reduction in the backward pass, DDP's bucket rebuild and
buffer broadcast in its forward pass) are seen by where the rank's Python code stands: a rank whose innermost frame
is in torch's autograd, DDP or ``torch.distributed`` code and that has made no progress for the limit waits in one of
them (:func:`cxx_wait`); it asks the others where they are as above, and reports the rank that is behind in its step
(a data source that never returns in ``training_step``) with its line. Ranks that all wait in the same one are not
reported (a slow reduction is no rank behind). What it does not see: the completion of ``async_op=True`` work
(recorded as complete when the call returns).
"""

from __future__ import annotations

import contextlib
import datetime
import functools
import inspect
import json
import linecache
import os
import socket
import sys
import sysconfig
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from types import FrameType
from typing import Any

from lightning_presets.diagnose.codes import COLLECTIVE_HANG
from lightning_presets.diagnose.progress import Progress, cxx_wait, record_writes
from lightning_presets.diagnose.report import Site, describe
from lightning_presets.registry import private, variables

COLLECTIVES = ("all_reduce", "all_gather", "all_gather_into_tensor", "all_gather_object", "broadcast",
               "broadcast_object_list", "reduce", "reduce_scatter", "reduce_scatter_tensor", "all_to_all",
               "all_to_all_single", "barrier", "monitored_barrier", "gather", "gather_object", "scatter",
               "scatter_object_list")  # fmt: skip
HOOK_CALLERS = private.HOOK_CALLERS
POLL_SECONDS = 0.5
ANSWER_SECONDS = 5.0
"""How long the reporting rank waits for the others to say where they are."""
EXIT_STATUS = 1
PREFIX = "lightning_presets/diagnose"
_LIBRARIES = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_utilities", "torchmetrics",
              "lightning_presets", "deepspeed")  # fmt: skip


def _library_folders() -> tuple[str, ...]:
    folders = [sysconfig.get_paths()["stdlib"]]
    for name in _LIBRARIES:
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        if where:
            folders.append(str(Path(where).resolve().parent))
    return tuple(folder + os.sep for folder in folders)


class Recorder:
    """This process's collectives (see the module's docstring)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.depth = threading.local()
        self.sequence: dict[str, int] = {}
        self.current: dict[str, Any] | None = None
        self.last: dict[str, Any] | None = None
        self.started = 0.0
        self.first_step_done = False
        self.log_sites: dict[tuple[str, str], Site] = {}
        self.folders = _library_folders()
        self.changed = threading.Event()
        self.writes = 0
        """Checkpoint writes in flight in this process (any thread): a rank is never ended inside one."""
        self.steps = 0
        """Optimizer steps done: the step a rank waits in, for the collectives DDP and FSDP issue from C++."""

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        with self.lock:
            self.writes += 1
        self.changed.set()
        try:
            yield
        finally:
            with self.lock:
                self.writes -= 1
            self.changed.set()

    # --- where ------------------------------------------------------------------------------------------------

    def _outside(self, filename: str) -> bool:
        return not filename.startswith("<") and not os.path.abspath(filename).startswith(self.folders)

    def site(self, frame: FrameType | None) -> Site:
        user: FrameType | None = None
        hook = ""
        metric: tuple[str, str] | None = None
        while frame is not None:
            code = frame.f_code
            if user is None and self._outside(code.co_filename):
                user = frame
            if not hook and code.co_name in HOOK_CALLERS:
                hook = str(frame.f_locals.get("hook_name", ""))
            if metric is None and code.co_name == "compute":
                owner = frame.f_locals.get("self")
                meta = getattr(owner, "meta", None)
                if private.is_result_metric(owner) and meta is not None:
                    metric = (str(getattr(meta, "fx", "")), str(getattr(meta, "name", "")))
            frame = frame.f_back
        if metric is not None and metric in self.log_sites:
            return self.log_sites[metric]
        if user is None:
            return Site(where="(library code only)", code="", hook=hook)
        where = f"{Path(user.f_code.co_filename).name}:{user.f_lineno}"
        text = linecache.getline(user.f_code.co_filename, user.f_lineno).strip()
        return Site(where=where, code=text[:160], hook=hook or (user.f_code.co_name if user.f_code.co_name.startswith(
            ("on_", "training_step", "validation_step", "configure_")) else ""))  # fmt: skip

    # --- the record ---------------------------------------------------------------------------------------------

    def enter(self, op: str, group: list[int], frame: FrameType | None) -> dict[str, Any] | None:
        depth = getattr(self.depth, "value", 0)
        self.depth.value = depth + 1
        if depth:  # a collective inside another (all_gather_object's all_gather): the outer one is the record
            return None
        key = ",".join(map(str, group))
        site = self.site(frame)
        with self.lock:
            number = self.sequence.get(key, 0) + 1
            self.sequence[key] = number
            entry = {"op": op, "group": group, "seq": number, "site": asdict(site), "since": time.monotonic()}
            self.current = entry
        self.changed.set()
        return entry

    def leave(self, entry: dict[str, Any] | None) -> None:
        self.depth.value = getattr(self.depth, "value", 1) - 1
        if entry is None:
            return
        with self.lock:
            if self.current is entry:
                self.current = None
            self.last = entry
        self.changed.set()


_RECORDER: Recorder | None = None


def _group_ranks(dist: Any, group: Any) -> list[int]:
    if group is None or group is dist.GroupMember.WORLD:
        return list(range(dist.get_world_size()))
    return [int(rank) for rank in dist.get_process_group_ranks(group)]


def _wrap(dist: Any, name: str, function: Callable[..., Any], recorder: Recorder) -> Callable[..., Any]:
    signature = inspect.signature(function)

    @functools.wraps(function)
    def recorded(*args: Any, **kwargs: Any) -> Any:
        try:
            group = signature.bind_partial(*args, **kwargs).arguments.get("group")
            entry = recorder.enter(name, _group_ranks(dist, group), sys._getframe(1))
        except Exception:  # recording must never change what the collective does
            entry = None
        try:
            return function(*args, **kwargs)
        finally:
            recorder.leave(entry)

    recorded._lp_recorded = function  # type: ignore[attr-defined]
    return recorded


def _patch_collectives(recorder: Recorder) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    for name in COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is None or hasattr(original, "_lp_recorded"):
            continue
        wrapped = _wrap(dist, name, original, recorder)
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is original:
            setattr(dist, name, wrapped)


def _patch_log(recorder: Recorder) -> None:
    """Remember the line of each ``self.log(..., sync_dist=True)``: Lightning reduces the value later, at the end of
    the epoch, where the user's line is no longer on the stack."""
    for module_name in ("lightning.pytorch.core.module", "pytorch_lightning.core.module"):
        module = sys.modules.get(module_name)
        cls = getattr(module, "LightningModule", None)
        if cls is None or hasattr(cls.log, "_lp_recorded"):
            continue
        original = cls.log

        def log(self: Any, name: str, value: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            if kwargs.get("sync_dist"):
                try:
                    site = recorder.site(sys._getframe(1))
                    fx = private.current_fx_name_of(self)
                    code = site.code or f"self.log({name!r}, ..., sync_dist=True)"
                    recorder.log_sites[(fx, name)] = Site(where=site.where, code=code, hook=fx or site.hook)
                except Exception:
                    pass
            return _original(self, name, value, *args, **kwargs)

        log._lp_recorded = original  # type: ignore[attr-defined]
        cls.log = log


class Monitor:
    """The thread that publishes this rank's state and reports a collective that waits too long, once the ranks that
    did not enter it have made no progress for as long (see :class:`Progress`)."""

    def __init__(self, recorder: Recorder, rank: int, world: int, setup_limit: float, step_limit: float) -> None:
        self.recorder = recorder
        self.rank = rank
        self.world = world
        self.setup_limit = setup_limit
        self.step_limit = step_limit
        self.host = socket.gethostname()
        attempt = f"{os.environ.get('TORCHELASTIC_RUN_ID', '')}.{os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
        self.prefix = f"{PREFIX}/{attempt}"
        self.main = threading.main_thread()
        self.progress = Progress(recorder, self.main)
        self.beats = 0
        self.heard: dict[int, tuple[int, float]] = {}
        """Rank -> (its last progress beat, when this rank first read it): a rank whose beat stops is not moving."""
        self.probed_at: float | None = None
        self.probing: Mapping[str, Any] | None = None
        """What this rank waits in while it asks the others whether they move."""
        self.probes = 0
        """The store's probe counter as this rank last read it: each change asks for its progress once more."""
        self.cxx: dict[str, Any] | None = None
        """The collective issued from C++ this rank waits in (see :func:`cxx_wait`), the same entry while it does."""
        self.store: Any = None
        self.thread = threading.Thread(target=self._run, name="lightning-presets-hang-monitor", daemon=True)

    def start(self) -> None:
        from torch.distributed import TCPStore  # type: ignore[attr-defined]  # torch exports it untyped

        address = os.environ.get("MASTER_ADDR", "127.0.0.1")
        port = int(os.environ.get("MASTER_PORT", "0"))
        self.store = TCPStore(address, port, is_master=False, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=30))  # fmt: skip
        self.thread.start()

    def limit(self) -> float:
        return self.step_limit if self.recorder.first_step_done and self.step_limit > 0 else self.setup_limit

    def state(self, *, now: bool) -> dict[str, Any]:
        current = self.waiting(time.monotonic())
        with self.recorder.lock:
            last = self.recorder.last
        state: dict[str, Any] = {"rank": self.rank, "host": self.host, "current": current, "last": last,
                                 "steps": self.recorder.steps}  # fmt: skip
        if now:
            frame = sys._current_frames().get(self.main.ident or 0)
            state["now"] = asdict(self.recorder.site(frame))
            state["idle"] = round(self.progress.idle(time.monotonic()), 1)
        return state

    def _publish(self, key: str, state: Mapping[str, Any]) -> None:
        self.store.set(f"{self.prefix}/{key}/{self.rank}", json.dumps(state, default=str))

    def _run(self) -> None:
        try:
            self._watch()
        except Exception:  # the store went away (rank 0 ended) or a bug of ours: the run goes on, unwatched
            return

    def _watch(self) -> None:
        answered = False
        while True:
            if self.recorder.changed.wait(POLL_SECONDS):
                self.recorder.changed.clear()
                self._publish("state", self.state(now=False))
            now = time.monotonic()
            self.progress.sample(now)
            if self.store.check([f"{self.prefix}/report"]):
                self._end()
            probes = int(self.store.add(f"{self.prefix}/probe", 0))
            if probes != self.probes:  # a waiting rank asks whether the others move: say so while it asks
                self.probes = probes
                self._say_progress(now)
            if not answered and self.store.check([f"{self.prefix}/request"]):
                self._publish("answer", self.state(now=True))
                answered = True
            current = self.waiting(now)
            if current is None or self._waited(current, now) <= self.limit():
                self.probing, self.probed_at = None, None
                continue
            self.store.add(f"{self.prefix}/probe", 1)  # ask the others, at every poll while this rank waits
            if self.probing is not current:  # before calling this a hang, let them answer
                self.probing, self.probed_at = current, now
                continue
            if self._others_move(current, now):
                continue  # a rank that is behind but writes, computes or loads: not hung
            if self.store.add(f"{self.prefix}/reporter", 1) == 1:
                self._report(current)  # ends the process
            if not answered:  # another rank reports: say where this one is, then wait for its report
                self._publish("answer", self.state(now=True))
                answered = True

    def _waited(self, current: Mapping[str, Any], now: float) -> float:
        """Seconds this rank has waited in ``current``: since it entered a collective; in one issued from C++ (the
        backward pass computes before it waits), since it last made progress."""
        if current is self.cxx:
            return self.progress.idle(now)
        return now - float(current["since"])

    def waiting(self, now: float) -> dict[str, Any] | None:
        """What this rank may be waiting in: the collective it entered from Python, else the one issued from C++
        that its innermost frame is in (DDP's gradient reduction in the backward pass, its bucket rebuild)."""
        with self.recorder.lock:
            current = self.recorder.current
        if current is not None:
            return current
        frame = sys._current_frames().get(self.main.ident or 0)
        what = cxx_wait(frame)
        if what is None:
            self.cxx = None
            return None
        step = self.recorder.steps + 1
        if self.cxx is None or self.cxx["op"] != what or self.cxx["seq"] != step:
            self.cxx = {"op": what, "group": list(range(self.world)), "seq": step, "since": now,
                        "site": asdict(self.recorder.site(frame)), "label": f"{what}, in step {step}"}  # fmt: skip
        return self.cxx

    def _say_progress(self, now: float) -> None:
        self.beats += 1
        current = self.waiting(now)
        self._publish("progress", {
            "idle": self.progress.idle(now), "writing": self.progress.writing(), "beat": self.beats,
            "in": None if current is None else [",".join(map(str, current["group"])), current["seq"], current["op"]],
        })  # fmt: skip

    def _others_move(self, hung: Mapping[str, Any], now: float) -> bool:
        """Whether a rank of the group that has not entered ``hung`` is writing a checkpoint, or has made progress
        within the limit (or has not said yet, while it still may)."""
        probed = now if self.probed_at is None else self.probed_at
        limit = self.limit()
        key = ",".join(map(str, hung["group"]))
        progress = self._states("progress")
        behind = False
        for rank in hung["group"]:
            if rank == self.rank:
                continue
            said = progress.get(rank)
            if said is None:
                if now - probed < ANSWER_SECONDS:
                    return True  # it may not have read the probe yet
                behind = True
                continue  # it never says: ended, or its monitor cannot run; the report says so
            if said.get("in") == [key, hung["seq"], hung["op"]]:
                continue  # waits in the same collective
            behind = True
            beat, since = self.heard.get(rank, (-1, now))
            if said["beat"] != beat:
                self.heard[rank] = (int(said["beat"]), now)
                since = now
            if said["writing"]:
                return True  # never call a rank inside a checkpoint write hung: ending it loses the checkpoint
            if float(said["idle"]) < limit and now - since < limit:
                return True
        # every rank waiting in the same collective issued from C++ (a slow reduction, a slow device) is no rank
        # behind: only one entered from Python is reported then, as before
        return not behind and hung is self.cxx

    def _states(self, key: str) -> dict[int, dict[str, Any]]:
        found = {}
        for rank in range(self.world):
            name = f"{self.prefix}/{key}/{rank}"
            if self.store.check([name]):
                found[rank] = json.loads(self.store.get(name))
        return found

    def _report(self, current: dict[str, Any]) -> None:
        self.store.set(f"{self.prefix}/request", str(self.rank))
        self._publish("answer", self.state(now=True))
        deadline = time.monotonic() + ANSWER_SECONDS
        answers = self._states("answer")
        while len(answers) < len(current["group"]) and time.monotonic() < deadline:
            time.sleep(0.1)
            answers = self._states("answer")
        text = describe(current, answers, self._states("state"), self.limit(), self.recorder.first_step_done)
        self._print(text)
        self.store.set(f"{self.prefix}/report", text)
        deadline = time.monotonic() + 4 * POLL_SECONDS  # let the others read the verdict before the store may go
        while self.store.add(f"{self.prefix}/ended", 0) < len(answers) - 1 and time.monotonic() < deadline:
            time.sleep(0.05)
        self._exit()

    def _exit(self) -> None:
        """End the process, never inside a checkpoint write: a write in flight finishes first."""
        said = False
        while self.progress.writing():
            if not said:
                self._print(f"{COLLECTIVE_HANG.code}: rank {self.rank} finishes its checkpoint write before it ends")
                said = True
            time.sleep(0.1)
        os._exit(EXIT_STATUS)

    def _print(self, text: str) -> None:
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        sys.stdout.flush()

    def _end(self) -> None:
        """A rank that did not report: one line pointing at the report, then it ends once the reporter has."""
        name = f"{self.prefix}/request"
        reporter = self.store.get(name).decode() if self.store.check([name]) else "?"
        self._print(f"{COLLECTIVE_HANG.code} error: rank {self.rank} ends: rank {reporter} reported a collective that "
                    "not every rank entered (its output has the report)")  # fmt: skip
        try:
            self.store.add(f"{self.prefix}/ended", 1)
            time.sleep(2 * POLL_SECONDS)  # the reporter ends first (it may serve the store): never cut its report short
        finally:
            self._exit()


def _timeout_seconds(strategy: Any) -> float:
    timeout = private.timeout_of(strategy)
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return 1800.0


def install(strategy: Any) -> None:
    """Record this process's collectives and start its monitor (once per process)."""
    global _RECORDER
    import torch.distributed as dist

    if _RECORDER is not None:
        return
    recorder = Recorder()
    _patch_collectives(recorder)
    _patch_log(recorder)
    step = strategy.optimizer_step

    @functools.wraps(step)
    def optimizer_step(*args: Any, **kwargs: Any) -> Any:
        result = step(*args, **kwargs)
        recorder.first_step_done = True
        recorder.steps += 1
        return result

    strategy.optimizer_step = optimizer_step
    record_writes(strategy, recorder)
    pg_timeout = _timeout_seconds(strategy)
    monitor = Monitor(recorder, int(dist.get_rank()), int(dist.get_world_size()), 0.9 * pg_timeout,
                      variables.collective_timeout())  # fmt: skip
    monitor.start()
    _RECORDER = recorder
