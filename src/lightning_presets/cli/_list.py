"""``lightning-presets list``: every preset with family, targets, extras, source and status."""

from __future__ import annotations

import argparse
import sys

from lightning_presets.cli._output import emit_json, table
from lightning_presets.tools.catalogs import all_entries

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
    else:
        lines = [
            table(
                ("name", "kind", "family", "targets", "extras", "source", "status"),
                [
                    (
                        row["name"],
                        row["kind"],
                        row["family"] or "-",
                        _targets(row["targets"]),
                        ", ".join(row["extras"]) or "-",
                        f"{row['distribution']} {row['version']}",
                        row["status"],
                    )
                    for row in rows
                ],
            )
            if rows
            else "no presets installed"
        ]
        for row in rows:
            for finding in row["findings"]:
                lines.append(f"\n{row['name']} ({row['status']}): [{finding['code']}] {finding['message']}")
                lines.append(f"  hint: {finding['hint']}")
        lines.append("\n`lightning-presets show NAME` explains one preset; `lightning-presets check` validates a job.")
        sys.stdout.write("\n".join(lines) + "\n")
    return 1 if args.strict and unusable else 0
