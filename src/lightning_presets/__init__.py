"""Curated, guarded distributed-training presets for PyTorch Lightning.

After ``pip install lightning-presets``, ``Trainer(strategy="fsdp_offload_ckpt")`` works with no
import. ``import lightning_presets`` gives the Python API below.

PYTEST_DONT_REWRITE: the distribution ships a pytest plugin, so pytest marks this package for assertion rewriting in
every session of the environment, and ``import lightning`` has often imported it before pytest starts.
"""

from lightning_presets._activate import activate as _activate_presets
from lightning_presets._api import get_preset, precision, presets, strategy
from lightning_presets._version import __version__
from lightning_presets.core.context import Context, Options
from lightning_presets.core.findings import Finding, PresetConfigError, PresetWarning
from lightning_presets.core.preset import PrecisionPreset, Preset, Requirement
from lightning_presets.core.rules import Problem, Rule, rule

__all__ = [
    "Context",
    "Finding",
    "Options",
    "PrecisionPreset",
    "Preset",
    "PresetConfigError",
    "PresetWarning",
    "Problem",
    "Requirement",
    "Rule",
    "__version__",
    "get_preset",
    "precision",
    "presets",
    "rule",
    "strategy",
]

_activate_presets()
