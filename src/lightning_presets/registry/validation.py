"""Whether a loaded preset is well-formed (LP011): class specs a namespace can resolve, rules the guards can run.

Checked when an entry point is loaded, without importing anything: a malformed third-party preset is marked
broken in the catalog instead of failing later, inside ``Trainer(...)``, with its raw exception. Whether the
class itself resolves needs Lightning: :func:`lightning_presets.registry.classes.unresolved` checks that.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lightning_presets.core.preset import KINDS, AnyPreset, Preset, Requirement
from lightning_presets.core.rules import PRESET_STAGES, Rule

_CLASS_SPEC = re.compile(r"[A-Za-z_]\w*|[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_CODE = re.compile(r"LP\d{3}")
_STAGES = frozenset(PRESET_STAGES)


def _class_problems(item: AnyPreset) -> list[str]:
    field = "strategy" if isinstance(item, Preset) else "plugin"
    specs = getattr(item, field, None)
    if not isinstance(specs, Mapping) or not specs:
        return [f"{field}= must map 'trainer' and/or 'fabric' to a class name, got {specs!r}"]
    problems = []
    for kind, spec in specs.items():
        if kind not in KINDS:
            problems.append(f"{field}= has the key {kind!r}; the keys are 'trainer' and 'fabric'")
        elif not isinstance(spec, str) or not _CLASS_SPEC.fullmatch(spec):
            problems.append(
                f"{field}[{kind!r}] = {spec!r} is neither a class name (e.g. 'DDPStrategy') nor 'package.module:Class'"
            )
    return problems


def _rule_problems(rules: Any) -> list[str]:
    if not isinstance(rules, tuple | list):
        return [f"rules= must be a tuple of rules, got a {type(rules).__name__}"]
    problems = []
    for index, each in enumerate(rules):
        if not isinstance(each, Rule):
            problems.append(f"rules[{index}] is a {type(each).__name__}, not a rule made with lightning_presets.rule")
            continue
        if not isinstance(each.code, str) or not _CODE.fullmatch(each.code):
            problems.append(f"rule {each.code!r} has a code that is not 'LP' followed by three digits")
        if each.severity not in ("error", "warning"):
            problems.append(f"rule {each.code!r} has severity {each.severity!r}, not 'error' or 'warning'")
        if each.stage not in _STAGES:
            problems.append(f"rule {each.code!r} has stage {each.stage!r}, not one of {', '.join(sorted(_STAGES))}")
        if not callable(each.check):
            problems.append(f"rule {each.code!r} has a check that is not callable")
    return problems


def malformed(item: AnyPreset) -> list[str]:
    """What is wrong with a preset's declaration, in words; empty when it is well-formed."""
    problems = _class_problems(item) + _rule_problems(item.rules)
    if not isinstance(item.init_params, Mapping):
        problems.append(f"init_params= must be a mapping, got a {type(item.init_params).__name__}")
    requires = item.requires
    if not isinstance(requires, tuple | list) or not all(isinstance(each, Requirement) for each in requires):
        problems.append("requires= must be a tuple of lightning_presets.Requirement")
    severity = getattr(item, "capability_severity", "error")
    if severity not in ("error", "warning"):
        problems.append(f"capability_severity={severity!r} must be 'error' or 'warning'")
    resolve = getattr(item, "resolve", None)
    if resolve is not None and not callable(resolve):
        problems.append(f"resolve= must be a function of the built strategy, got a {type(resolve).__name__}")
    mixins: Any = item.mixins if isinstance(item, Preset) else {"any": item.mixin}
    if not isinstance(mixins, Mapping):
        problems.append(f"mixins= must map 'trainer'/'fabric' to a class, got a {type(mixins).__name__}")
    else:
        problems += [
            f"the mixin {m!r} is not a class" for m in mixins.values() if m is not None and not isinstance(m, type)
        ]
    return problems
