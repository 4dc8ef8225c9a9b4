"""``lightning-presets matrix``: ``check`` over strategy × accelerator × devices/nodes × precision.

The committed ``docs/matrix.md`` and ``docs/matrix.json`` come from::

    lightning-presets matrix --format markdown --output docs/matrix.md
    lightning-presets matrix --format json --output docs/matrix.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lightning_presets.tools.matrix import COMMANDS, compute, to_json, to_markdown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="output format")
    parser.add_argument("--output", metavar="FILE", help="write here instead of standard output")
    parser.add_argument("--check", metavar="FILE", help="exit 1 if FILE differs from what would be written (CI)")
    parser.add_argument("--mode", choices=("trainer", "fabric"), action="append", help="limit to one mode")


def run(args: argparse.Namespace) -> int:
    rows, seconds = compute(args.mode or ("trainer", "fabric"))
    text = to_markdown(rows) if args.format == "markdown" else to_json(rows)
    rate = len(rows) / seconds if seconds else float("inf")
    sys.stderr.write(f"{len(rows)} configurations checked in {seconds:.2f} s ({rate:.0f}/s)\n")
    if args.check:
        current = Path(args.check).read_text(encoding="utf-8") if Path(args.check).exists() else ""
        if current != text:
            sys.stderr.write(f"{args.check} is stale; regenerate it with: {COMMANDS[args.format]}\n")
            return 1
        return 0
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
