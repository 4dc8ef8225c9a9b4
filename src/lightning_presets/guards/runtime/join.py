"""The join watchdog: while Lightning forms the process group, a thread of each rank waits for it; when not every rank
has joined within ``LIGHTNING_PRESETS_JOIN_TIMEOUT`` seconds, it prints on stderr who joined (each rank leaves its
name in the store as it arrives), who is missing, where the environment says they should come from and whether the
store's address answers, and ends the process (LP033) instead of letting it wait for torch's 30 minutes.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import threading
import time
from collections.abc import Mapping
from typing import Any

from lightning_presets.guards.runtime.codes import RANKS_MISSING
from lightning_presets.guards.runtime.ranks import on_nodes, spans
from lightning_presets.registry import variables

EXIT_STATUS = 1
"""The exit status of a rank the watchdog ends."""
POLL_SECONDS = 0.25
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


class Watchdog:
    """One rank's watch over the forming process group; :meth:`stop` once Lightning's ``setup_environment`` is done."""

    def __init__(self, strategy: Any, timeout: float, environ: Mapping[str, str] | None = None) -> None:
        env = dict(os.environ if environ is None else environ)
        environment = getattr(strategy, "cluster_environment", None)
        self.environ = env
        self.timeout = timeout
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
        deadline = time.monotonic() + self.timeout
        while not self.done.wait(POLL_SECONDS):
            if self.store is None and self.port and self._answers(POLL_SECONDS):
                try:
                    self._register()
                except Exception:  # the store was not ready yet: try again at the next poll
                    self.store = None
            if time.monotonic() >= deadline:
                break
        if self.done.is_set():
            return
        try:
            text = self.report()
        except Exception as error:  # never die silently: the report is what the user waits for
            text = (
                f"{RANKS_MISSING.code} error: rank {self.rank}: the process group did not form within "
                f"{self.timeout:g} s ({error})"
            )
        if self.done.is_set():  # the group formed while the report was written
            return
        sys.stderr.write(text + "\n")
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(EXIT_STATUS)

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

    def report(self) -> str:
        """What the waiting rank says (LP033): see the module's docstring."""
        lines = [
            f"{RANKS_MISSING.code} error: rank {self.rank} of {self.world} (node {self.host}, "
            f"node rank {self.node_rank}, local rank {self.local_rank}) waited {self.timeout:g} s for the process "
            f"group to form ({variables.JOIN_TIMEOUT_VARIABLE}) and ends now instead of waiting for torch's own timeout"
        ]  # fmt: skip
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
            f"{variables.JOIN_TIMEOUT_VARIABLE}=0 waits as long as torch does"
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
    timeout = variables.join_timeout()
    dist: Any = sys.modules.get("torch.distributed")
    if timeout <= 0 or (dist is not None and dist.is_available() and dist.is_initialized()):
        return None
    return Watchdog(strategy, timeout).start()
