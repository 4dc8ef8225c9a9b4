"""Rendering shared by the commands, with rich: colour and live progress on a terminal, plain text when piped.

Plain text is the same layout without styles and without trailing spaces; it is what a pipe, a file,
``NO_COLOR=1`` or ``TERM=dumb`` get (``COLUMNS`` sets its width when piped; a ``COLUMNS`` or ``LINES`` that is not
a number is ignored). ``--json`` never goes through here except :func:`emit_json`.

A reader that stops early (``| head -c1``, ``| true``) does not change the exit code: what is left unwritten is
dropped (:func:`write`), and the command still exits with what it found. :func:`write_file` replaces a file only
once the new content is completely written.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TextIO

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

PLAIN_WIDTH = 120
"""Columns of plain-text output (``COLUMNS`` overrides it); a terminal uses its own width."""
SEVERITY_STYLE = {"error": "bold red", "warning": "yellow"}
Progress = Callable[[str, int, int], None]
"""``update(what, done, total)``: what long work reports as it goes."""


_SIZE_VARIABLES = ("COLUMNS", "LINES", "JUPYTER_COLUMNS", "JUPYTER_LINES")


def _environment() -> dict[str, str]:
    """``os.environ`` without a terminal size that is not plain ASCII digits (rich reads ``COLUMNS=²`` as a number)."""
    return {
        name: value
        for name, value in os.environ.items()
        if name not in _SIZE_VARIABLES or re.fullmatch(r"[0-9]{1,5}", value)
    }


def write(text: str, stream: TextIO | None = None) -> None:
    """Write to stdout (or ``stream``); when the reader has gone (a broken pipe), drop the rest, never raise."""
    stream = stream or sys.stdout
    try:
        stream.write(text)
        stream.flush()
    except BrokenPipeError:
        if stream is sys.stdout:
            detach_stdout()


def detach_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush cannot fail again (Python's documented recipe)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file behind stdout (tests capture it)
        pass


def write_file(path: str, text: str) -> str | None:
    """Replace the file ``path`` with ``text`` atomically: written to a temporary file in the same folder, then
    renamed over it, so a write that fails (disk full, file size limit) leaves the old file as it was.

    A symbolic link is followed; a new file gets the permissions ``open`` would give it, an existing one keeps its
    own. What is not a regular file (``/dev/stdout``, a pipe) is written in place: it cannot be replaced. Nor can a
    file with other hard links (a rename would leave them pointing at the old text) or a writable file in a folder
    the user cannot write to: those are written in place too, and the reason is returned for the caller to say.
    """
    target = os.path.realpath(path)
    try:
        status: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        status = None
    if status is not None and not stat.S_ISREG(status.st_mode):
        _write_in_place(target, text)
        return None
    if status is not None and status.st_nlink > 1:
        _write_in_place(target, text)
        return f"{path} has {status.st_nlink} hard links: written in place (not atomically) to keep them"
    if status is None:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    else:
        mode = status.st_mode
    try:
        descriptor, temporary = tempfile.mkstemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.")
    except PermissionError:
        if status is None or not os.access(target, os.W_OK):
            raise
        _write_in_place(target, text)
        return f"the folder of {path} is not writable: written in place (not atomically)"
    try:
        with open(descriptor, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temporary, stat.S_IMODE(mode))
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return None


def _write_in_place(target: str, text: str) -> None:
    with open(target, "w", encoding="utf-8") as file:
        file.write(text)


MAX_TEXT = 8000
"""The most characters of one message, hint or JSON string a command prints: a message that quotes a user's value
(Lightning's own errors do) is bounded however long the value was."""


def bounded(text: str, limit: int = MAX_TEXT) -> str:
    """``text``, or its first ``limit`` characters and how many there were."""
    if len(text) <= limit:
        return text
    return f"{text[: limit - 40]}... <{len(text):,} characters>"


def _bounded_strings(data: Any) -> Any:
    if isinstance(data, str):
        return bounded(data)
    if isinstance(data, dict):
        return {key: _bounded_strings(value) for key, value in data.items()}
    if isinstance(data, list | tuple):
        return [_bounded_strings(value) for value in data]
    return data


def emit_json(data: Any, stream: TextIO | None = None) -> None:
    """``data`` as indented JSON, each string in it :func:`bounded`."""
    write(json.dumps(_bounded_strings(data), indent=2, ensure_ascii=False) + "\n", stream)


def _console(stream: TextIO, **options: Any) -> Console:
    # markup=False: messages carry user values such as `plugins=[...]`, which rich would read as markup.
    return Console(file=stream, markup=False, highlight=False, emoji=False, _environ=_environment(), **options)


def emit(*renderables: RenderableType | str, stderr: bool = False) -> None:
    """Print on stdout (or stderr): styled on a terminal; plain and without trailing spaces otherwise."""
    stream = sys.stderr if stderr else sys.stdout
    terminal = _console(stream)
    content = Group(*renderables)  # one renderable per line ("" is an empty line)
    if terminal.is_terminal and not terminal.no_color and terminal.color_system is not None:
        try:
            terminal.print(content, crop=False)
        except BrokenPipeError:
            if stream is sys.stdout:
                detach_stdout()
        return
    buffer = io.StringIO()
    columns = _environment().get("COLUMNS", "")
    width = terminal.width if terminal.is_terminal else max(int(columns), 40) if columns else PLAIN_WIDTH
    _console(buffer, width=width, color_system=None).print(content, crop=False)
    write("".join(line.rstrip() + "\n" for line in buffer.getvalue().splitlines()), stream)


def heading(text: str) -> Text:
    return Text(text, style="bold")


def verdict(text: str, *, ok: bool) -> Text:
    return Text(text, style="bold green" if ok else "bold red")


def severity(value: str) -> Text:
    return Text(value, style=SEVERITY_STYLE.get(value, ""))


def table(headers: Sequence[str], rows: Iterable[Sequence[str | Text]], *, wrap: Sequence[int] = ()) -> Table:
    """A table with a rule under its header; columns listed in ``wrap`` wrap, the others never do."""
    grid = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="bold", padding=(0, 1, 0, 0))
    for index, header in enumerate(headers):
        grid.add_column(header, no_wrap=index not in wrap, overflow="fold")
    for row in rows:
        grid.add_row(*row)
    return grid


def fields(rows: Iterable[tuple[str, str | Text]], *, indent: int = 2) -> Padding:
    """Aligned ``label  value`` lines; values wrap under themselves."""
    grid = Table.grid(padding=(0, 2, 0, 0))
    grid.add_column(no_wrap=True, style="bold")
    grid.add_column(overflow="fold")
    for label, value in rows:
        grid.add_row(label, value)
    return indented(grid, indent)


def indented(renderable: RenderableType | str, indent: int = 2) -> Padding:
    return Padding(renderable, (0, 0, 0, indent))


def findings(items: Sequence[Any], *, title: str = "findings") -> RenderableType:
    """Findings grouped by severity, errors first; code, message and hint aligned. ``items`` have ``code``,
    ``severity``, ``message`` and ``hint`` (a :class:`~lightning_presets.Finding` or its ``as_dict()``)."""
    rows = [item if isinstance(item, dict) else item.as_dict() for item in items]
    if not rows:
        return Text(f"{title}: none")
    parts: list[RenderableType] = []
    for level in ("error", "warning"):
        group = [row for row in rows if row["severity"] == level]
        if not group:
            continue
        lead = f"{title}: " if not parts else ""
        count = f"{len(group)} {level}{'s' if len(group) > 1 else ''}"
        parts.append(Text.assemble((lead, "bold"), (count, SEVERITY_STYLE[level])))
        grid = Table.grid(padding=(0, 2, 0, 0))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        for row in group:
            body = Text(bounded(row["message"]))
            body.append("\nhint: ", style="dim")
            body.append(bounded(row["hint"]))
            grid.add_row(Text(f"[{row['code']}]", style=SEVERITY_STYLE[level]), body)
        parts.append(indented(grid))
    return Group(*parts)


@contextlib.contextmanager
def progress(enabled: bool, description: str) -> Iterator[Progress | None]:
    """A progress bar on stderr while long work runs, only on a terminal (none when piped or with ``--json``)."""
    console = Console(stderr=True, _environ=_environment())
    if not enabled or not console.is_terminal:
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
    from rich.progress import Progress as Bar

    columns = (SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeElapsedColumn())  # fmt: skip
    with Bar(*columns, console=console, transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(what: str, done: int, total: int) -> None:
            bar.update(task, description=what, completed=done, total=total)

        yield update
