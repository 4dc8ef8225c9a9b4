"""The Python API: build a guarded strategy from a preset name, and look presets up."""

from __future__ import annotations

import difflib
from typing import Any

from lightning_presets import _bridge
from lightning_presets._errors import Finding, PresetConfigError
from lightning_presets._namespaces import namespace_for_target
from lightning_presets._preset import Preset


def _unknown_name(name: str, available: list[str], noun: str, function: str) -> PresetConfigError:
    close = difflib.get_close_matches(name, available, n=3)
    maybe = f"did you mean {', '.join(map(repr, close))}? " if close else ""
    return PresetConfigError(
        [
            Finding(
                code="LP010",
                severity="error",
                message=f"`lightning_presets.{function}({name!r})`: no {noun} preset is called {name!r}",
                hint=f"{maybe}available: {', '.join(available) or 'none'} (`lightning-presets list` shows all)",
            )
        ]
    )


def get_preset(name: str) -> Preset:
    """The strategy preset called ``name``; an unknown or unusable name raises :class:`PresetConfigError`."""
    catalog = _bridge.strategy_catalog()
    if name in catalog.presets:
        return catalog.presets[name]
    entry = catalog.entry(name)
    if entry is not None and entry.findings:
        raise PresetConfigError(list(entry.findings))
    raise _unknown_name(name, sorted(catalog.presets), "strategy", "strategy")


def strategy(name: str, *, target: str = "trainer", **overrides: Any) -> Any:
    """A guarded strategy instance of preset ``name`` for ``target``, with validated ``overrides``.

    ``target`` is ``"trainer"``, ``"fabric"``, ``"pytorch_lightning"`` or ``"lightning_fabric"``.
    Pass the result as ``Trainer(strategy=...)`` / ``Fabric(strategy=...)``; the guards run again
    once the Trainer or Fabric has set the accelerator, devices, nodes and precision.
    """
    namespace = namespace_for_target(target)
    return _bridge.build(get_preset(name), namespace, overrides)


def presets() -> dict[str, Preset]:
    """Every usable strategy preset by name (built-in and third-party)."""
    return dict(_bridge.strategy_catalog().presets)
