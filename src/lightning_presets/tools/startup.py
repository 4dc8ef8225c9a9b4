"""What ``doctor`` says of the start-up hook: whether autoload is on, and whether the ``.pth`` file and the hook module
it imports are where the interpreter will find them (LP722, LP723)."""

from __future__ import annotations

import os
import site
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lightning_presets.core.codes import Code
from lightning_presets.core.environment import AUTOLOAD_VARIABLE, autoload_enabled
from lightning_presets.core.findings import Finding, Severity
from lightning_presets.registry.requirements import is_importable

DOCTOR = "lightning-presets doctor"
PTH_NAME = "lightning_presets_autoload.pth"
HOOK_MODULE = "_lightning_presets_autoload"
REINSTALL = "pip install --force-reinstall --no-deps lightning-presets"

AUTOLOAD_OFF = Code(
    stage="doctor",
    code="LP722", severity="warning", title="autoload turned off by LIGHTNING_PRESETS_AUTOLOAD",
    fails=f"LIGHTNING_PRESETS_AUTOLOAD=0 {DOCTOR}",
    fixed=f"{DOCTOR}   # LIGHTNING_PRESETS_AUTOLOAD unset, or `import lightning_presets` in the script",
)  # fmt: skip


def doctor_code(code: str, severity: Severity, title: str, fails: str, fixed: str, evidence: str = "") -> Code:
    """A code of ``doctor``: its examples are the doctor command, with what the machine has (``fails``) and what it
    has once fixed (``fixed``) as the comment."""
    return Code(code=code, stage="doctor", severity=severity, title=title, fails=f"{DOCTOR}   # {fails}",
                fixed=f"{DOCTOR}   # {fixed}", evidence=evidence)  # fmt: skip


NO_STARTUP_HOOK = doctor_code("LP723", "warning", "the autoload start-up hook is not installed",
    "run from a source tree on PYTHONPATH: no lightning_presets_autoload.pth", f"after {REINSTALL}")  # fmt: skip


# --- autoload (LP722, LP723) -----------------------------------------------------------------------------------


def site_directories() -> list[str]:
    """The directories whose ``.pth`` files the interpreter reads at start-up."""
    directories = list(site.getsitepackages()) if hasattr(site, "getsitepackages") else []
    if site.ENABLE_USER_SITE:
        directories.append(site.getusersitepackages())
    return directories


def find_pth(directories: Iterable[str]) -> str | None:
    for directory in directories:
        candidate = Path(directory) / PTH_NAME
        if candidate.is_file():
            return str(candidate)
    return None


def autoload_findings(*, enabled: bool, pth: str | None, hook_importable: bool, site_enabled: bool) -> list[Finding]:
    """LP722 when ``LIGHTNING_PRESETS_AUTOLOAD`` turns it off; LP723 when the start-up hook cannot run."""
    if not enabled:
        value = os.environ.get(AUTOLOAD_VARIABLE, "")
        return [
            AUTOLOAD_OFF.finding(
                f"{AUTOLOAD_VARIABLE}={value} turns autoload off: `Trainer(strategy='<preset>')` fails "
                "with an unknown-strategy error unless `import lightning_presets` runs first",
                f"unset {AUTOLOAD_VARIABLE} (or set it to 1), or add `import lightning_presets` at the top of "
                "the training script",
            )
        ]  # fmt: skip
    missing = []
    if pth is None:
        missing.append(f"{PTH_NAME} is in none of the site directories")
    if not hook_importable:
        missing.append(f"the module {HOOK_MODULE} is not importable")
    if not site_enabled:
        missing.append("Python runs with -S, so no .pth file is read")
    if not missing:
        return []
    return [
        NO_STARTUP_HOOK.finding(
            f"the autoload start-up hook cannot run: {'; '.join(missing)}, so preset names resolve "
            "only after `import lightning_presets`",
            f"reinstall the package so its .pth file lands in site-packages ({REINSTALL}); a source tree on "
            "PYTHONPATH has no hook, use `pip install -e .` instead",
        )
    ]  # fmt: skip


def autoload_section() -> tuple[dict[str, Any], list[Finding]]:
    enabled = autoload_enabled()
    directories = site_directories()
    pth = find_pth(directories)
    hook_importable = is_importable(HOOK_MODULE)
    hook = sys.modules.get(HOOK_MODULE)
    finder_installed = hook is not None and any(
        isinstance(finder, getattr(hook, "StrategiesFinder", ())) for finder in sys.meta_path
    )
    info = {"variable": os.environ.get(AUTOLOAD_VARIABLE), "enabled": enabled, "pth": pth,
            "hook_importable": hook_importable, "finder_installed": finder_installed}  # fmt: skip
    return info, autoload_findings(enabled=enabled, pth=pth, hook_importable=hook_importable,
                                   site_enabled=not sys.flags.no_site)  # fmt: skip
