"""The join watchdog: while Lightning forms the process group, a thread of each rank waits for it, and says who
joined (each rank leaves its name in the store as it arrives), who is missing, where the environment says they should
come from and whether the store's address answers (LP033).

A rank may legally join late: torch and Lightning wait for it the process group's whole timeout (30 minutes unless
the strategy's ``timeout=`` says otherwise). So by default the watchdog only prints that report as a warning every
``LIGHTNING_PRESETS_JOIN_TIMEOUT`` seconds (300, or a sixth of a shorter process-group timeout), and ends the rank
with it only when that timeout itself is spent (when torch ends it too; the report says why). A
``LIGHTNING_PRESETS_JOIN_TIMEOUT`` that the user sets explicitly, shorter than the process group's timeout, is asked
for: the rank ends with the report then.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.ranks import on_nodes, spans
from lightning_presets.guards.runtime.codes import RANKS_MISSING
from lightning_presets.registry import private, variables

EXIT_STATUS = 1
"""The exit status of a rank the watchdog ends."""
POLL_SECONDS = 0.25
INTERVALS_PER_TIMEOUT = 6
"""By default the report is a warning at most every sixth of the process group's timeout (every 300 s of torch's 30
minutes): a job with a short timeout hears of a missing rank before it ends."""
END_GRACE_SECONDS = 5.0
"""Once the process group's own timeout is spent, how long the watchdog lets torch end the rank with its own error
before it ends it (the report is printed first): never sooner than torch would."""
PREFIX = "lightning_presets/joined"
LAUNCHER_COUNTS = (("torchrun", ("WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "TORCHELASTIC_RESTART_COUNT")),
                   ("SLURM", ("SLURM_NTASKS", "SLURM_NTASKS_PER_NODE", "SLURM_NNODES", "SLURM_NODEID",
                              "SLURM_PROCID")),
                   ("Open MPI", ("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "OMPI_COMM_WORLD_RANK")),
                   ("LSF", ("JSM_NAMESPACE_SIZE", "JSM_NAMESPACE_LOCAL_SIZE", "LSB_DJOB_NUMPROC")))  # fmt: skip
"""What each launcher says about how many processes it started, and where."""


def _key(rank: int, environ: Mapping[str, str]) -> str:
    """One key per rank and launch attempt (torchelastic keeps its store across restarts)."""
    attempt = f"{environ.get('TORCHELASTIC_RUN_ID', '')}.{environ.get('TORCHELASTIC_RESTART_COUNT', '0')}"
    return f"{PREFIX}/{attempt}/{rank}"


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a waiting rank reports, and when it ends."""

    every: float
    """Seconds between two warnings (``inf``: none)."""
    end: float
    """Seconds after which the rank ends with the report as an error."""
    asked: bool
    """Whether the end is the user's explicit ``LIGHTNING_PRESETS_JOIN_TIMEOUT`` (else the process group's timeout,
    when torch ends the rank too)."""
    pg_timeout: float


def schedule(pg_timeout: float, environ: Mapping[str, str] | None = None) -> Schedule | None:
    """The watchdog's schedule for a process group of ``pg_timeout`` seconds; ``None``: no watchdog (the variable is
    0). See the module's docstring."""
    env = os.environ if environ is None else environ
    seconds = variables.join_timeout(env)
    explicit = bool(env.get(variables.JOIN_TIMEOUT_VARIABLE, "").strip()) and not any(
        name == variables.JOIN_TIMEOUT_VARIABLE for name, _, _ in variables.runtime_unknown_values(env)
    )
    if seconds <= 0:
        return None
    if explicit and seconds < pg_timeout:
        return Schedule(every=math.inf, end=seconds, asked=True, pg_timeout=pg_timeout)
    every = seconds if explicit else min(seconds, pg_timeout / INTERVALS_PER_TIMEOUT)
    return Schedule(every=every, end=pg_timeout + END_GRACE_SECONDS, asked=False, pg_timeout=pg_timeout)


def pg_timeout_of(strategy: Any) -> float:
    """The process group's timeout in seconds: the strategy's ``timeout=``, else torch's default (30 minutes)."""
    from torch.distributed.constants import default_pg_timeout

    timeout = private.timeout_of(strategy)
    return float((timeout if isinstance(timeout, datetime.timedelta) else default_pg_timeout).total_seconds())


class Watchdog:
    """One rank's watch over the forming process group; :meth:`stop` once Lightning's ``setup_environment`` is done."""

    def __init__(self, strategy: Any, plan: Schedule, environ: Mapping[str, str] | None = None) -> None:
        env = dict(os.environ if environ is None else environ)
        environment = getattr(strategy, "cluster_environment", None)
        self.environ = env
        self.plan = plan
        self.devices = int(getattr(strategy, "num_processes", 1) or 1)
        self.nodes = int(getattr(strategy, "num_nodes", 1) or 1)
        self.world = self.devices * self.nodes
        self.node_rank = int(getattr(strategy, "node_rank", 0) or 0)
        self.local_rank = int(getattr(strategy, "local_rank", 0) or 0)
        self.rank = self.node_rank * self.devices + self.local_rank
        self.address = env.get("MASTER_ADDR") or str(getattr(environment, "main_address", "127.0.0.1"))
        self.port = int(env.get("MASTER_PORT") or getattr(environment, "main_port", None) or 0)
        self.host = socket.gethostname()
        self.done = threading.Event()
        self.store: Any = None
        self.started = time.monotonic()
        self.thread = threading.Thread(target=self._watch, name="lightning-presets-join-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.done.set()

    # --- the thread -----------------------------------------------------------------------------------------------

    def _answers(self, seconds: float = 1.0) -> bool:
        try:
            with socket.create_connection((self.address, self.port), timeout=seconds):
                return True
        except OSError:
            return False

    def _register(self) -> None:
        """Leave this rank's name in the store, once the store answers (a client of our own: the store's server
        counts only the clients torch's rendezvous makes, so ours changes nothing for it)."""
        from torch.distributed import TCPStore  # type: ignore[attr-defined]  # torch exports it untyped

        self.store = TCPStore(self.address, self.port, is_master=False, wait_for_workers=False,
                                   timeout=datetime.timedelta(seconds=5))  # fmt: skip
        record = {"host": self.host, "node_rank": self.node_rank, "local_rank": self.local_rank, "pid": os.getpid()}
        self.store.set(_key(self.rank, self.environ), json.dumps(record))

    def _watch(self) -> None:
        start = self.started
        warn_at = start + self.plan.every
        ended_by_torch_at = start + self.plan.pg_timeout
        said_timeout = False
        while not self.done.wait(POLL_SECONDS):
            if self.store is None and self.port and self._answers(POLL_SECONDS):
                try:
                    self._register()
                except Exception:  # the store was not ready yet: try again at the next poll
                    self.store = None
            now = time.monotonic()
            if now >= start + self.plan.end:
                break
            if not self.plan.asked and not said_timeout and now >= ended_by_torch_at:
                self._say(self._text("error", now - start))  # torch ends the rank now; we say why, then wait
                said_timeout = True
            elif now >= warn_at and not said_timeout:
                self._say(self._text("warning", now - start))
                warn_at = now + self.plan.every
        if self.done.is_set():
            return
        if not said_timeout:
            self._say(self._text("error", time.monotonic() - start))
        if self.done.is_set():  # the group formed while the report was written
            return
        os._exit(EXIT_STATUS)

    def _text(self, severity: str, waited: float) -> str:
        try:
            return self.report(severity, waited)
        except Exception as error:  # never die silently: the report is what the user waits for
            return (
                f"{RANKS_MISSING.code} {severity}: rank {self.rank}: the process group has not formed after "
                f"{waited:.0f} s ({error})"
            )

    def _say(self, text: str) -> None:
        if self.done.is_set():  # the group formed while the report was written
            return
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        sys.stdout.flush()

    # --- the report -----------------------------------------------------------------------------------------------

    def joined(self) -> dict[int, dict[str, Any]] | None:
        """The ranks that left their name in the store, or ``None`` when the store cannot be read."""
        if self.store is None:
            return None
        found = {}
        for rank in range(self.world):
            key = _key(rank, self.environ)
            if self.store.check([key]):
                found[rank] = json.loads(self.store.get(key))
        return found

    def report(self, severity: str = "error", waited: float | None = None) -> str:
        """What the waiting rank says (LP033): see the module's docstring. ``warning``: it goes on waiting."""
        seconds = self.plan.end if waited is None else waited
        who = (
            f"{RANKS_MISSING.code} {severity}: rank {self.rank} of {self.world} (node {self.host}, node rank "
            f"{self.node_rank}, local rank {self.local_rank})"
        )
        if severity == "warning":
            verdict = (
                f"has waited {seconds:.0f} s for the process group to form; it goes on waiting, as torch does, up to "
                f"the process group's timeout of {self.plan.pg_timeout:g} s (a rank may legally join late)"
            )
        elif self.plan.asked:
            verdict = (
                f"waited {self.plan.end:g} s for the process group to form ({variables.JOIN_TIMEOUT_VARIABLE}) and "
                "ends now instead of waiting for torch's own timeout"
            )
        else:
            verdict = (
                f"waited the process group's whole timeout of {self.plan.pg_timeout:g} s for it to form: torch ends "
                "the rank now"
            )
        lines = [f"{who} {verdict}"]
        joined = self.joined()
        if joined is None:
            lines.append(
                f"  who joined: unknown, the store at MASTER_ADDR={self.address} MASTER_PORT={self.port} could not be "
                "read: rank 0 (which serves it) has not started, or serves it at another address or port"
            )
        else:
            missing = [rank for rank in range(self.world) if rank not in joined]
            hosts = {rank: str(record.get("host", "?")) for rank, record in joined.items()}
            lines.append(f"  joined: {len(joined)} of {self.world} ranks ({on_nodes(joined, hosts) or 'none'})")
            if missing:
                nodes = sorted({rank // self.devices for rank in missing})
                lines.append(
                    f"  missing: {'rank' if len(missing) == 1 else 'ranks'} {spans(missing)}, expected on node "
                    f"rank(s) {spans(nodes)} ({self.devices} per node)"
                )
        lines.append(f"  expected: {self.world} ranks = devices {self.devices} x num_nodes {self.nodes}; "
                     f"this process is node rank {self.node_rank}")  # fmt: skip
        for launcher, names in LAUNCHER_COUNTS:
            present = [f"{name}={self.environ[name]}" for name in names if name in self.environ]
            if present:
                lines.append(f"  the launcher ({launcher}) says: {', '.join(present)}")
                size = next((self.environ[n] for n in names if n.endswith(("WORLD_SIZE", "NTASKS", "SIZE"))), None)
                if size is not None and size.isdigit() and int(size) != self.world:
                    lines.append(f"  it started {size} processes in all, but devices x num_nodes asks for {self.world}")
        lines.append(f"  MASTER_ADDR={self.address}: {self._resolves()}; MASTER_PORT={self.port}: "
                     f"{'answers' if self._answers() else 'does not answer'}")  # fmt: skip
        lines.append(
            "  fix: start every rank (check the missing node's log: a rank that crashed before it joined, a node "
            "that was never given the job); make the launcher start devices x num_nodes processes; "
            f"{variables.JOIN_TIMEOUT_VARIABLE}=0 switches this report off; the strategy's timeout= is how long "
            "the ranks wait for each other"
        )
        return "\n".join(lines)

    def _resolves(self) -> str:
        try:
            found = sorted({info[4][0] for info in socket.getaddrinfo(self.address, None)})
        except OSError as error:
            return f"does not resolve ({error})"
        return f"resolves to {', '.join(map(str, found))}"


def start_watchdog(strategy: Any) -> Watchdog | None:
    """The running watchdog of this rank, or ``None`` when ``LIGHTNING_PRESETS_JOIN_TIMEOUT`` is 0 or a process group
    already exists."""
    dist: Any = sys.modules.get("torch.distributed")
    if dist is not None and dist.is_available() and dist.is_initialized():
        return None
    plan = schedule(pg_timeout_of(strategy))
    return None if plan is None else Watchdog(strategy, plan).start()
