"""``lightning-presets list``: every preset with family, targets, extras, source and status."""

from __future__ import annotations

import argparse

from rich.console import RenderableType
from rich.text import Text

from lightning_presets.cli._output import emit, emit_json, findings, table
from lightning_presets.tools.catalog import all_entries

LIST_SCHEMA = "lightning-presets/list"
LIST_SCHEMA_VERSION = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the listing as JSON")
    parser.add_argument("--strict", action="store_true", help="exit 1 when an entry is not usable")


def _targets(targets: list[str]) -> str:
    kinds = [name for name, target in (("Trainer", "trainer"), ("Fabric", "fabric")) if target in targets]
    return ", ".join(kinds) or "-"


def run(args: argparse.Namespace) -> int:
    rows = [each.as_dict() for each in all_entries()]
    unusable = [row for row in rows if row["status"] != "ok"]
    if args.json:
        emit_json({"schema": LIST_SCHEMA, "schema_version": LIST_SCHEMA_VERSION, "presets": rows})
        return 1 if args.strict and unusable else 0
    listing = table(
        ("name", "kind", "family", "targets", "extras", "source", "status"),
        [
            (
                row["name"],
                row["kind"],
                row["family"] or "-",
                _targets(row["targets"]),
                ", ".join(row["extras"]) or "-",
                f"{row['distribution']} {row['version']}",
                Text(row["status"], style="green" if row["status"] == "ok" else "bold red"),
            )
            for row in rows
        ],
        wrap=(3, 4, 5),
    )
    parts: list[RenderableType] = [listing if rows else "no presets installed"]
    for row in rows:
        if row["findings"]:
            parts += ["", findings(row["findings"], title=f"{row['name']} ({row['status']})")]
    parts += ["", "`lightning-presets show NAME` explains one preset; `lightning-presets check` validates a job."]
    emit(*parts)
    return 1 if args.strict and unusable else 0
