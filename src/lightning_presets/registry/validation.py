"""Whether a loaded preset is well-formed (LP011): every field of its declared type, class specs a namespace can
resolve, rules the guards can run.

Checked when an entry point is loaded, without importing anything: a malformed third-party preset is marked
broken in the catalog instead of failing later, inside ``Trainer(...)`` or ``show``, with its raw exception. The
types come from the dataclasses' own annotations (``Preset``, ``PrecisionPreset`` and the dataclasses they hold:
rules, requirements, meshes), so a new field is checked as soon as it is declared. Whether the class itself
resolves needs Lightning: :func:`lightning_presets.registry.classes.unresolved` checks that.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from collections.abc import Callable, Mapping, Set
from typing import Any, get_args, get_origin

from lightning_presets.core.preset import KINDS, AnyPreset
from lightning_presets.core.rules import PRESET_STAGES, Rule

_CLASS_SPEC = re.compile(r"[A-Za-z_]\w*|[A-Za-z_][\w.]*:[A-Za-z_][\w.]*")
_CODE = re.compile(r"LP\d{3}")

_CLASS_FIELDS = ("strategy", "plugin")
"""The fields that name the Lightning class per kind: checked by :func:`_class_problems`, with a better message."""


_resolved: dict[type, dict[str, Any]] = {}


def _hints(cls: type) -> dict[str, Any]:
    """The resolved annotations of a dataclass (once per class); one that cannot be resolved is not checked."""
    if cls not in _resolved:
        try:
            _resolved[cls] = typing.get_type_hints(cls)
        except Exception:  # a third party's subclass with an annotation its module cannot resolve
            _resolved[cls] = {}
    return _resolved[cls]


def _matches(value: Any, hint: Any) -> bool:
    """Whether ``value`` is of the annotated type (containers item by item; a callable is any callable)."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is Any:
        return True
    if hint is None or hint is type(None):
        return value is None
    if origin in (typing.Union, types.UnionType):
        return any(_matches(value, arg) for arg in args)
    if origin is typing.Literal:
        return any(value == arg and type(value) is type(arg) for arg in args)
    if origin is Callable:
        return callable(value)
    if origin is type or hint is type:
        return isinstance(value, type)
    if origin is not None and issubclass(origin, Mapping):
        key, item = args or (Any, Any)
        return isinstance(value, Mapping) and all(_matches(k, key) and _matches(v, item) for k, v in value.items())
    if origin is tuple:
        if not isinstance(value, tuple | list):  # a list is accepted where a tuple is declared
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_matches(each, args[0]) for each in value)
        return len(value) == len(args) and all(_matches(each, arg) for each, arg in zip(value, args, strict=True))
    if origin in (frozenset, set):
        return isinstance(value, Set) and all(_matches(each, args[0]) for each in value)
    if isinstance(hint, type):
        if hint in (bool, int, str, float):
            return type(value) is hint or (hint is float and type(value) is int)
        return isinstance(value, hint)
    return True  # an annotation this reading does not know: not checked


def _simple(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint)


def _describe(hint: Any) -> str:
    """The annotated type in words: ``a mapping of str to str``, ``a function or None``."""
    origin, args = get_origin(hint), get_args(hint)
    if hint is None or hint is type(None):
        return "None"
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_describe(arg) for arg in args)
    if origin is typing.Literal:
        return " or ".join(map(repr, args))
    if origin is Callable:
        return "a function"
    if origin is type or hint is type:
        return "a class"
    if origin is not None and issubclass(origin, Mapping):
        if not args or args[1] is Any:
            return f"a mapping with {_simple(args[0])} keys" if args else "a mapping"
        return f"a mapping of {_simple(args[0])} to {_simple(args[1])}"
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return f"a tuple of {_simple(args[0])}"
        return f"a tuple ({', '.join(map(_simple, args))})"
    if origin in (frozenset, set):
        return f"a set of {_simple(args[0])}"
    return _simple(hint)


def _shown(value: Any) -> str:
    """A value for a message: a short repr and its type."""
    try:
        text = repr(value)
    except Exception:  # a third party's repr that raises
        return f"a {type(value).__name__}"
    text = text if len(text) <= 60 else text[:57] + "..."
    return f"{text} ({type(value).__name__})"


def _field_problems(item: Any, prefix: str = "", skip: tuple[str, ...] = ()) -> list[str]:
    """Every field of the dataclass ``item`` that is not of its declared type; nested dataclasses checked too."""
    problems = []
    hints = _hints(type(item))
    for field in dataclasses.fields(item):
        if field.name in skip or field.name not in hints:
            continue
        value = getattr(item, field.name)
        hint = hints[field.name]
        if not _matches(value, hint):
            problems.append(f"{prefix}{field.name}= must be {_describe(hint)}, got {_shown(value)}")
            continue
        nested = value if isinstance(value, tuple | list) else (value,)
        for index, each in enumerate(nested):
            if dataclasses.is_dataclass(each) and not isinstance(each, type):
                where = f"{prefix}{field.name}[{index}]." if nested is value else f"{prefix}{field.name}."
                problems += _field_problems(each, where)
    return problems


def _class_problems(item: AnyPreset) -> list[str]:
    field = next(name for name in _CLASS_FIELDS if hasattr(item, name))
    specs = getattr(item, field)
    if not isinstance(specs, Mapping) or not specs:
        return [f"{field}= must map 'trainer' and/or 'fabric' to a class name, got {_shown(specs)}"]
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
    """What the field types cannot say: a code of the right form, a stage a preset's rule may have."""
    problems = []
    for each in rules if isinstance(rules, tuple | list) else ():
        if not isinstance(each, Rule):
            continue
        if not isinstance(each.code, str) or not _CODE.fullmatch(each.code):
            problems.append(f"rule {each.code!r} has a code that is not 'LP' followed by three digits")
        if each.stage not in PRESET_STAGES:
            problems.append(f"rule {each.code!r} has stage {each.stage!r}, not one of {', '.join(PRESET_STAGES)}")
    return problems


def malformed(item: AnyPreset) -> list[str]:
    """What is wrong with a preset's declaration, in words; empty when it is well-formed."""
    return _class_problems(item) + _field_problems(item, skip=_CLASS_FIELDS) + _rule_problems(item.rules)
