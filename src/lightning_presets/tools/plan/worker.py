"""Tracing a user's model for ``plan --model``, in a child process: ``python -m lightning_presets.tools.plan.worker``.

The parent (:func:`run`) starts the child in a process group of its own, writes the request to its stdin
(any length: no argument list to overflow) and reads one JSON event per line from its stdout: ``progress``,
``estimate``, ``parameters``, ``error``. The child reads the request, then gives the user's code an empty
stdin; it writes its events on the stdout it was started with and sends everything else (the user's prints,
torch's warnings) to stderr, of which the parent keeps the last few KiB for its messages. A factory that
raises, exits, reads stdin or calls ``breakpoint()`` is reported by the child as an ``error``; one that aborts
the interpreter ends the child, and the parent says so. When the child ends or ``timeout_s`` runs out, the
whole group is killed: a helper process the factory started does not outlive the plan.
:func:`plan_in_process` is the work itself, for tests and for callers that already run isolated.
"""

from __future__ import annotations

import contextlib
import gc
import json
import math
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable
from typing import IO, Any

from lightning_presets.tools.plan.estimates import Estimate, arithmetic_estimate, traced_estimate, with_max_batch
from lightning_presets.tools.plan.presets import applicability, mesh_sizes, plannable
from lightning_presets.tools.plan.request import MAX_BATCH, PlanRequest, Progress, import_path
from lightning_presets.tools.simulation.processes import kill_group, terminated_as_interrupt

_MODULE = "lightning_presets.tools.plan.worker"
STDERR_TAIL = 4096
"""Bytes of the child's stderr the parent keeps (the last ones): enough for a message, never more."""
_SHOWN_TAIL = 1500


class PlanFailed(Exception):
    """The model could not be planned; the message says why (the CLI's usage error, exit 2)."""


# --------------------------------------------------------------------------------------------- the parent


def run(request: PlanRequest, progress: Progress | None = None) -> tuple[list[Estimate], int | None]:
    """Plan ``request.model`` in a child process: its estimates and parameter count, or :class:`PlanFailed`."""
    payload = json.dumps({"request": request.as_dict(), "sys_path": import_path()}).encode()
    estimates: list[Estimate] = []
    errors: list[str] = []
    parameters = None
    process = subprocess.Popen(
        [sys.executable, "-m", _MODULE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True, env=_child_environment(),
    )  # fmt: skip
    events: queue.Queue[dict[str, Any] | None] = queue.Queue()
    tail = bytearray()
    readers = [threading.Thread(target=_read_events, args=(process.stdout, events), daemon=True),
               threading.Thread(target=_read_tail, args=(process.stderr, tail), daemon=True)]  # fmt: skip
    for reader in readers:
        reader.start()
    deadline = time.monotonic() + request.timeout_s
    timed_out = False

    def take(event: dict[str, Any]) -> None:
        nonlocal parameters
        kind = event.get("event")
        if kind == "progress" and progress is not None:
            progress(str(event["what"]), int(event["done"]), int(event["total"]))
        elif kind == "estimate":
            estimates.append(Estimate.from_dict(event["estimate"]))
        elif kind == "parameters":
            parameters = int(event["parameters"])
        elif kind == "error":
            errors.append(str(event["message"]))

    try:
        with terminated_as_interrupt():  # SIGTERM/SIGHUP: the finally below still kills the child's group
            with contextlib.suppress(BrokenPipeError), process.stdin or contextlib.nullcontext():
                if process.stdin is not None:
                    process.stdin.write(payload)
            while not _exited(process):  # not the end of its stdout: the child may still be tearing down
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                with contextlib.suppress(queue.Empty):
                    if event := events.get(timeout=0.2):
                        take(event)
    finally:  # Ctrl-C, SIGTERM, a broken reader, the end or the timeout: nothing the child started outlives the plan
        _kill_group(process)
        code = process.wait()
        for reader in readers:
            reader.join(timeout=5)
    while not events.empty():  # what the child wrote before it ended
        if event := events.get_nowait():
            take(event)
    if errors:
        raise PlanFailed(errors[0])
    if timed_out or code != 0 or not estimates:
        text = bytes(tail).decode("utf-8", errors="replace")[-_SHOWN_TAIL:].strip()
        raise PlanFailed(_ended(request, code, text, timed_out=timed_out))
    return estimates, parameters


def _child_environment() -> dict[str, str]:
    """This environment, with the folder this package was imported from first on ``PYTHONPATH``: the child runs
    this copy of the worker, whatever the caller's ``PYTHONPATH`` says (the rest of the path comes on stdin)."""
    from pathlib import Path

    here = str(Path(__file__).resolve().parents[3])  # .../lightning_presets/tools/plan/worker.py -> its folder
    rest = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": here + (os.pathsep + rest if rest else "")}


def _exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the child has ended, leaving it unreaped: its process group id stays reserved until it is waited
    for, so killing the group afterwards cannot reach a stranger that reused the number."""
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _kill_group(process: subprocess.Popen[bytes]) -> None:
    kill_group(process.pid)


def _read_events(stream: IO[bytes] | None, events: queue.Queue[dict[str, Any] | None]) -> None:
    for line in stream or ():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.put(event)
    events.put(None)


def _read_tail(stream: IO[bytes] | None, tail: bytearray) -> None:
    """Read ``stream`` to its end, keeping only its last :data:`STDERR_TAIL` bytes in ``tail``."""
    while stream is not None and (chunk := stream.read1(65536)):  # type: ignore[attr-defined]
        tail += chunk
        del tail[:-STDERR_TAIL]


def _ended(request: PlanRequest, code: int, tail: str, *, timed_out: bool) -> str:
    what = f"planning --model {request.model}"
    if timed_out:
        return f"{what} took longer than {request.timeout_s:g} s and was stopped"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        text = f"{what} ended with {name}: the factory or the model aborted the interpreter"
    else:
        text = f"{what} ended with exit code {code} and no plan"
    return text + (f"; its last output:\n{tail}" if tail else "")


# --------------------------------------------------------------------------------------------- the child


def main() -> int:
    """The child: plan the request read from stdin, one JSON event per line on the original stdout."""
    payload = json.loads(sys.stdin.buffer.read())
    empty = os.open(os.devnull, os.O_RDONLY)
    os.dup2(empty, 0)  # the user's code finds an empty stdin
    os.close(empty)
    events = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # whatever the user's code prints goes to stderr, never into the events
    sys.stdout = sys.stderr

    def emit(**event: Any) -> None:
        events.write(json.dumps(event) + "\n")

    sys.path[:] = list(dict.fromkeys([*payload["sys_path"], *sys.path]))
    try:
        request = PlanRequest.from_dict(payload["request"])
        estimates, parameters = plan_in_process(
            request, lambda what, done, total: emit(event="progress", what=what, done=done, total=total)
        )
    except PlanFailed as error:
        emit(event="error", message=str(error))
        return 0
    for estimate in estimates:
        emit(event="estimate", estimate=estimate.as_dict())
    emit(event="parameters", parameters=parameters)
    return 0


def plan_in_process(request: PlanRequest, progress: Progress | None = None) -> tuple[list[Estimate], int]:
    """Trace ``request.model`` under every plannable preset in this process (which must hold no process group).

    Raises :class:`PlanFailed` when the model itself cannot be built, given an input or an optimizer.
    """
    from lightning_presets.tools.simulation import user_model, world

    report = progress or (lambda what, done, total: None)
    spec = str(request.model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            factory = user_model.load_factory(spec)
            tracer = _Tracer(factory, spec, request, report)
            report(f"building {spec} under fake tensors", 0, 1)
            tracer.numel()  # builds the model once: a factory that fails, fails before anything else runs
            jobs = [(preset, layout, *applicability(preset, layout, request)) for preset, layout in plannable(request)]
            tracer.total = len({tracer.key(job[0], job[1], request.batch_size) for job in jobs if not job[2]})
            with world.fake_world(request.world_size):
                estimates = [tracer.estimate(*job) for job in jobs]
                tracer.check_something_traced()
                if request.max_batch:
                    layouts = [job[1] for job in jobs]
                    estimates = [
                        tracer.largest_batch(each, layout) for each, layout in zip(estimates, layouts, strict=True)
                    ]
        except user_model.ModelError as error:
            raise PlanFailed(str(error)) from None
    return estimates, tracer.numel()


class _Tracer:
    """Traces once per distinct wrapping (DDP presets share one; FSDP1 presets share the unwrapped model)."""

    def __init__(self, factory: Callable[[], Any], spec: str, request: PlanRequest, progress: Progress) -> None:
        self.factory, self.spec, self.request, self.progress = factory, spec, request, progress
        self.cache: dict[tuple[Any, ...], Any] = {}
        self.done = self.total = self.traced = 0
        self.failures: list[str] = []
        self.facts: Any = None
        self._stack: Any = None

    def key(self, preset: Any, layout: Any, batch: int | None) -> tuple[Any, ...]:
        """What makes two traces differ: presets with equal keys share one trace."""
        compute = layout.compute_for(self.request.precision)
        if not layout.traceable:  # the model unwrapped: only its activations and temporaries are used
            return ("unwrapped", compute, layout.checkpoint, batch)
        mesh = tuple((mesh_sizes(preset, layout, self.request) or {}).items())
        return (layout.family, layout.kind, compute, layout.checkpoint, layout.offload, mesh, batch)

    def trace(self, preset: Any, layout: Any, batch: int | None) -> Any:
        from lightning_presets.tools.plan import trace

        key = self.key(preset, layout, batch)
        mesh = mesh_sizes(preset, layout, self.request)
        if key not in self.cache:
            what = f"tracing {preset.name}" + (f" at batch {batch}" if batch else "")
            self.progress(what, self.done, max(self.total, self.done + 1))
            try:
                self.cache[key] = self._traced(layout, mesh, batch)
            except trace.TraceError as error:
                self.cache[key] = error
            self.done += 1
            self.progress(what, self.done, max(self.total, self.done))
        return self.cache[key]

    def _run(self, layout: Any, mesh: Any, batch: int | None, blocks: int | None = None) -> Any:
        from lightning_presets.tools.plan import trace

        return trace.trace(self.factory, self.spec, layout, precision=self.request.precision,
                           optimizer=self.request.optimizer, mesh_sizes=mesh, batch_size=batch,
                           batch=self.request.batch, kernels=self.request.kernels, optimize=layout.traceable,
                           gpus_per_node=self.request.gpus_per_node, stack=self.stack() if blocks else None,
                           blocks=blocks)  # fmt: skip

    def _traced(self, layout: Any, mesh: Any, batch: int | None) -> Any:
        """The step traced with 3 and 4 of the model's blocks and extrapolated (:mod:`.depth`) where its structure
        allows it, else (or when the shortened model does not trace, or does not add up, or the request asks for the
        full trace) in full."""
        from dataclasses import replace

        from lightning_presets.tools.plan import depth, trace
        from lightning_presets.tools.simulation import user_model

        stack = None if self.request.full_trace else self.stack()
        why = "--full-trace" if self.request.full_trace else stack if isinstance(stack, str) else None
        if isinstance(stack, depth.Stack) and stack.count >= depth.EXTRAPOLATE_FROM:
            try:
                small, large = (self._run(layout, mesh, batch, blocks) for blocks in depth.TRACED_BLOCKS)
                return depth.extrapolate(small, large, stack, self.numel())
            except trace.NotApplicable:
                raise
            except (trace.TraceError, user_model.ModelError, depth.NotExtrapolable) as error:
                why = f"extrapolating from {depth.TRACED_BLOCKS[0]} and {depth.TRACED_BLOCKS[1]} blocks failed: {error}"
        full = self._run(layout, mesh, batch)
        if why and self.facts.block_params and full.facts.numel >= depth.EXTRAPOLATE_FROM * self.facts.block_params:
            return replace(full, notes=(*full.notes, f"every block traced (not extrapolated: {why})"))
        return full

    def stack(self) -> Any:
        """The model's repeated stack (:class:`.depth.Stack`), or why it has none to extrapolate over."""
        if self._stack is None:
            from torch._subclasses.fake_tensor import FakeTensorMode

            from lightning_presets.tools.plan import depth, trace
            from lightning_presets.tools.simulation import step
            from lightning_presets.tools.simulation.tracing import as_on_a_real_run

            with as_on_a_real_run(), FakeTensorMode(allow_non_fake_inputs=True), step.eager():
                model, _ = trace.build(self.factory, self.spec)
                self._stack = depth.repeated_stack(model)
        return self._stack

    def estimate(self, preset: Any, layout: Any, reasons: list[str], install: str | None) -> Estimate:
        from lightning_presets.tools.plan import trace

        if reasons:
            return arithmetic_estimate(preset, layout, self.request, self.numel(), self.facts)
        traced = self.trace(preset, layout, self.request.batch_size)
        if isinstance(traced, trace.NotApplicable):
            return arithmetic_estimate(preset, layout, self.request, self.numel(), self.facts, (str(traced),))
        if isinstance(traced, trace.TraceError):  # this preset's wrapping or step failed: the others go on
            self.failures.append(f"{preset.name}: {traced}")
            failed = arithmetic_estimate(preset, layout, self.request, self.numel(), self.facts)
            return with_why(failed, evidence="failed", fits=False, why=f"the trace failed: {traced}")
        self.traced += 1
        return traced_estimate(layout, self.request, traced, reasons, install, mesh_sizes(preset, layout, self.request))

    def check_something_traced(self) -> None:
        """A plan of presets none of which could be traced has no figures to judge by: it is a failure."""
        if self.failures and not self.traced:
            raise PlanFailed(f"--model {self.spec} could not be traced under any preset; {self.failures[0]}")

    def numel(self) -> int:
        if self.facts is None:
            from lightning_presets.tools.plan import trace

            self.facts = trace.model_facts(self.factory, self.spec)
        return int(self.facts.numel)

    def largest_batch(self, estimate: Estimate, layout: Any) -> Estimate:
        """The largest micro-batch at which the preset still fits on the GPU, by traced runs."""
        if not estimate.applicable or estimate.evidence == "failed":
            return estimate
        if estimate.batch is None:
            return with_max_batch(estimate, None, "example_input_array has no common batch dimension")
        preset = next(p for p, each in plannable(self.request) if each.preset == estimate.preset)
        self.total += 4

        def peak(batch: int) -> float:
            traced = self.trace(preset, layout, batch)
            if not hasattr(traced, "facts"):
                raise PlanFailed(f"{estimate.preset} at batch {batch}: {traced}")
            return traced_estimate(layout, self.request, traced, [], None).total_peak

        try:
            found = search_batch(peak, estimate.usable_gpu_bytes, estimate.batch)
        except PlanFailed as error:
            return with_max_batch(estimate, None, f"the search stopped: {error}")
        if found is None:
            return with_max_batch(estimate, None, "not even a batch of 1 fits")
        note = f"at most {MAX_BATCH} searched" if found >= MAX_BATCH else None
        return with_max_batch(estimate, found, note)


def with_why(estimate: Estimate, *, evidence: str, fits: bool, why: str) -> Estimate:
    from dataclasses import replace

    return replace(estimate, evidence=evidence, fits=fits, why=(*estimate.why, why))


def search_batch(peak: Callable[[int], float], usable: float, start: int) -> int | None:
    """The largest batch ``b`` with ``peak(b) <= usable`` (``None`` if not even 1), assuming the peak grows with
    the batch. Each probe is a trace: probes follow a line through the two last measured points (memory is
    close to affine in the batch), clamped into the bracket, and fall back to doubling or bisection."""
    measured: dict[int, float] = {}
    low, high = 0, None  # largest batch known to fit, smallest known not to
    probe = start
    while True:
        measured[probe] = peak(probe)
        if measured[probe] <= usable:
            low = probe
        else:
            high = probe
        if (high is not None and high - low <= 1) or low >= MAX_BATCH or (high == 1):
            return low or None
        probe = _next_probe(measured, usable, low, high)


def _next_probe(measured: dict[int, float], usable: float, low: int, high: int | None) -> int:
    """The next batch to trace: on the line through the two probes nearest the limit, else double or bisect."""
    ceiling = (high - 1) if high is not None else MAX_BATCH
    fallback = min(ceiling, max(low * 2, low + 1)) if high is None else (low + high) // 2
    if len(measured) >= 2:
        (b1, p1), (b2, p2) = sorted(sorted(measured.items(), key=lambda point: abs(point[1] - usable))[:2])
        slope = (p2 - p1) / (b2 - b1)
        if slope > 0:
            guess = min(ceiling, max(low + 1, math.floor(b1 + (usable - p1) / slope)))
            if guess not in measured:
                return guess
    return max(low + 1, min(ceiling, fallback))


if __name__ == "__main__":
    code = main()
    # Every event is written: the exit's collections then skip the heap of torch and the traced model (seconds of
    # the child's end, which the parent waits for); atexit handlers and the interpreter's flushes still run.
    gc.freeze()
    sys.exit(code)
