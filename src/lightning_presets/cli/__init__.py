"""The ``lightning-presets`` command: ``list``, ``show``, ``check``, ``matrix``, ``doctor``, ``plan``, ``explain``
and ``convert``.

Exit codes: 0 valid, 1 rejected (errors; warnings too with ``--strict``), 2 usage error.
"""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Sequence
from typing import NoReturn

__all__ = ["main"]

USAGE_ERROR = 2
_REQUIRED = {
    "torch": "pip install torch",
    "lightning": "pip install lightning",
    "pytorch_lightning": "pip install pytorch-lightning",
    "lightning_fabric": "pip install lightning-fabric",
}
"""The packages a command may need that may be missing, and the line that installs each."""


def _parser() -> argparse.ArgumentParser:
    from lightning_presets._version import __version__
    from lightning_presets.cli import _check, _convert, _doctor, _explain, _list, _matrix, _plan, _show

    parser = argparse.ArgumentParser(
        prog="lightning-presets",
        description="Curated, guarded distributed-training presets for PyTorch Lightning.",
        epilog="Exit codes: 0 valid, 1 rejected (errors; warnings too with --strict), 2 usage error.",
    )
    parser.add_argument("--version", action="version", version=f"lightning-presets {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, text in (
        ("list", _list, "list every preset, with where it comes from and its status"),
        ("show", _show, "show one preset: arguments, guards and the equivalent plain Lightning code"),
        ("check", _check, "validate a Trainer/Fabric configuration for a target cluster, without launching"),
        ("matrix", _matrix, "check every strategy × accelerator × devices × precision; write the matrix"),
        ("doctor", _doctor, "explain this environment: versions, autoload, registries, trust, extras, cluster"),
        ("plan", _plan, "per-GPU memory of a model under every preset (traced with --model) and which fits"),
        ("explain", _explain, "explain a failed run's logs: one cause and one fix per failure, the first one first"),
        ("convert", _convert, "convert a checkpoint to one file or to safetensors, written safely and verified"),
    ):
        sub = commands.add_parser(name, help=text, description=text)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def run() -> NoReturn:
    """The ``lightning-presets`` command and ``python -m lightning_presets``: :func:`main`, then exit with its code.

    Everything is written by then: the heap is frozen first, so that the interpreter's exit does not spend seconds
    collecting torch's and Lightning's objects (atexit handlers and the final flushes still run).
    """
    code = main()
    gc.freeze()
    sys.exit(code)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it).

    Whatever the input, the result is an exit code (0, 1 or 2) and a message, never a traceback: usage errors
    and unwritable output exit 2; an unexpected exception (a bug) is one line naming where it happened, also 2. A
    reader that stops early (``| head``) keeps the exit code the command computed. Without torch or Lightning
    installed, a command that needs them says so (2).
    """
    from lightning_presets.cli._output import detach_stdout
    from lightning_presets.core.findings import UsageError

    parser = _parser()
    args = parser.parse_args(argv)
    prefix = f"lightning-presets {args.command}: error"
    try:
        return int(args.run(args))  # the output goes through _output.write: a broken pipe never changes this
    except UsageError as error:
        parser.exit(USAGE_ERROR, f"{prefix}: {error}\n")
    except BrokenPipeError:  # output written past _output.write: the result is unknown, so never "valid"
        detach_stdout()
        parser.exit(USAGE_ERROR, f"{prefix}: the output was cut off (broken pipe) before the result was known\n")
    except ModuleNotFoundError as error:
        missing = (error.name or "").partition(".")[0]
        if missing not in _REQUIRED:
            parser.exit(USAGE_ERROR, f"{prefix}: internal error: {_where(error)}; please report it\n")
        needs = f"{args.command} needs {missing}, which is not installed: {_REQUIRED[missing]}"
        parser.exit(USAGE_ERROR, f"{prefix}: {needs} (`lightning-presets doctor` explains this environment)\n")
    except OSError as error:  # the output cannot be written (`> /dev/full`, a read-only file)
        detach_stdout()
        where = f" ({error.filename})" if error.filename else ""
        parser.exit(USAGE_ERROR, f"{prefix}: {error.strerror or error}{where}\n")
    except (RecursionError, MemoryError) as error:
        parser.exit(USAGE_ERROR, f"{prefix}: the input is too large or too deeply nested ({type(error).__name__})\n")
    except Exception as error:  # a bug: one line that says where, not a traceback
        parser.exit(USAGE_ERROR, f"{prefix}: internal error: {_where(error)}; please report it\n")
    return USAGE_ERROR


def _where(error: Exception) -> str:
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    last = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}: {error}{last}"
