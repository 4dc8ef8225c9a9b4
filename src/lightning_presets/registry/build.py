"""Building a preset instance: dependencies probed, overrides checked, option rules run, a fresh object made.

What differs between strategy and precision presets comes from two places: the preset type's data
(:class:`~lightning_presets.core.preset.PresetType`) and the head class the caller passes, which
implements :class:`Head`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, Protocol

from lightning_presets.core.findings import Finding, PresetConfigError, report
from lightning_presets.core.namespaces import Kind, Namespace
from lightning_presets.core.preset import AnyPreset
from lightning_presets.core.rules import Rule, run_rules
from lightning_presets.registry import codes
from lightning_presets.registry.classes import compose, lightning_class
from lightning_presets.registry.overrides import Accepted, accepted


class Head(Protocol):
    """The guard class placed first in every composed class; the guards layer implements it."""

    @classmethod
    def _lp_usage(cls, preset: Any, namespace: Namespace) -> str:
        """The user's call, for dependency messages, e.g. ``Trainer(strategy='x')``."""

    @classmethod
    def _lp_options_context(
        cls, preset: Any, namespace: Namespace, values: Mapping[str, Any], overrides: Mapping[str, Any]
    ) -> Any:
        """What the ``options`` rules read."""

    @classmethod
    def _lp_options_rules(cls, preset: Any) -> tuple[Rule, ...]:
        """The rules to run on it (the preset's own, plus any every preset of the type gets)."""

    @classmethod
    def _lp_attach(cls, instance: Any, context: Any) -> None:
        """Keep what the instance's later guards need."""


Heads = Mapping[Kind, type[Head]]
"""The head class for each kind (``trainer``/``fabric``)."""


def accepted_overrides(preset: AnyPreset, namespace: Namespace) -> Accepted:
    """What ``preset`` takes as overrides: its defaults and extra keys and, for a strategy, every keyword its Lightning
    class takes (``registry.overrides``); a precision preset takes exactly the keys of its defaults."""
    own = frozenset(preset.init_params) | preset.extra_keys
    if not preset.TYPE.constructor_keys:
        return Accepted(own)
    found = accepted(lightning_class(preset, namespace), declared=preset.extra_keys)
    return Accepted(found.keys | own, open=found.open)


def unknown_keys(preset: AnyPreset, namespace: Namespace, overrides: Mapping[str, Any]) -> list[Finding]:
    """LP006 for each override the preset does not take, with the closest valid key."""
    taken = accepted_overrides(preset, namespace)
    kind = preset.TYPE
    valid = ", ".join(sorted(taken.keys)) or "none"
    return [
        codes.UNKNOWN_OVERRIDE.finding(
            f"`lightning_presets.{kind.noun}({preset.name!r}, {key}=...)`: {key!r} is not an argument of the "
            f"{preset.name!r} {kind.label} for target={namespace.target!r}",
            (f"did you mean {close!r}? " if close else "") + f"valid keys: {valid}",
        )
        for key, close in taken.unknown(overrides)
    ]


def no_form(preset: AnyPreset, namespace: Namespace) -> PresetConfigError:
    """LP008: the preset has no class for this namespace's kind (e.g. a Fabric-only preset in a Trainer)."""
    return PresetConfigError(
        [
            codes.NO_FORM_FOR_TARGET.finding(
                f"{preset.TYPE.label} {preset.name!r} has no {namespace.constructor} form "
                f"(target={namespace.target!r})",
                f"use it with one of its targets: {', '.join(preset.targets)}",
            )
        ]
    )


def build(preset: AnyPreset, namespace: Namespace, overrides: Mapping[str, Any], heads: Heads) -> Any:
    """Check dependencies, overrides and the options rules, then build a fresh instance (never a shared one)."""
    if namespace.kind not in preset.kinds:
        raise no_form(preset, namespace)
    from lightning_presets.registry import requirements  # here: `import lightning` never pays for `packaging`

    head = heads[namespace.kind]
    usage = head._lp_usage(preset, namespace)
    missing = requirements.findings(preset.requires, usage) + unknown_keys(preset, namespace, overrides)
    values = {**copy.deepcopy(dict(preset.init_params)), **overrides}
    context = head._lp_options_context(preset, namespace, values, overrides)
    # The options rules run even when a dependency is missing: installing it would not fix what they find
    # (e.g. a GPU too old for FP8), so both are reported at once.
    report(missing + run_rules(head._lp_options_rules(preset), "options", context))
    kwargs = preset.prepare(namespace.kind, dict(values)) if preset.prepare else dict(values)
    instance = compose(preset, namespace, head)(**kwargs)
    head._lp_attach(instance, context)
    return instance
