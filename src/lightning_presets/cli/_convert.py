"""``lightning-presets convert SRC DST``: a checkpoint converted to one file (or its weights to safetensors), written
safely and verified (:mod:`lightning_presets.tools.convert`).

Exit codes: 0 converted, 1 not converted (nothing written: the reason and the fix on stderr), 2 usage error.
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from rich.text import Text

from lightning_presets.cli._output import emit, emit_json, fields, verdict

CONVERT_SCHEMA = "lightning-presets/convert"
CONVERT_SCHEMA_VERSION = 1
NOT_CONVERTED = 1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", help="a checkpoint: a file, a torch.distributed.checkpoint folder, a DeepSpeed folder"
    )
    parser.add_argument("destination", help="where to write the result (refused if it exists, unless --force)")
    parser.add_argument(
        "--to", choices=("file", "safetensors"), default="file",
        help="file: one torch.save file in its writer's layout (DDP and one device resume it); "
             "safetensors: the model's weights only",
    )  # fmt: skip
    parser.add_argument("--force", action="store_true", help="replace an existing destination")
    parser.add_argument("--no-verify", action="store_true", help="skip reading the result back and comparing it")
    parser.add_argument(
        "--strip-prefix", default="", metavar="PREFIX",
        help="safetensors: remove PREFIX from each name ('model.' for a LightningModule's self.model)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    from lightning_presets.tools.convert import ConvertError, convert

    try:
        result = convert(
            args.source, args.destination, to=args.to, force=args.force, verify_result=not args.no_verify,
            strip_prefix=args.strip_prefix,
        )  # fmt: skip
    except ConvertError as error:
        if args.json:
            emit_json({"schema": CONVERT_SCHEMA, "version": CONVERT_SCHEMA_VERSION, "converted": False,
                       "error": error.message, "hint": error.hint})  # fmt: skip
        emit(Text(f"lightning-presets convert: not converted: {error.message}\n  hint: {error.hint}"), stderr=True)
        return NOT_CONVERTED
    if args.json:
        emit_json({"schema": CONVERT_SCHEMA, "version": CONVERT_SCHEMA_VERSION, "converted": True, **asdict(result)})
        return 0
    rows: list[tuple[str, str | Text]] = [
        ("source", f"{result.source}: {result.source_layout}"),
        ("written", f"{result.destination} ({result.target}, {result.tensors} tensors)"),
        ("verified", "read back and equal to the source, tensor by tensor" if result.verified else "skipped"),
        ("not carried", "; ".join(result.dropped) or "nothing"),
        ("took", f"{result.seconds:.1f} s"),
    ]
    emit(verdict("converted", ok=True), fields(rows))
    return 0
