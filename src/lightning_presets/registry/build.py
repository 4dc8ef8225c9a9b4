"""Building a preset instance: dependencies probed, overrides checked, option rules run, a fresh object made.

What differs between strategy and precision presets comes from two places: the preset type's data
(:class:`~lightning_presets.core.preset.PresetType`) and the head class the caller passes, which
implements :class:`Head`.
"""

from __future__ import annotations

import copy
import difflib
import inspect
from collections.abc import Mapping
from typing import Any, Protocol

from lightning_presets.core.findings import Finding, PresetConfigError, report
from lightning_presets.core.namespaces import Kind, Namespace
from lightning_presets.core.preset import AnyPreset
from lightning_presets.core.rules import Rule, run_rules
from lightning_presets.registry.classes import compose, lightning_class


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


def valid_override_keys(preset: AnyPreset, namespace: Namespace) -> frozenset[str]:
    """The preset's defaults and extra keys, and for strategies the Lightning constructor's named parameters."""
    keys = set(preset.init_params) | set(preset.extra_keys)
    if preset.TYPE.constructor_keys:
        parameters = inspect.signature(lightning_class(preset, namespace)).parameters.values()
        keys |= {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"}
    return frozenset(keys)


def unknown_keys(preset: AnyPreset, namespace: Namespace, overrides: Mapping[str, Any]) -> list[Finding]:
    """LP006 for each override the preset does not take, with the closest valid key."""
    valid = sorted(valid_override_keys(preset, namespace))
    kind = preset.TYPE
    findings = []
    for key in sorted(set(overrides) - set(valid)):
        close = difflib.get_close_matches(key, valid, n=1)
        maybe = f"did you mean {close[0]!r}? " if close else ""
        findings.append(
            Finding(
                code="LP006",
                severity="error",
                message=f"`lightning_presets.{kind.noun}({preset.name!r}, {key}=...)`: {key!r} is not an argument "
                f"of the {preset.name!r} {kind.label} for target={namespace.target!r}",
                hint=f"{maybe}valid keys: {', '.join(valid) or 'none'}",
            )
        )
    return findings


def no_form(preset: AnyPreset, namespace: Namespace) -> PresetConfigError:
    """LP008: the preset has no class for this namespace's kind (e.g. a Fabric-only preset in a Trainer)."""
    return PresetConfigError(
        [
            Finding(
                code="LP008",
                severity="error",
                message=f"{preset.TYPE.label} {preset.name!r} has no {namespace.caller} form "
                f"(target={namespace.target!r})",
                hint=f"use it with one of its targets: {', '.join(preset.targets)}",
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
