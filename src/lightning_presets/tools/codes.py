"""Every code the package declares, found from its declarations: what ``show LPxxx`` and ``docs/errors.md`` print.

A code is declared once (a :class:`~lightning_presets.core.codes.Code`, or a rule: a code with its function) at the
top level of a module of the package and emitted by reference; :func:`declared` finds them all, and
:func:`describe_code` says where a code's check lives (its function, file and line) and which presets run it.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from typing import Any

import lightning_presets
from lightning_presets.core.codes import Code
from lightning_presets.core.rules import Rule

CODE_FORM = re.compile(r"LP\d{3}", re.IGNORECASE)
"""What ``show`` reads as a code rather than a preset name."""
_SKIPPED = ("lightning_presets.cli", "lightning_presets.__main__")
"""Not walked: the command line declares no code, and importing it is not needed to find them."""


def declared() -> dict[str, tuple[Code, str]]:
    """Every declared code, by code: the declaration and the module that declares it (imports every module of the
    package but the CLI). Two different declarations of one code raise ``ValueError``."""
    found: dict[str, tuple[Code, str]] = {}
    for info in pkgutil.walk_packages(lightning_presets.__path__, "lightning_presets."):
        if info.name.startswith(_SKIPPED):
            continue
        for value in vars(importlib.import_module(info.name)).values():
            if not isinstance(value, Code):
                continue
            known = found.setdefault(value.code, (value, info.name))
            if known[0] is not value:
                raise ValueError(
                    f"{value.code} is declared twice: {known[0].title!r} and {value.title!r} ({info.name})"
                )
    return dict(sorted(found.items()))


def _function(check: Any) -> str:
    return f"{getattr(check, '__module__', '?')}.{getattr(check, '__qualname__', type(check).__name__)}"


def _declaration(module: str, code: str) -> str | None:
    """``path:line`` (relative to the package's parent) where ``module`` writes the code (its declaration)."""
    try:
        path = Path(inspect.getsourcefile(importlib.import_module(module)) or "")
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, TypeError):  # no source shipped (a compiled module)
        return None
    line = next((number for number, text in enumerate(lines, 1) if f'"{code}"' in text), None)
    root = Path(lightning_presets.__file__).resolve().parents[1]
    shown = path.resolve().relative_to(root) if path.resolve().is_relative_to(root) else path
    return f"{shown}:{line}" if line else str(shown)


def _used_by(code: str) -> list[str]:
    from lightning_presets.tools.catalog import all_entries

    return sorted(
        listed.entry.name
        for listed in all_entries()
        if listed.entry.item is not None and any(each.code == code for each in getattr(listed.entry.item, "rules", ()))
    )


def describe_code(code: str) -> dict[str, Any] | None:
    """What ``show LPxxx`` prints: the declaration, where its check lives and which presets run it; ``None`` when no
    module declares ``code``."""
    entry = declared().get(code.upper())
    if entry is None:
        return None
    value, module = entry
    data: dict[str, Any] = {
        "code": value.code, "severity": value.severity, "stage": value.stage, "title": value.title,
        "declared_in": module, "file": _declaration(module, value.code), "fails": value.fails, "fixed": value.fixed,
        "evidence": value.evidence,
    }  # fmt: skip
    if isinstance(value, Rule):
        data |= {"function": _function(value.check), "used_by": _used_by(value.code)}
        if value.unless:
            data["condition"] = {"unless": value.unless, "consequence": value.consequence}
    return data
