"""Diagnose mode (``LIGHTNING_PRESETS_DIAGNOSE=1``): the hang report that explains a stuck run, not a guard that
refuses one. :mod:`~lightning_presets.diagnose.hangs` records the collectives each rank enters and reports one that not
every rank entered (LP034); :mod:`~lightning_presets.diagnose.progress` tells a slow rank from a hung one;
:mod:`~lightning_presets.diagnose.report` writes the report. ``guards.runtime`` installs it after the start-up
handshake, so it sits below the guards and imports none of them.
"""
