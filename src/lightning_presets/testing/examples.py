"""``check_examples``: every documented example of a preset's rules, executed by the one engine there is,
:func:`lightning_presets.tools.examples.check_examples`. Imported when first called: pytest loads this package in
every session of the environment."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lightning_presets.tools.examples import ExampleReport


def check_examples(preset_name: str) -> ExampleReport:
    """Run every rule's documented ``fails`` example (it must raise or warn with the rule's code) and ``fixed``
    example (it must not) of the preset ``preset_name``, under the hardware, cluster and modules each rule declares
    (its ``setting``).

    Returns a report with ``.checked`` (the examples run, two per rule) and ``.failures`` (one readable line per
    example that did not behave as documented; empty when all did). Works for any installed strategy or precision
    preset, ours or a third party's.
    """
    from lightning_presets.tools.examples import check_examples as run

    return run(preset_name)
