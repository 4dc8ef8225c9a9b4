"""Tracing a user's model for ``plan --model``, in a child process: ``python -m lightning_presets.tools.plan.worker``.

The parent (:func:`run`) starts the child with an empty stdin and reads one JSON event per line from it:
``progress``, ``estimate``, ``parameters``, ``error``. The child writes its events on the stdout it was started
with and sends everything else (the user's prints, torch's warnings) to stderr, which the parent keeps for
its messages. A factory that raises, exits or reads stdin is reported by the child as an ``error``; one
that aborts the interpreter (``os.abort()``, a crash in native code) ends the child, and the parent says
so. :func:`plan_in_process` is the work itself, for tests and for callers that already run isolated.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import IO, Any

from lightning_presets.tools.plan.estimates import (
    MAX_BATCH,
    Estimate,
    PlanRequest,
    Progress,
    applicability,
    arithmetic_estimate,
    mesh_sizes,
    plannable,
    traced_estimate,
    with_max_batch,
)

_MODULE = "lightning_presets.tools.plan.worker"
_STDERR_TAIL = 1500


class PlanFailed(Exception):
    """The model could not be planned; the message says why (the CLI's usage error, exit 2)."""


# --------------------------------------------------------------------------------------------- the parent


def run(request: PlanRequest, progress: Progress | None = None) -> tuple[list[Estimate], int | None]:
    """Plan ``request.model`` in a child process: its estimates and parameter count, or :class:`PlanFailed`."""
    payload = json.dumps({"request": request.as_dict(), "sys_path": [entry or os.getcwd() for entry in sys.path]})
    estimates: list[Estimate] = []
    errors: list[str] = []
    parameters = None
    timed_out = threading.Event()
    with (
        tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace") as stderr,
        subprocess.Popen(
            [sys.executable, "-m", _MODULE, payload],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=stderr, text=True, encoding="utf-8",
        ) as process,
    ):  # fmt: skip

        def stop() -> None:
            timed_out.set()
            process.kill()

        timer = threading.Timer(request.timeout_s, stop)
        timer.start()
        try:
            for event in _events(process.stdout):
                kind = event.get("event")
                if kind == "progress" and progress is not None:
                    progress(str(event["what"]), int(event["done"]), int(event["total"]))
                elif kind == "estimate":
                    estimates.append(Estimate.from_dict(event["estimate"]))
                elif kind == "parameters":
                    parameters = int(event["parameters"])
                elif kind == "error":
                    errors.append(str(event["message"]))
            code = process.wait()
        except BaseException:  # Ctrl-C or a broken reader: the child must not outlive the plan
            process.kill()
            raise
        finally:
            timer.cancel()
        stderr.seek(0)
        tail = stderr.read()[-_STDERR_TAIL:].strip()
    if errors:
        raise PlanFailed(errors[0])
    if code != 0 or not estimates:
        raise PlanFailed(_ended(request, code, tail, timed_out=timed_out.is_set()))
    return estimates, parameters


def _events(stream: IO[str] | None) -> Iterator[dict[str, Any]]:
    for line in stream or ():
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            yield event


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


def main(argv: list[str]) -> int:
    """The child: plan the request in ``argv[1]``, one JSON event per line on the original stdout."""
    events = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
    os.dup2(2, 1)  # whatever the user's code prints goes to stderr, never into the events
    sys.stdout = sys.stderr

    def emit(**event: Any) -> None:
        events.write(json.dumps(event) + "\n")

    payload = json.loads(argv[1])
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
    from lightning_presets.tools.plan import trace, user_model

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
            with trace.fake_world(request.world_size):
                estimates = [tracer.estimate(*job) for job in jobs]
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
        self.done = self.total = 0
        self.facts: Any = None

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
                self.cache[key] = trace.trace(self.factory, self.spec, layout, precision=self.request.precision,
                                              optimizer=self.request.optimizer, mesh_sizes=mesh,
                                              batch_size=batch, optimize=layout.traceable)  # fmt: skip
            except trace.TraceError as error:
                self.cache[key] = error
            self.done += 1
            self.progress(what, self.done, max(self.total, self.done))
        return self.cache[key]

    def estimate(self, preset: Any, layout: Any, reasons: list[str], install: str | None) -> Estimate:
        from lightning_presets.tools.plan import trace

        if reasons:
            return arithmetic_estimate(preset, layout, self.request, self.numel(), self.facts)
        traced = self.trace(preset, layout, self.request.batch_size)
        if isinstance(traced, trace.NotApplicable):
            return arithmetic_estimate(preset, layout, self.request, self.numel(), self.facts, (str(traced),))
        if isinstance(traced, trace.TraceError):  # this preset's wrapping or step failed: the others go on
            failed = arithmetic_estimate(preset, layout, self.request, self.numel(), self.facts)
            return with_why(failed, evidence="failed", fits=False, why=f"the trace failed: {traced}")
        return traced_estimate(layout, self.request, traced, reasons, install)

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
    sys.exit(main(sys.argv))
