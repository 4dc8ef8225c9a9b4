"""``lightning-presets show NAME``: what a preset is, its arguments, guards and the plain-Lightning equivalent."""

from __future__ import annotations

import argparse
import difflib
import sys
from typing import Any

from lightning_presets.cli._output import emit_json, table, wrapped
from lightning_presets.tools.catalogs import all_entries
from lightning_presets.tools.describe import describe

SHOW_SCHEMA = "lightning-presets/show"
SHOW_SCHEMA_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="a preset name (see `lightning-presets list`)")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")


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
