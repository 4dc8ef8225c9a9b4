"""What ``lightning-presets check`` is asked (:class:`CheckRequest`) and what it answers (:class:`CheckReport`)."""

from __future__ import annotations

import ast
import json
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

from lightning_presets.core.findings import Finding
from lightning_presets.core.namespaces import Kind, constructor
from lightning_presets.registry import catalog
from lightning_presets.tools.check.resolved import Resolved

COMMAND = "lightning-presets check"
SCHEMA = "lightning-presets/check"
SCHEMA_VERSION = 1
Evidence = Literal["import", "syntax", "construction"]
Source = Literal["guard", "lightning", "check", "catalog", "model"]
_EMPTY: Mapping[str, Any] = MappingProxyType({})


class _Source(str):
    """Text shown as code: its repr is itself."""

    def __repr__(self) -> str:
        return str(self)


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckRequest:
    """A job to validate: Trainer/Fabric arguments, preset overrides and the simulated target."""

    mode: Kind = "trainer"
    """The kind of job (``--mode``): ``trainer`` or ``fabric``."""
    arguments: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Trainer/Fabric arguments given explicitly (flags over the config file); nothing else is passed."""
    plugins: tuple[str, ...] = ()
    """Precision-preset names."""
    overrides: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Preset (or Lightning strategy) constructor overrides, from ``--set``."""
    gpus: int = 0
    """Simulated GPUs per node (0: a CPU-only node)."""
    gpu_capability: tuple[int, int] = (9, 0)
    gpu_memory: int | None = None
    """Bytes of memory per simulated GPU, for guards that read it."""
    cluster: str = "none"
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Extra environment variables of the job (applied last)."""
    interactive: bool = False
    """Simulate a notebook / interactive session."""
    notes: tuple[str, ...] = ()
    """What the request leaves out (e.g. config keys the check does not build); reported as given."""
    resume_from: str | None = None
    """A checkpoint the job resumes from (``fit(ckpt_path=...)``, ``Fabric.load``): the preset's resume rules read
    its facts (never its tensors) against the constructed job."""
    model: str | None = None
    """``MODULE:FACTORY``: the model the preset's model-stage rules decide on (``tools.check.stages``) and whose
    memory :func:`~lightning_presets.tools.verdict.run_check` plans under the job's preset against ``gpu_memory``
    (``tools.plan.fit``: LP730-LP731)."""
    datamodule: str | None = None
    """``MODULE:FACTORY`` of a ``LightningDataModule`` (with :attr:`model`): the rehearsal's first batches come from
    its ``train_dataloader()`` (and ``val_dataloader()``), as ``fit(model, datamodule=...)`` takes them."""

    @property
    def constructor(self) -> str:
        """``Trainer`` or ``Fabric``: :attr:`mode` as messages write it."""
        return constructor(self.mode)

    @property
    def package(self) -> str:
        return "lightning.pytorch" if self.mode == "trainer" else "lightning.fabric"

    def call(self) -> str:
        arguments = dict(self.arguments)
        if self.overrides and isinstance(arguments.get("strategy"), str):
            name = arguments["strategy"]
            overrides = "".join(f", {key}={shown(value)}" for key, value in self.overrides.items())
            arguments["strategy"] = _Source(
                f"lightning_presets.strategy({name!r}{overrides})" if name in catalog.strategy_catalog().presets
                else f"<{name!r} built with {overrides.removeprefix(', ')}>"
            )  # fmt: skip
        parts = [f"{key}={shown(value)}" for key, value in arguments.items() if key != "plugins"]
        if self.plugins:
            plugins = ", ".join(f"lightning_presets.precision({name!r})" for name in self.plugins)
            parts.append(f"plugins=[{plugins}]")
        return f"{self.constructor}({', '.join(parts)})"

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "mode": self.mode,
            "arguments": {key: _echoed(value) for key, value in self.arguments.items()},
            "plugins": list(self.plugins),
            "overrides": {key: _echoed(value) for key, value in self.overrides.items()},
        }
        if self.model is not None:
            data["model"] = self.model
        if self.datamodule is not None:
            data["datamodule"] = self.datamodule
        return data


@dataclass(frozen=True, slots=True, kw_only=True)
class Reported:
    """A finding and where it came from."""

    finding: Finding
    source: Source
    """``guard`` (a preset rule), ``lightning`` (Lightning's own error), ``check``, ``catalog``, or ``model``: a
    condition every model of the job must meet, named when no ``--model`` decides it (``--strict`` lets it pass)."""
    level: Evidence
    """The evidence level it was found at."""

    def as_dict(self) -> dict[str, str]:
        return {**self.finding.as_dict(), "source": self.source, "level": self.level}


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckReport:
    """The outcome of a check: findings, how far it got, and what Lightning resolved."""

    request: CheckRequest
    reported: tuple[Reported, ...]
    evidence: Evidence
    constructed: bool
    """Whether the Trainer/Fabric object was built."""
    resolved: Resolved | None
    lightning_warnings: tuple[str, ...]
    simulated: Mapping[str, Any]
    elapsed_ms: float

    @property
    def findings(self) -> tuple[Finding, ...]:
        return tuple(each.finding for each in self.reported)

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(finding.code for finding in self.findings)

    def rejected(self, strict: bool = False) -> bool:
        """Whether an error was found, or with ``strict`` any warning but the model's conditions (``--model`` decides
        those: a job without it would otherwise never pass)."""
        return any(each.finding.severity == "error" or (strict and each.source != "model") for each in self.reported)

    def exit_code(self, strict: bool = False) -> int:
        return 1 if self.rejected(strict) else 0

    def as_dict(self, strict: bool = False) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "valid": not self.rejected(strict),
            "strict": strict,
            "exit_code": self.exit_code(strict),
            "call": self.request.call(),
            "request": self.request.as_dict(),
            "evidence": {"level": self.evidence, "constructed": self.constructed, "simulated": dict(self.simulated)},
            "resolved": self.resolved.as_dict() if self.resolved else None,
            "findings": [each.as_dict() for each in self.reported],
            "lightning_warnings": list(self.lightning_warnings),
            "elapsed_ms": round(self.elapsed_ms, 3),
            "notes": list(self.request.notes),
        }


MAX_ECHO = 400
"""The most characters of one value the check echoes (in the call it prints and its JSON's ``request``): a pasted
120 KB DeepSpeed config is the user's own input, not output."""
_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxset = 3, 6, 6, 6, 6
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 60, 60, 40


def shown(value: Any) -> str:
    """``repr(value)``, or when that is longer than :data:`MAX_ECHO`, its outline (``{'a': {...}, ...}``) and its
    length."""
    if isinstance(value, _Source):
        return repr(value)
    try:
        text = repr(value)
    except Exception:  # a value whose repr fails is still shown
        return f"<{type(value).__name__}>"
    if len(text) <= MAX_ECHO:
        return text
    outline = _SHORT.repr(value)[: MAX_ECHO - 40]
    return f"{outline} <{len(text):,} characters>"


def _echoed(value: Any) -> Any:
    """The JSON of a value the user gave, or :func:`shown` text when it is longer than :data:`MAX_ECHO`."""
    data = _jsonable(value)
    text = json.dumps(data, ensure_ascii=False, default=str)
    return data if len(text) <= MAX_ECHO else shown(value)


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, Mapping):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return repr(value)


def parse_value(text: str) -> Any:
    """A ``--set``/``--env``/Trainer-flag value: a Python literal or JSON (a pasted DeepSpeed config with ``true`` and
    ``null``) when it is one, else the string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):  # TypeError: `{[1]}` is unhashable
        pass
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text
