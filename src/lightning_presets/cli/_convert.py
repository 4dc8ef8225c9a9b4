"""``lightning-presets convert SRC DST``: a checkpoint converted to the layout the job that will load it resumes (one
file, the Trainer's sharded folder, a DeepSpeed universal checkpoint) or its weights to safetensors, written safely
and verified (:mod:`lightning_presets.tools.convert`).

Exit codes: 0 converted, 1 not converted (an LP820-LP823 refusal: nothing written, the source unchanged, the reason
and the fix on stderr), 2 usage error (a conversion convert does not make).
"""

from __future__ import annotations

import argparse
from dataclasses import asdict

from rich.text import Text

from lightning_presets.cli._output import emit, emit_json, fields, verdict

CONVERT_SCHEMA = "lightning-presets/convert"
CONVERT_SCHEMA_VERSION = 1
NOT_CONVERTED = 1
USAGE = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "source", help="a checkpoint: a file, a torch.distributed.checkpoint folder, a DeepSpeed folder"
    )
    parser.add_argument("destination", help="where to write the result (refused if it exists, unless --force)")
    parser.add_argument(
        "--to", choices=("file", "folder", "universal", "safetensors"), default=None,
        help="file: one torch.save file in its writer's layout (ddp*, FSDP presets and one device resume it); "
             "folder: the Trainer's sharded layout (fsdp2, tp2d_hybrid resume it at any world size); universal: a "
             "DeepSpeed ZeRO folder for another data-parallel size (ds_to_universal); safetensors: the model's weights "
             "only (default: what --strategy resumes, else file)",
    )  # fmt: skip
    parser.add_argument("--strategy", metavar="PRESET", default=None,
                        help="the preset that will resume the result: picks the layout and judges the result with "
                             "its resume guard")  # fmt: skip
    parser.add_argument("--devices", type=int, default=1, help="devices per node of that job (default 1)")
    parser.add_argument("--num-nodes", type=int, default=1, help="nodes of that job (default 1)")
    parser.add_argument("--model", metavar="MODULE:FACTORY", default=None,
                        help="the LightningModule that wrote the checkpoint: re-keys optimizer state from positions "
                             "to parameter names (--to folder)")  # fmt: skip
    parser.add_argument("--force", action="store_true", help="replace an existing destination")
    parser.add_argument("--no-verify", action="store_true", help="skip reading the result back and comparing it")
    parser.add_argument(
        "--strip-prefix", default="", metavar="PREFIX",
        help="safetensors: remove PREFIX from each name ('model.' for a LightningModule's self.model)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the result as JSON")


def run(args: argparse.Namespace) -> int:
    import warnings

    from lightning_presets.tools.convert import ConvertError, MemoryShortWarning, convert

    def said(message: Warning | str, category: type[Warning], *rest: object, **kwargs: object) -> None:
        if issubclass(category, MemoryShortWarning):  # before loading: said as it happens, on stderr
            emit(Text(f"lightning-presets convert: warning: {message}"), stderr=True)
        else:
            shown(message, category, *rest, **kwargs)  # type: ignore[arg-type]

    try:
        with warnings.catch_warnings():
            shown = warnings.showwarning
            warnings.simplefilter("always", MemoryShortWarning)
            warnings.showwarning = said
            result = convert(
                args.source, args.destination, to=args.to, strategy=args.strategy, devices=args.devices,
                num_nodes=args.num_nodes, model=args.model, force=args.force, verify_result=not args.no_verify,
                strip_prefix=args.strip_prefix,
            )  # fmt: skip
    except ConvertError as error:
        if args.json:
            emit_json({"schema": CONVERT_SCHEMA, "version": CONVERT_SCHEMA_VERSION, "converted": False,
                       "code": error.code, "error": error.message, "hint": error.hint})  # fmt: skip
        code = f"[{error.code}] " if error.code else ""
        emit(Text(f"lightning-presets convert: not converted: {code}{error.message}\n  hint: {error.hint}"),
             stderr=True)  # fmt: skip
        return NOT_CONVERTED if error.code else USAGE
    if args.json:
        emit_json({"schema": CONVERT_SCHEMA, "version": CONVERT_SCHEMA_VERSION, "converted": True, **asdict(result)})
        return 0
    rows: list[tuple[str, str | Text]] = [
        ("source", f"{result.source}: {result.source_layout}"),
        ("written", f"{result.destination} ({result.target}, {result.tensors} tensors)"),
        ("verified", "read back and equal to the source, tensor by tensor" if result.verified else "skipped"),
        ("resume guard", result.guard or "not judged"),
        ("not carried", "; ".join(result.dropped) or "nothing"),
        ("memory", result.memory),
        *(("note", each) for each in result.notes),
        ("took", f"{result.seconds:.1f} s"),
    ]
    emit(verdict("converted", ok=True), fields(rows))
    return 0
