"""``lightning-presets matrix``: ``check`` over strategy × accelerator × devices/nodes × precision.

The committed ``docs/matrix.md`` and ``docs/matrix.json`` come from::

    lightning-presets matrix --format markdown --output docs/matrix.md
    lightning-presets matrix --format json --output docs/matrix.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lightning_presets.cli._output import progress, write, write_file
from lightning_presets.core.findings import UsageError
from lightning_presets.tools.matrix import COMMANDS, compute, to_json, to_markdown


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--format", choices=("markdown", "json"), default="markdown", help="output format")
    parser.add_argument("--output", metavar="FILE", help="write here instead of standard output")
    parser.add_argument("--check", metavar="FILE", help="exit 1 if FILE differs from what would be written (CI)")
    parser.add_argument("--mode", choices=("trainer", "fabric"), action="append", help="limit to one mode")


def _target(flag: str, path: str) -> Path:
    """A usage error now, before the seconds of checks, for a directory or (``--output``) a missing directory."""
    target = Path(path)
    if "\0" in path:
        raise UsageError(f"{flag} {path!r}: not a file name (a NUL character)")
    if target.is_dir():
        raise UsageError(f"{flag} {path}: is a directory; give a file name")
    if flag == "--output" and not target.parent.is_dir():
        raise UsageError(f"{flag} {path}: the directory {target.parent} does not exist")
    return target  # a missing --check file is stale (exit 1), not a usage error


def run(args: argparse.Namespace) -> int:
    check = _target("--check", args.check) if args.check else None
    output = _target("--output", args.output) if args.output else None
    with progress(True, "checking configurations") as update:
        rows, seconds = compute(args.mode or ("trainer", "fabric"), update)
    text = to_markdown(rows) if args.format == "markdown" else to_json(rows)
    rate = len(rows) / seconds if seconds else float("inf")
    sys.stderr.write(f"{len(rows)} configurations checked in {seconds:.2f} s ({rate:.0f}/s)\n")
    if check is not None:
        try:  # never more than one character past what would be written: `--check /dev/zero` ends too
            with check.open(encoding="utf-8") as file:
                current = file.read(len(text) + 1)
        except FileNotFoundError:
            current = ""
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or error
            raise UsageError(f"--check {args.check}: cannot be read: {reason}") from error
        if current != text:
            sys.stderr.write(f"{args.check} is stale; regenerate it with: {COMMANDS[args.format]}\n")
            return 1
        return 0
    if output is not None:
        try:  # the old file stays as it was until the new one is complete
            note = write_file(str(output), text)
        except OSError as error:
            raise UsageError(f"--output {args.output}: cannot be written: {error.strerror or error}") from error
        if note is not None:
            sys.stderr.write(f"--output: {note}\n")
    else:
        write(text)
    return 0
