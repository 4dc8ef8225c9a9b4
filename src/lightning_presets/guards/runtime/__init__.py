"""What the guards do once the job runs: the start-up handshake of fingerprints across ranks (``handshake``), the
join watchdog while the process group forms (``join``) and, in diagnose mode, the install of the hang report
(:mod:`lightning_presets.diagnose`, below the guards: it explains a stuck run, it refuses nothing).

``guards.strategy.Guarded.setup_environment`` calls :func:`around_process_group` in every preset family, for the
Trainer and Fabric. Nothing here may break a run that plain Lightning would have run: our own failures become the
warnings LP032 and LP035, never an error blamed on the user.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from lightning_presets.core.context import accelerator_name
from lightning_presets.core.findings import report
from lightning_presets.guards.runtime.codes import DIAGNOSE_FAILED, HANDSHAKE_FAILED
from lightning_presets.registry import variables


def distributed(strategy: Any) -> bool:
    """Whether the strategy forms a process group of its own that the runtime guards can use (not XLA, not one
    process): the world the guards read (``Context.world_size``: the launcher's where it made the world, as Ray's
    workers with ``devices="auto"``), else devices × num_nodes."""
    try:
        if accelerator_name(getattr(strategy, "accelerator", None)) == "xla":
            return False
        context = getattr(strategy, "_lp_context", None)
        if context is not None:
            return int(context.world_size) > 1
        return int(getattr(strategy, "num_processes", 1) or 1) * int(getattr(strategy, "num_nodes", 1) or 1) > 1
    except Exception:  # a strategy that cannot say: no runtime guard
        return False


def _warn_own_failure(what: str, error: BaseException, code: Any) -> None:
    report([code.finding(
        f"{what} failed inside lightning-presets ({type(error).__name__}: {error}); the run goes on without it",
        "please report it with this message; the variable in this hint switches it off meanwhile: "
        f"{variables.HANDSHAKE_VARIABLE}=0 (handshake), {variables.DIAGNOSE_VARIABLE}=0 (hang report)",
    )])  # fmt: skip


@contextlib.contextmanager
def around_process_group(strategy: Any) -> Iterator[None]:
    """Around Lightning's ``setup_environment``: the join watchdog while the process group forms; then the
    handshake, and in diagnose mode the collective recorder, before the model's first collective."""
    watch: Any = None
    if distributed(strategy):
        try:
            from lightning_presets.guards.runtime.join import start_watchdog

            watch = start_watchdog(strategy)
        except Exception as error:
            _warn_own_failure("the join watchdog", error, HANDSHAKE_FAILED)
    try:
        yield
    finally:
        if watch is not None:
            watch.stop()
    if not distributed(strategy) or not _initialized():
        return
    if variables.handshake_enabled() and handshake_supported():
        from lightning_presets.guards.runtime.handshake import handshake

        handshake(strategy)  # raises LP030 on a mismatch; warns LP032 on its own failure
    if variables.diagnose_enabled():
        _guarded("diagnose mode", DIAGNOSE_FAILED, lambda: _diagnose(strategy))


HANDSHAKE_FROM_TORCH = (2, 7)
"""The oldest torch release the handshake runs on: every release the package supports. Below it the handshake is
skipped and the run goes on as plain Lightning's. On torch 2.7 a rank used to hang for good in the handshake, in the
destructor of its gloo side group (which joins the group's worker threads while holding the GIL, and a worker that
drops the last reference to a tensor Python has let go of waits for the GIL); ``handshake.gather`` keeps its
tensors referenced until the group is gone."""


def handshake_supported() -> bool:
    """Whether the installed torch is one the handshake has been run on (:data:`HANDSHAKE_FROM_TORCH` or newer)."""
    torch: Any = sys.modules.get("torch")
    version = str(getattr(torch, "__version__", "0"))
    numbers = []
    for part in version.split("+")[0].split(".")[:2]:
        digits = "".join(ch for ch in part if ch.isdigit())
        numbers.append(int(digits or 0))
    return tuple(numbers) >= HANDSHAKE_FROM_TORCH


def _initialized() -> bool:
    dist: Any = sys.modules.get("torch.distributed")
    try:
        return bool(dist is not None and dist.is_available() and dist.is_initialized())
    except Exception:
        return False


def _diagnose(strategy: Any) -> None:
    from lightning_presets.diagnose.hangs import install

    install(strategy)


def _guarded(what: str, code: Any, action: Callable[[], None]) -> None:
    try:
        action()
    except Exception as error:
        _warn_own_failure(what, error, code)
