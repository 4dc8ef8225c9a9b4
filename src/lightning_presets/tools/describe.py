"""What ``show`` prints about a preset: arguments, guards, tested versions and the plain-Lightning equivalent."""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Mapping
from typing import Any

from lightning_presets.core.namespaces import NAMESPACES
from lightning_presets.registry.build import valid_override_keys
from lightning_presets.tools.catalogs import Listed

_PACKAGES = {"trainer": ("lightning.pytorch", "Trainer"), "fabric": ("lightning.fabric", "Fabric")}


def _literal(value: Any) -> str:
    """A value as Python source, strings in double quotes."""
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(_literal(item) for item in value)) + "}" if value else "set()"
    if isinstance(value, type):
        return value.__name__
    if callable(value):
        return getattr(value, "__name__", "your_function")
    return repr(value)


def _defaults(cls: Any) -> dict[str, Any]:
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):
        return {}
    return {p.name: p.default for p in parameters if p.default is not inspect.Parameter.empty}


def _class_spec(spec: str, package: str) -> tuple[str, str]:
    """(import line, class name) for a ``Preset.strategy`` value: a class name or ``module:attr``."""
    if ":" in spec:
        module, _, attr = spec.partition(":")
        return f"from {module} import {attr}", attr
    return f"from {package} import {spec}", spec


def _specs(item: Any) -> tuple[Mapping[str, str], str]:
    """(kind -> class spec, sub-package): a strategy preset's strategy classes or a precision preset's plugins."""
    if isinstance(getattr(item, "plugin", None), Mapping):
        return item.plugin, "plugins.precision"
    return getattr(item, "strategy", {}) or {}, "strategies"


def plain_code(item: Any, kind: str) -> str | None:
    """The nearest plain-Lightning code for one kind: the same class and arguments, without the guards."""
    specs, subpackage = _specs(item)
    spec = specs.get(kind)
    if spec is None:
        return None
    package, caller = _PACKAGES[kind]
    import_line, class_name = _class_spec(spec, f"{package}.{subpackage}")
    values = dict(getattr(item, "init_params", {}) or {})
    prepare = getattr(item, "prepare", None)
    if callable(prepare):
        values = prepare(kind, values)
    try:
        module_name, _, attr = import_line.removeprefix("from ").partition(" import ")
        defaults = _defaults(getattr(importlib.import_module(module_name), attr))
    except Exception:  # the class cannot be imported here (missing extra): keep every argument
        defaults = {}
    shown = {key: value for key, value in values.items() if not (value is None and defaults.get(key) is None)}
    functions = [key for key, value in shown.items() if callable(value) and not isinstance(value, type)]
    arguments = ", ".join(
        f"{key}={key.removesuffix('_fn') if key in functions else _literal(value)}" for key, value in shown.items()
    )
    uses_torch = any(type(value).__module__ == "torch" for value in shown.values())
    lines = [*(["import torch"] if uses_torch else []), f"from {package} import {caller}", import_line, ""]
    lines += [f"# {key.removesuffix('_fn')}: your function (see the preset's description)" for key in functions]
    variable, argument = (
        ("strategy", "strategy=strategy") if subpackage == "strategies" else ("plugin", "plugins=[plugin]")
    )
    lines += [
        f"{variable} = {class_name}({arguments})",
        f"{caller.lower()} = {caller}({argument})  # and your other arguments",
    ]
    return "\n".join(lines)


def _rules(item: Any) -> list[dict[str, str]]:
    return [
        {"code": rule.code, "severity": rule.severity, "stage": rule.stage, "title": rule.title}
        for rule in getattr(item, "rules", ()) or ()
    ]


def also_accepted(item: Any) -> dict[str, list[str]]:
    """Per kind, every override the preset takes besides its defaults: the Lightning constructor's named parameters
    (strategies) and the preset's extra keys, exactly what ``lightning_presets.strategy(name, **overrides)`` accepts."""
    accepted = {}
    for kind in getattr(item, "kinds", ()):
        namespace = next(each for each in NAMESPACES if each.kind == kind)
        try:
            keys = valid_override_keys(item, namespace)
        except Exception:  # the class cannot be imported here (a missing extra): the preset's own keys
            keys = frozenset(item.extra_keys)
        accepted[kind] = sorted(keys - set(item.init_params))
    return accepted


def describe(listed: Listed) -> dict[str, Any]:
    item = listed.item
    data = listed.as_dict()
    if item is None:
        return data
    init_params: Mapping[str, Any] = getattr(item, "init_params", {}) or {}
    data.update(
        {
            "classes": dict(_specs(item)[0]),
            "arguments": {key: _literal(value) for key, value in init_params.items()},
            "extra_keys": sorted(getattr(item, "extra_keys", ()) or ()),
            "also_accepted": also_accepted(item),
            "requires": [
                {"module": r.module, "extra": r.extra, "installed": r.is_installed()}
                for r in getattr(item, "requires", ()) or ()
            ],
            "guards": _rules(item),
            "tested_with": dict(getattr(item, "tested_with", {}) or {}),
            "plain_lightning": {kind: code for kind in ("trainer", "fabric") if (code := plain_code(item, kind))},
        }
    )
    return data
