"""``lightning-presets check``: validate a job for a target cluster without launching anything.

:func:`run_check` builds the real ``Trainer``/``Fabric`` on simulated hardware through the same guards as a user's
script (``engine``), adds the cluster-consistency findings (``cluster``) and, for ``--model``, the memory plan of the
job's preset (``lightning_presets.tools.plan.fit``).
"""

from __future__ import annotations

from dataclasses import replace

from lightning_presets.tools.check.engine import CODES, FABRIC_KEYS, TRAINER_SETTINGS, check_job
from lightning_presets.tools.check.request import (
    SCHEMA,
    SCHEMA_VERSION,
    CheckReport,
    CheckRequest,
    Evidence,
    Reported,
    Source,
    parse_value,
)

__all__ = [
    "CODES", "FABRIC_KEYS", "SCHEMA", "SCHEMA_VERSION", "TRAINER_SETTINGS", "CheckReport", "CheckRequest",
    "Evidence", "Reported", "Source", "check_job", "parse_value", "run_check",
]  # fmt: skip


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
