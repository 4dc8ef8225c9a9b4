"""Constants and helpers shared by several test files (fixtures live in conftest.py).

Import them the way the tests import ``models``: ``from helpers import QUIET, NAMESPACES``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, ClassVar

import pytest
from torch import nn

from lightning_presets import PresetConfigError

SCRIPTS = Path(__file__).resolve().parent / "scripts"

# Trainer kwargs that silence the logger, progress bar, model summary and checkpointing.
QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}

# (target, constructor module, constructor name) of the four namespaces.
NAMESPACES = [
    ("trainer", "lightning.pytorch", "Trainer"),
    ("fabric", "lightning.fabric", "Fabric"),
    ("pytorch_lightning", "pytorch_lightning", "Trainer"),
    ("lightning_fabric", "lightning_fabric", "Fabric"),
]
NAMESPACE_IDS = [namespace[0] for namespace in NAMESPACES]


def codes(excinfo: pytest.ExceptionInfo[PresetConfigError]) -> tuple[str, ...]:
    return excinfo.value.codes


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """Run the ``lightning-presets`` CLI in this process; its exit code and captured stdout."""
    from lightning_presets.cli import main

    code = main(list(argv))
    return code, capsys.readouterr().out


# --- FSDP1 without CUDA: torch's FullyShardedDataParallel replaced by a recorder (fixture ``recording_fsdp``)


class RecordingFSDP(nn.Module):
    """Stands in for torch's FullyShardedDataParallel: records the wrap arguments, returns the module."""

    calls: ClassVar[list[dict[str, Any]]] = []

    def __new__(cls, module: nn.Module | None = None, **kwargs: Any) -> Any:
        if module is None:  # a "manually wrapped" marker instance
            return super().__new__(cls)
        cls.calls.append(kwargs)
        return module


def setup_model(strategy: Any, model: nn.Module) -> nn.Module:
    """The hook each side overrides: ``_setup_model`` (Trainer) or ``setup_module`` (Fabric)."""
    if hasattr(strategy, "_setup_model"):
        return strategy._setup_model(model)  # type: ignore[no-any-return]
    return strategy.setup_module(model)  # type: ignore[no-any-return]


def wrapped_modules(policy: Any, model: nn.Module) -> set[nn.Module]:
    """The modules an FSDP wrap policy selects in ``model`` (what FSDP and checkpointing would wrap)."""
    return set(policy._run_policy(model, set(), {}))


def run_python(
    code: str, *args: str, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter of this environment and capture its output."""
    full_env = {**os.environ, "PYTHONWARNINGS": "default", **(env or {})}
    return subprocess.run(
        [sys.executable, *args, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=timeout,
        check=False,
    )


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run ``lightning-presets *argv`` in this process: (exit code, stdout, stderr); never a traceback."""
    from lightning_presets.cli import main

    try:
        code = main(list(argv))
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return code, out, err
