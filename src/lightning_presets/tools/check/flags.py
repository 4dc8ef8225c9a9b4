"""The Trainer's arguments as ``check`` flags: every keyword of the installed Lightning's ``Trainer.__init__``.

Read from Lightning's source with :mod:`ast`, without importing Lightning, so that building the command line (and
``lightning-presets --help``) stays fast; the check itself imports Lightning anyway.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
from pathlib import Path

_TRAINER = ("pytorch", "trainer", "trainer.py")
LEFT_OUT = frozenset({"callbacks", "logger", "profiler", "plugins"})
"""Arguments that are objects a command line cannot carry (``--plugin`` names precision presets instead)."""


@functools.cache
def trainer_parameters(package: str = "lightning") -> tuple[str, ...]:
    """The keyword parameters of ``Trainer.__init__`` in the installed ``package``, in their order; empty when it is
    not installed or its source cannot be read."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):  # not installed, as an import hook or a broken install may say
        return ()
    if spec is None or not spec.submodule_search_locations:
        return ()
    path = Path(next(iter(spec.submodule_search_locations)), *_TRAINER)
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, UnicodeDecodeError):
        return ()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "Trainer":
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    arguments = item.args
                    return tuple(arg.arg for arg in [*arguments.args, *arguments.kwonlyargs] if arg.arg != "self")
    return ()


def flag_parameters(package: str = "lightning") -> tuple[str, ...]:
    """The Trainer parameters ``check`` takes as ``--name-with-dashes VALUE`` flags."""
    return tuple(name for name in trainer_parameters(package) if name not in LEFT_OUT)
