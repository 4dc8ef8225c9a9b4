"""The verdict ``lightning-presets check`` prints: the job checked on simulated hardware (:mod:`.check`) and, for
``--model``, the memory plan of the job's preset against ``--gpu-memory`` (:mod:`.plan.fit`).

It sits above both commands: ``tools.check`` never imports ``tools.plan`` (a contract in pyproject.toml), and the
planner asks the check whether each preset applies to the job (``tools.plan.presets.applicability``).
"""

from __future__ import annotations

from dataclasses import replace

from lightning_presets.tools.check.engine import check_job
from lightning_presets.tools.check.request import CheckReport, CheckRequest, Reported


def run_check(request: CheckRequest, model_timeout_s: float | None = None) -> CheckReport:
    """Validate ``request``, and with ``request.model`` the memory plan of the job's preset (when the job passed).

    Never raises for a bad configuration; only :class:`~lightning_presets.core.findings.UsageError` for a bad request.
    """
    report = check_job(request, model_timeout_s)
    if request.model is None or report.resolved is None or not report.constructed or report.rejected():
        return report
    from lightning_presets.tools.plan.fit import memory_findings  # here: the planner imports torch's tracers

    findings, notes = memory_findings(request.model, request.gpu_memory, report.resolved, request.call())
    memory = tuple(Reported(finding=each, source="check", level=report.evidence) for each in findings)
    reported = tuple(sorted((*report.reported, *memory), key=lambda each: each.finding.severity != "error"))
    known = report.request  # its notes include the model stages' (the rehearsal's among them)
    return replace(report, reported=reported, request=replace(known, notes=(*known.notes, *notes)))
