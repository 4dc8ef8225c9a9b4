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
    """Run the command line; returns the exit code (the console script exits with it)."""
    import sys

    from lightning_presets.core.findings import UsageError

    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except UsageError as error:
        parser.exit(USAGE_ERROR, f"lightning-presets {args.command}: error: {error}\n")
    except BrokenPipeError:  # `lightning-presets list | head`
        sys.stderr.close()
        return 0
    return USAGE_ERROR
