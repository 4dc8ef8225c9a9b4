"""``lightning-presets explain``: a failed run's logs turned into one cause and one fix per failure."""

from __future__ import annotations

import argparse
import sys

from rich.console import Group, RenderableType
from rich.text import Text

from lightning_presets.cli._output import emit, emit_json, fields, heading, indented, verdict
from lightning_presets.failures import CATEGORIES
from lightning_presets.tools import explain as _explain

DESCRIPTION = (
    "Explain a failed distributed run from what it left: a SLURM output file, torchrun's --log-dir folder (per-rank "
    "stdout/stderr and torchelastic error files), Lightning's output or a pasted traceback (- reads standard input). "
    "One paragraph per distinct failure: its code, the cause, the fix, the ranks and files it was seen in, and which "
    "came first; ranks that only timed out or lost a peer after it are told apart as consequences."
)
EPILOG = (
    f"Categories: {', '.join(CATEGORIES)}. "
    "Exit codes: 0 something was explained, 1 nothing was recognised (the files read are listed), 2 usage error."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = DESCRIPTION
    parser.epilog = EPILOG
    parser.add_argument("paths", nargs="+", metavar="PATH", help="log files, folders (read recursively) or -")
    parser.add_argument("--json", action="store_true",
                        help='print {"level", "failures": [{"code", "category", "level", "cause", "fix", "ranks", '
                        '"first", "evidence", "seen", ...}], "read": [...]}; level: cause, category, first or '
                        'nothing')  # fmt: skip
    parser.add_argument("--probe", action="store_true",
                        help="also look at this machine where it decides a cause (/dev/shm, the interfaces "
                        "*_SOCKET_IFNAME name, when an extension was built): only when the logs come from "
                        "it")  # fmt: skip


def _ranks(failure: _explain.Failure) -> str:
    ranks = failure.ranks
    if not ranks:
        return "rank unknown"
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


MAX_PLACES = 4
"""Places listed per rank (and ranks listed) before the rest are counted."""


def _places(failure: _explain.Failure) -> str:
    """Where it was seen, by rank: ``rank 1: a/error.json:7, a/stderr.log:9``; a failure seen thousands of times is
    a few lines and a count, not a line per place."""
    by_rank: dict[int | None, list[str]] = {}
    for event in failure.events:
        by_rank.setdefault(event.rank, []).append(f"{event.source}:{event.line}")
    ordered = sorted(by_rank.items(), key=lambda item: (item[0] is None, item[0] or 0))
    lines = []
    for rank, places in ordered[:MAX_PLACES]:
        unique = list(dict.fromkeys(places))
        more = f", ... ({len(unique) - MAX_PLACES} more)" if len(unique) > MAX_PLACES else ""
        lines.append(f"{'rank ' + str(rank) if rank is not None else 'rank unknown'}: "
                     f"{', '.join(unique[:MAX_PLACES])}{more}")  # fmt: skip
    if len(ordered) > MAX_PLACES:
        lines.append(f"... and {len(ordered) - MAX_PLACES} more ranks")
    if failure.count > len(failure.events):
        lines.append(f"seen {failure.count} times in all (the first {len(failure.events)} are listed above)")
    return "\n".join(lines)


def _paragraph(number: int, failure: _explain.Failure, first: _explain.Failure | None) -> RenderableType:
    if failure.first:
        standing = Text("first failure", style="bold red")
    elif failure.role == "consequence" and first is not None:
        standing = Text(f"after {first.code} on {_ranks(first)}: a consequence of it", style="yellow")
    else:
        standing = Text("a later failure", style="yellow")
    title = Text.assemble((f"{number}. [{failure.code}] ", "bold"), (f"{_ranks(failure)} ", "bold"), "(",
                          standing, f"; {failure.category})")  # fmt: skip
    rows: list[tuple[str, str | Text]] = [("cause", failure.cause), ("fix", failure.signature.fix)]
    if failure.probe:
        rows.append(("this machine", failure.probe))
    rows.append(("error", failure.events[0].text))
    rows.append(("seen in", _places(failure)))
    return Group(title, fields(rows, indent=3))


def render(report: _explain.Report) -> Group:
    files = len(report.places)
    lines = sum(count for _, count in report.places)
    parts: list[RenderableType] = [heading(f"lightning-presets explain: {files} file(s) read, {lines} line(s)")]
    for path, start in report.windows:
        parts.append(indented(f"{path}: only its end was read, from line {start} (the last "
                              f"{_explain.MAX_BYTES >> 20} MiB); line numbers are the file's own"))  # fmt: skip
    for path, why in report.skipped:
        parts.append(indented(f"{path}: not read ({why})"))
    parts.append("")
    first = report.first
    for number, failure in enumerate(report.failures, start=1):
        parts += [_paragraph(number, failure, first), ""]
    if report.explained and first is not None:
        known = {
            "cause": "its cause is known",
            "category": "its category is known, not which of its causes",
        }.get(report.level, "no signature knows it: read that rank's traceback; what followed it is known")
        parts.append(verdict(f"EXPLAINED ({report.level}): the first failure is {first.code} ({first.category}) on "
                             f"{_ranks(first)}, {known}; {len(report.failures)} distinct failure(s); exit 0",
                             ok=True))  # fmt: skip
    elif first is not None:
        parts.append(verdict(f"FIRST FAILURE ONLY (first): {first.events[0].text} on {_ranks(first)}; no known "
                             "category: read that rank's traceback; exit 1", ok=False))  # fmt: skip
        parts.append(indented("\n".join(f"{path} ({count} lines)" for path, count in report.places)))
    else:
        parts.append(verdict("NOTHING RECOGNISED: no failure in what was read; exit 1", ok=False))
        parts.append(indented("\n".join(f"{path} ({count} lines)" for path, count in report.places) or "(nothing)"))
    return Group(*parts)


def run(args: argparse.Namespace) -> int:
    report = _explain.explain(args.paths, sys.stdin, probe=args.probe)
    if args.json:
        emit_json(report.as_dict())
    else:
        emit(render(report))
    return report.exit_code
