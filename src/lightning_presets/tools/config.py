"""Reading the ``trainer:`` section of a LightningCLI YAML file for ``check --config``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lightning_presets.core.findings import UsageError

_SKIPPED = ("callbacks", "logger", "profiler")


def trainer_section(path: str) -> tuple[dict[str, Any], list[str]]:
    """The ``trainer:`` mapping of a LightningCLI config, and the keys the check leaves out (with why)."""
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]  # stubs are optional
    except ImportError as error:  # PyYAML comes with lightning[extra] / jsonargparse
        raise UsageError("--config needs PyYAML: pip install pyyaml") from error
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"--config {path}: {error.strerror or error}") from error
    except yaml.YAMLError as error:
        raise UsageError(f"--config {path}: not valid YAML: {error}") from error
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a mapping with a 'trainer:' section")
    section = data.get("trainer", {}) or {}
    if not isinstance(section, dict):
        raise UsageError(f"--config {path}: 'trainer:' must be a mapping, got {type(section).__name__}")
    arguments: dict[str, Any] = {}
    notes = []
    for key, value in section.items():
        if key in _SKIPPED:
            notes.append(f"trainer.{key} is not built by the check (it does not change the strategy)")
        elif key == "strategy" and isinstance(value, dict):
            arguments[key] = _instantiate(path, value)
        elif key == "plugins":
            if value:
                notes.append("trainer.plugins is not built by the check; use --plugin NAME or --precision")
        else:
            arguments[key] = value
    return arguments, notes


def _instantiate(path: str, spec: dict[str, Any]) -> Any:
    """A ``{class_path: ..., init_args: ...}`` strategy, built the way LightningCLI builds it."""
    import importlib

    class_path = spec.get("class_path")
    if not isinstance(class_path, str) or "." not in class_path:
        raise UsageError(f"--config {path}: trainer.strategy needs a 'class_path' such as "
                         "lightning.pytorch.strategies.FSDPStrategy")  # fmt: skip
    module_name, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise UsageError(
            f"--config {path}: cannot import trainer.strategy.class_path {class_path!r}: {error}"
        ) from error
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise UsageError(f"--config {path}: trainer.strategy.init_args must be a mapping")
    return _Deferred(cls, init_args)


class _Deferred:
    """A strategy class and its arguments, instantiated inside the simulation (never at parse time)."""

    def __init__(self, cls: type, init_args: dict[str, Any]) -> None:
        self.cls = cls
        self.init_args = init_args

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in self.init_args.items())
        return f"{self.cls.__name__}({args})"

    def build(self) -> Any:
        return self.cls(**self.init_args)
