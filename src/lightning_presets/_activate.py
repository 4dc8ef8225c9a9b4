"""Where the layers meet Lightning: registration of the strategy presets, from the start-up hook or explicitly."""

from __future__ import annotations

import sys
import warnings
from types import ModuleType

from lightning_presets.core.environment import autoload_enabled
from lightning_presets.core.findings import PresetWarning
from lightning_presets.guards.strategy import HEADS
from lightning_presets.registry import bridge
from lightning_presets.registry.variables import UNKNOWN_VALUE, variable_findings


def register_module(module: ModuleType) -> None:
    """Register the presets into one of Lightning's strategies modules (the start-up hook calls this)."""
    bridge.register_module(module, HEADS)
    _warn_unknown_values()


_warned: list[bool] = []


def _warn_unknown_values() -> None:
    """Once per process: a package variable set to a value it does not take (LP017). Never raises: under
    ``-W error`` the warning goes to stderr instead, and registration has happened already."""
    if _warned:
        return
    _warned.append(True)
    for finding in variable_findings():
        if finding.code != UNKNOWN_VALUE.code:
            continue
        try:
            warnings.warn(f"{finding}", PresetWarning, stacklevel=2)
        except Exception:  # a filter made the warning an error
            sys.stderr.write(f"PresetWarning: {finding}\n")


def register_all() -> None:
    """Register into every importable Lightning namespace."""
    bridge.register_all(HEADS)
    _warn_unknown_values()


HOOK_MODULE = "_lightning_presets_autoload"
"""The start-up hook's module: the ``.pth`` line imports it at interpreter start, and it imports this module (never
the other way round)."""


def activate() -> None:
    """With autoload on and the start-up hook running, the hook registers into each Lightning namespace as it is
    imported: only catch up with a namespace an import hook ahead of ours loaded past it. Otherwise (autoload off, or
    a source tree without the hook's ``.pth``) register now."""
    if autoload_enabled() and HOOK_MODULE in sys.modules:
        bridge.register_imported(HEADS)
        return
    register_all()
