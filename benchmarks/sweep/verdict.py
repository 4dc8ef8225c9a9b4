"""What the guards say about a configuration, and what Lightning does with it at construction, in this process.

Two independent askings of the guards, with the guards on:

- ``api``: the user's own code: ``lightning_presets.strategy(...)`` when there are overrides, ``Trainer(...)``, then
  ``fit`` with the package's dry run (``tools.simulation.dry_runs``: the ``trainer``, ``model`` and ``setup`` stages
  run on the real LightningModule, nothing trains). Errors (``PresetConfigError``) and warnings (``PresetWarning``)
  are collected with their codes; an error from Lightning itself is kept apart.
- ``check``: ``lightning_presets.tools.verdict.run_check`` with the same Trainer arguments (it sees no model).

The same construction with every guard off (``LIGHTNING_PRESETS_SKIP=all``) says whether Lightning itself refuses
the job at construction, and how many processes it would start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sweep.launch import worker

SKIP = "LIGHTNING_PRESETS_SKIP"


@contextlib.contextmanager
def guards(on: bool) -> Iterator[None]:
    """Every guard on (the variable unset) or off (``all``) for the duration."""
    before = os.environ.pop(SKIP, None)
    if not on:
        os.environ[SKIP] = "all"
    try:
        yield
    finally:
        os.environ.pop(SKIP, None)
        if before is not None:
            os.environ[SKIP] = before


@contextlib.contextmanager
def quiet() -> Iterator[list[warnings.WarningMessage]]:
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield caught
    finally:
        logging.disable(disabled)


def last_line(error: BaseException) -> str:
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {lines[-1]}" if lines else type(error).__name__


@dataclass
class Verdict:
    """The guards' answer: error and warning codes (with messages), or Lightning's own construction error."""

    errors: list[dict[str, str]] = field(default_factory=list)
    warnings: list[dict[str, str]] = field(default_factory=list)
    lightning_error: str | None = None
    stage: str | None = None
    """Where the first error came: ``construction`` (``strategy()``/``Trainer()``) or ``fit`` (the dry run)."""

    @property
    def error_codes(self) -> list[str]:
        return sorted({each["code"] for each in self.errors})

    @property
    def warning_codes(self) -> list[str]:
        return sorted({each["code"] for each in self.warnings})

    def as_dict(self) -> dict[str, Any]:
        return {
            "errors": self.error_codes,
            "warnings": self.warning_codes,
            "lightning_error": self.lightning_error,
            "stage": self.stage,
            "messages": {each["code"]: each["message"] for each in (*self.errors, *self.warnings)},
        }


def _findings(verdict: Verdict, findings: Any) -> None:
    for finding in findings:
        entry = {"code": finding.code, "message": finding.message}
        (verdict.errors if finding.severity == "error" else verdict.warnings).append(entry)


def api_verdict(config: dict[str, Any]) -> Verdict:
    """The guards as the user's script meets them: construction, then ``fit`` up to the first collective."""
    from lightning.pytorch import Trainer

    from lightning_presets import PresetConfigError, PresetWarning
    from lightning_presets.tools.simulation.lightning import dry_runs

    verdict = Verdict()
    with guards(on=True), quiet() as caught:
        stage = "construction"
        try:
            trainer = Trainer(**worker().trainer_arguments(config))
            stage = "fit"
            module = worker().module_class(config)(ghost_chunks=1)
            with dry_runs():
                trainer.fit(module)
        except PresetConfigError as error:
            _findings(verdict, error.findings)
            verdict.stage = stage
        except Exception as error:  # Lightning's own refusal
            verdict.lightning_error = last_line(error)
            verdict.stage = stage
    _findings(verdict, [w.message.finding for w in caught if isinstance(w.message, PresetWarning)])
    return verdict


CHECK_MODEL = "sweep_worker:check_model"
"""The factory ``check --model`` builds the configuration's module with (``tests/scripts/sweep_worker.py``)."""


def check_verdict(config: dict[str, Any], model: bool = False) -> Verdict:
    """``lightning-presets check`` on the same arguments: without a model (its stages after construction do not
    run), or with ``model`` as ``check --model`` on the job's own module (its model-stage rules, and one training
    step under fake tensors: the parameters DDP would wait for, LP732)."""
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    arguments = {"strategy": config["preset"], **worker().plain_arguments(config)}
    request = CheckRequest(
        mode="trainer",
        arguments={key: value for key, value in arguments.items() if key not in worker().QUIET},
        plugins=(config["plugin"],) if config.get("plugin") else (),
        overrides=dict(config["overrides"]),
        model=CHECK_MODEL if model else None,
    )
    verdict = Verdict()
    os.environ[worker().CHECK_CONFIG] = json.dumps(config)
    with guards(on=True), quiet():
        try:
            report = run_check(request)
        except Exception as error:  # a usage error of the check itself is a finding about the check
            verdict.lightning_error = f"check could not run: {last_line(error)}"
            return verdict
        finally:
            os.environ.pop(worker().CHECK_CONFIG, None)
    for reported in report.reported:
        entry = {"code": reported.finding.code, "message": reported.finding.message}
        (verdict.errors if reported.finding.severity == "error" else verdict.warnings).append(entry)
    return verdict


@dataclass
class Construction:
    """The job built with every guard off: Lightning's own error, or the number of processes it starts."""

    world_size: int | None = None
    error: str | None = None


def construct_unguarded(config: dict[str, Any]) -> Construction:
    from lightning.pytorch import Trainer

    with guards(on=False), quiet():
        try:
            trainer = Trainer(**worker().trainer_arguments(config))
        except Exception as error:
            return Construction(error=last_line(error))
    return Construction(world_size=int(trainer.world_size))
