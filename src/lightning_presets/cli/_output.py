"""Output helpers shared by the commands: aligned tables, wrapped cells, JSON."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, TextIO

WIDTH = 100


def emit_json(data: Any, stream: TextIO | None = None) -> None:
    (stream or sys.stdout).write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], *, wrap_last: int = 0) -> str:
    """A plain-text table; with ``wrap_last`` the last column is wrapped at that width."""
    widths = [max(len(str(cell)) for cell in column) for column in zip(headers, *rows, strict=False)]
    if wrap_last:
        widths[-1] = min(widths[-1], wrap_last)
    lines = ["  ".join(header.ljust(width) for header, width in zip(headers, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * width for width in widths))
    for row in rows:
        cells = [str(cell) for cell in row]
        last = _wrap_cell(cells[-1], wrap_last)
        lead = "  ".join(cell.ljust(width) for cell, width in zip(cells[:-1], widths, strict=False))
        pad = " " * len(lead)
        lines.append(f"{lead}  {last[0]}".rstrip() if cells[:-1] else last[0])
        lines.extend(f"{pad}  {part}".rstrip() for part in last[1:])
    return "\n".join(lines)


def _wrap_cell(text: str, width: int) -> list[str]:
    if not width:
        return text.splitlines() or [""]
    lines = []
    for paragraph in text.splitlines() or [""]:
        lines.extend(textwrap.wrap(paragraph, width, subsequent_indent="  " if paragraph.startswith("hint:") else "")
                     or [""])  # fmt: skip
    return lines


def wrapped(text: str, indent: int, width: int = WIDTH) -> str:
    """``text`` wrapped to ``width``, every line after the first indented by ``indent`` spaces."""
    lines = []
    for paragraph in text.splitlines() or [""]:
        lines.extend(textwrap.wrap(paragraph, max(width - indent, 20)) or [""])
    return ("\n" + " " * indent).join(lines)
