"""``lightning-presets show NAME``: what a preset is, its arguments, guards and the plain-Lightning equivalent."""

from __future__ import annotations

import argparse
import difflib
import inspect
import json
import sys
from collections.abc import Mapping
from typing import Any

from lightning_presets.cli._catalogs import Listed, all_entries
from lightning_presets.cli._output import emit_json, table, wrapped

SHOW_SCHEMA = "lightning-presets/show"
SHOW_SCHEMA_VERSION = 1
_PACKAGES = {"trainer": ("lightning.pytorch", "Trainer"), "fabric": ("lightning.fabric", "Fabric")}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="a preset name (see `lightning-presets list`)")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")


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
        import importlib

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


def _render(data: dict[str, Any]) -> str:
    lines = [f"{data['name']} ({data['kind']} preset, family {data['family'] or '-'})"]
    if data.get("description"):
        lines.append(f"  {wrapped(data['description'], 2)}")
    lines += [
        "",
        f"  source:   {data['distribution']} {data['version']} (entry point {data['entry_point']})",
        f"  status:   {data['status']}",
        f"  targets:  {', '.join(data['targets']) or '-'}",
    ]
    for finding in data["findings"]:
        lines += [f"  [{finding['code']}] {finding['message']}", f"    hint: {finding['hint']}"]
    if "arguments" not in data:
        return "\n".join(lines)
    classes = ", ".join(f"{kind}: {spec}" for kind, spec in data["classes"].items())
    lines.append(f"  class:    {classes}")
    if data["requires"]:
        needs = ", ".join(
            f"{r['module']} ({'installed' if r['installed'] else 'missing'}; extra [{r['extra']}])"
            for r in data["requires"]
        )
        lines.append(f"  requires: {needs}")
    api = "precision" if data["kind"] == "precision" else "strategy"
    lines += [
        "",
        f"arguments (defaults; override with lightning_presets.{api}(name, key=value)"
        + (" or check --set)" if api == "strategy" else ")"),
    ]
    lines += [f"  {key} = {value}" for key, value in data["arguments"].items()] or ["  (none)"]
    if data["extra_keys"]:
        lines.append(f"  also accepted: {wrapped(', '.join(data['extra_keys']), 17)}")
    lines += ["", "guards"]
    guards = data["guards"]
    lines.append(
        table(("code", "severity", "stage", "title"), [tuple(g.values()) for g in guards]) if guards else "  (none)"
    )
    tested = data["tested_with"]
    lines += ["", "tested with"]
    lines += [f"  {key}: {value}" for key, value in tested.items()] or ["  (not recorded)"]
    for kind, code in data["plain_lightning"].items():
        lines += ["", f"plain Lightning equivalent ({kind}; without the guards and the preset's hooks)"]
        lines += [f"  {line}" if line else "" for line in code.splitlines()]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    entries = all_entries()
    listed = next((each for each in entries if each.entry.name == args.name), None)
    if listed is None:
        names = sorted(each.entry.name for each in entries)
        close = difflib.get_close_matches(args.name, names, n=3)
        maybe = f"did you mean {', '.join(map(repr, close))}? " if close else ""
        finding = {
            "code": "LP010", "severity": "error", "message": f"no preset is called {args.name!r}",
            "hint": f"{maybe}available: {', '.join(names) or 'none'} (`lightning-presets list` shows all)",
        }  # fmt: skip
        if args.json:
            emit_json(
                {"schema": SHOW_SCHEMA, "schema_version": SHOW_SCHEMA_VERSION, "preset": None, "findings": [finding]}
            )
        else:
            sys.stdout.write(f"[{finding['code']}] {finding['message']}\n  hint: {finding['hint']}\n")
        return 1
    data = describe(listed)
    if args.json:
        emit_json(
            {"schema": SHOW_SCHEMA, "schema_version": SHOW_SCHEMA_VERSION, "preset": data, "findings": data["findings"]}
        )
    else:
        sys.stdout.write(_render(data) + "\n")
    return 0 if listed.entry.status == "ok" else 1
