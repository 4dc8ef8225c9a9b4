"""``lightning-presets show NAME``: what a preset is, its arguments, guards and the plain-Lightning equivalent; ``show
LPxxx``: what a code means, the function and file that check it, and the presets that run it."""

from __future__ import annotations

import argparse
import difflib
import textwrap
from typing import Any

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.text import Text

from lightning_presets.cli._output import emit, emit_json, fields, findings, heading, indented, severity, table
from lightning_presets.core.findings import UsageError
from lightning_presets.registry.codes import UNKNOWN_PRESET
from lightning_presets.tools.catalog import all_entries, describe
from lightning_presets.tools.codes import CODE_FORM, describe_code

SHOW_SCHEMA = "lightning-presets/show"
SHOW_SCHEMA_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", help="a preset name (see `lightning-presets list`), or a code such as LP201")
    parser.add_argument("--json", action="store_true", help="print the description as JSON")


def _code(text: str) -> Text:
    """Python code: highlighted on a terminal, as is when piped; long lines are never wrapped or cut (copy them)."""
    indented_text = textwrap.indent(text, "  ")
    code = Syntax(indented_text, "python", theme="ansi_dark", background_color="default").highlight(indented_text)
    code.rstrip()
    code.no_wrap, code.overflow = True, "ignore"
    return code


def _none(items: Any) -> tuple[str, ...]:
    return () if items else ("(none)",)


def _render(data: dict[str, Any]) -> Group:
    parts: list[RenderableType] = [
        Text.assemble((data["name"], "bold"), f" ({data['kind']} preset, family {data['family'] or '-'})")
    ]
    if data.get("description"):
        parts.append(indented(data["description"]))
    about: list[tuple[str, str | Text]] = [
        ("source", f"{data['distribution']} {data['version']} (entry point {data['entry_point']})"),
        ("status", Text(data["status"], style="green" if data["status"] == "ok" else "bold red")),
        ("targets", ", ".join(data["targets"]) or "-"),
    ]
    if "arguments" in data:
        about.append(("class", ", ".join(f"{kind}: {spec}" for kind, spec in data["classes"].items())))
        if data["requires"]:
            needs = ", ".join(
                f"{r['module']} ({'installed' if r['installed'] else 'missing'}; extra [{r['extra']}])"
                for r in data["requires"]
            )
            about.append(("requires", needs))
    parts += ["", fields(about)]
    if data["findings"]:
        parts += ["", findings(data["findings"])]
    if "arguments" not in data:
        return Group(*parts)
    api = "precision" if data["kind"] == "precision" else "strategy"
    parts += [
        "",
        heading(
            f"arguments (defaults; override with lightning_presets.{api}(name, key=value)"
            + (" or check --set)" if api == "strategy" else ")")
        ),
        indented(Group(*(f"{key} = {value}" for key, value in data["arguments"].items()), *_none(data["arguments"]))),
    ]
    accepted = data["also_accepted"]
    if len({tuple(keys) for keys in accepted.values()}) == 1:
        accepted = {"": next(iter(accepted.values()))}
    label = "also accepted"
    overrides = [(f"{label} ({kind})" if kind else label, ", ".join(keys)) for kind, keys in accepted.items() if keys]
    if overrides:
        parts.append(fields(overrides))
    guards = data["guards"]
    rows = [(g["code"], severity(g["severity"]), g["stage"], g["title"]) for g in guards]
    parts += ["", heading("guards"), table(("code", "severity", "stage", "title"), rows, wrap=(3,)) if guards
              else indented("(none)")]  # fmt: skip
    tested = data["tested_with"]
    tested_rows = [(key, value or "not run") for key, value in tested.items()]
    parts += ["", heading("tested with"), fields(tested_rows) if tested else indented("(not recorded)")]
    if data.get("resumes"):
        parts += ["", heading("resumes (fit(ckpt_path=...) / Fabric.load; checked before loading)")]
        parts.append(indented(Group(*(f"- {line}" for line in data["resumes"]))))
    for kind, code in data["plain_lightning"].items():
        built = "strategy" if data["kind"] == "strategy" else "plugin"
        parts += [
            "",
            heading(f"plain Lightning equivalent ({kind}; the {built} the preset builds, without the guards)"),
        ]
        parts.append(_code(code))
        missing = data.get("plain_lightning_missing", {}).get(kind)
        if missing:
            parts.append(indented(Group(Text("not expressed by these arguments (the preset's hooks do it):",
                                             style="bold"), *(f"- {line}" for line in missing))))  # fmt: skip
    return Group(*parts)


def _render_code(data: dict[str, Any]) -> Group:
    about: list[tuple[str, str | Text]] = [
        ("severity", severity(data["severity"])), ("stage", data["stage"]), ("declared in", data["declared_in"]),
        ("file", data["file"] or "-"),
    ]  # fmt: skip
    if "function" in data:
        about += [("checked by", data["function"]), ("used by", ", ".join(data["used_by"]) or "(no built-in preset)")]
    if "condition" in data:
        about.append(("before the model", f"{data['condition']['consequence']}, unless {data['condition']['unless']}"))
    parts: list[RenderableType] = [Text.assemble((data["code"], "bold"), f" {data['title']}"), "", fields(about)]
    if data["evidence"]:
        parts += ["", heading("how we know"), indented(data["evidence"])]
    parts += ["", heading("fails"), _code(data["fails"]), "", heading("fixed"), _code(data["fixed"])]
    return Group(*parts)


def _show_code(args: argparse.Namespace) -> int:
    data = describe_code(args.name)
    if data is None:
        raise UsageError(f"show {args.name}: this package declares no code {args.name.upper()} (docs/errors.md lists "
                         "every code)")  # fmt: skip
    if args.json:
        emit_json({"schema": SHOW_SCHEMA, "schema_version": SHOW_SCHEMA_VERSION, "code": data, "findings": []})
    else:
        emit(_render_code(data))
    return 0


def run(args: argparse.Namespace) -> int:
    if CODE_FORM.fullmatch(args.name):
        return _show_code(args)
    entries = all_entries()
    listed = next((each for each in entries if each.entry.name == args.name), None)
    if listed is None:
        names = sorted(each.entry.name for each in entries)
        close = difflib.get_close_matches(args.name, names, n=3)
        maybe = f"did you mean {', '.join(map(repr, close))}? " if close else ""
        finding = UNKNOWN_PRESET.finding(
            f"no preset is called {args.name!r}",
            f"{maybe}available: {', '.join(names) or 'none'} (`lightning-presets list` shows all)",
        ).as_dict()
        if args.json:
            emit_json(
                {"schema": SHOW_SCHEMA, "schema_version": SHOW_SCHEMA_VERSION, "preset": None, "findings": [finding]}
            )
        else:
            emit(findings([finding]))
        return 1
    data = describe(listed)
    if args.json:
        emit_json(
            {"schema": SHOW_SCHEMA, "schema_version": SHOW_SCHEMA_VERSION, "preset": data, "findings": data["findings"]}
        )
    else:
        emit(_render(data))
    return 0 if listed.entry.status == "ok" else 1
