"""``lightning-presets check``: validate a job for a target cluster without launching anything.

:func:`check_job` builds the real ``Trainer``/``Fabric`` on simulated hardware through the same guards as a user's
script (``engine``) and adds the cluster-consistency findings (``cluster``). The memory plan ``--model`` adds is
planned above this package (:func:`lightning_presets.tools.verdict.run_check`): the check never imports the planner.
"""

from __future__ import annotations

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
    "Evidence", "Reported", "Source", "check_job", "parse_value",
]  # fmt: skip
