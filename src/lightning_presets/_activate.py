"""What ``import lightning_presets`` does to make preset names resolvable."""

from __future__ import annotations

import os

AUTOLOAD_VARIABLE = "LIGHTNING_PRESETS_AUTOLOAD"


def autoload_enabled() -> bool:
    return os.environ.get(AUTOLOAD_VARIABLE, "1").strip().lower() not in ("0", "false", "no", "off")


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
    from lightning_presets._bridge import register_all

    register_all()
