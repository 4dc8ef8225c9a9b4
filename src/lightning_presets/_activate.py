"""Where the layers meet Lightning: registration of the strategy presets, from the start-up hook or explicitly."""

from __future__ import annotations

from types import ModuleType

from lightning_presets.core.environment import autoload_enabled
from lightning_presets.guards.strategy import HEADS
from lightning_presets.registry import bridge


def register_module(module: ModuleType) -> None:
    """Register the presets into one of Lightning's strategies modules (the start-up hook calls this)."""
    bridge.register_module(module, HEADS)


def register_all() -> None:
    """Register into every importable Lightning namespace."""
    bridge.register_all(HEADS)


def activate() -> None:
    """With autoload on, make sure the import hook is installed (cheap); with it off, register now."""
    if autoload_enabled():
        try:
            import _lightning_presets_autoload
        except ImportError:  # running from a source tree without the start-up hook
            pass
        else:
            _lightning_presets_autoload.install()
            return
    register_all()
