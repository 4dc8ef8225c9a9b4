"""The ``lightning-presets`` command: ``list``, ``show``, ``check``, ``matrix``, ``doctor`` and ``plan``.

Exit codes: 0 valid, 1 rejected (errors; warnings too with ``--strict``), 2 usage error.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

__all__ = ["main"]

USAGE_ERROR = 2


def _parser() -> argparse.ArgumentParser:
    from lightning_presets._version import __version__
    from lightning_presets.cli import _check, _doctor, _list, _matrix, _plan, _show

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
    ):
        sub = commands.add_parser(name, help=text, description=text)
        module.add_arguments(sub)
        sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it).

    Whatever the input, the result is an exit code (0, 1 or 2) and a message, never a traceback: usage errors
    and unwritable output exit 2; an unexpected exception (a bug) is one line naming where it happened, also 2.
    """
    import sys

    from lightning_presets.core.findings import UsageError

    parser = _parser()
    args = parser.parse_args(argv)
    prefix = f"lightning-presets {args.command}: error"
    try:
        code = int(args.run(args))
        sys.stdout.flush()
        return code
    except UsageError as error:
        parser.exit(USAGE_ERROR, f"{prefix}: {error}\n")
    except BrokenPipeError:  # `lightning-presets list | head`
        _detach_stdout()
        return 0
    except OSError as error:  # the output cannot be written (`> /dev/full`, a read-only file)
        _detach_stdout()
        where = f" ({error.filename})" if error.filename else ""
        parser.exit(USAGE_ERROR, f"{prefix}: {error.strerror or error}{where}\n")
    except (RecursionError, MemoryError) as error:
        parser.exit(USAGE_ERROR, f"{prefix}: the input is too large or too deeply nested ({type(error).__name__})\n")
    except Exception as error:  # a bug: one line that says where, not a traceback
        parser.exit(USAGE_ERROR, f"{prefix}: internal error: {_where(error)}; please report it\n")
    return USAGE_ERROR


def _detach_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail again (Python's documented recipe)."""
    import os
    import sys

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (tests capture it)
        pass


def _where(error: Exception) -> str:
    import traceback

    frames = traceback.extract_tb(error.__traceback__)
    last = f" at {frames[-1].filename}:{frames[-1].lineno}" if frames else ""
    return f"{type(error).__name__}: {error}{last}"
