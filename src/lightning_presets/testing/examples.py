"""``check_examples``: every documented example of a preset's rules, executed.

ADAPTER (issue 10 waits for issue 7): the engine is ``lightning_presets.tools.examples.check_examples``, written
for issue 7; this module only wraps it for the pytest plugin and platform teams, and must never grow a second
engine. Until that module is merged, calling :func:`check_examples` raises ``NotImplementedError`` naming it.
"""

from __future__ import annotations

import importlib
from typing import Any

ENGINE = "lightning_presets.tools.examples"


def check_examples(preset_name: str) -> Any:
    """Run every rule's documented ``fails`` example (must raise or warn with the rule's code) and ``fixed`` example
    (must not) of the preset ``preset_name``, under the hardware each rule declares.

    Returns the engine's report: ``.checked`` (the examples run) and ``.failures`` (readable strings, empty when
    every example behaved as documented). Works for any installed preset, ours or a third party's.
    """
    try:
        engine = importlib.import_module(ENGINE)
    except ModuleNotFoundError as error:
        if error.name != ENGINE:
            raise
        raise NotImplementedError(
            f"check_examples({preset_name!r}) needs {ENGINE} (issue 7), which this build of lightning-presets lacks"
        ) from error
    return engine.check_examples(preset_name)
