"""Every module path the package's docstrings and comments name exists: ``lightning_presets.core.context.Context``,
the same relative to the package (``tools.check.names``, ``inspection.hooks.overrides``) and file paths
(``guards/resume/rules.py``, ``src/lightning_presets/core/rules.py``, ``scripts/errors_doc.py``)."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import lightning_presets

PACKAGE = Path(lightning_presets.__file__).parent
ROOT = Path(__file__).resolve().parents[1]
LAYERS = (
    "cli",
    "testing",
    "tools",
    "strategies",
    "plugins",
    "guards",
    "inspection",
    "registry",
    "checkpoints",
    "failures",
    "core",
)

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
DOTTED = re.compile(rf"(?<![\w.])(?:lightning_presets|{'|'.join(LAYERS)})(?:\.{_NAME})+")
"""A dotted name starting at the package or one of its layers (``foo.core.x`` and ``<pkg>.tools`` are not ours)."""
PATH = re.compile(
    rf"(?<![\w./<>-])(?:src/lightning_presets/|lightning_presets/|scripts/|(?=(?:{'|'.join(LAYERS)})/))"
    rf"(?:{_NAME}/)*{_NAME}\.py\b"
)
"""A ``.py`` path in the package (from ``src/``, ``lightning_presets/`` or a layer) or under ``scripts/``."""


def mentions(source: str) -> Iterator[tuple[int, str]]:
    """``(line, text)`` of every docstring (module, class, function and attribute docstrings: each string statement)
    and every comment of a module."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            yield node.lineno, node.value.value
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string


@cache
def _names(module: Path) -> frozenset[str]:
    """What a module defines at its top level (functions, classes, assignments, imports)."""
    names: set[str] = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        names |= _defined(node)
    return frozenset(names)


def _defined(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {target.id for target in node.targets if isinstance(target, ast.Name)}
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(alias.asname or alias.name).split(".")[0] for alias in node.names}
    if isinstance(node, (ast.If, ast.Try)):  # TYPE_CHECKING blocks, optional imports
        return {name for child in (*node.body, *getattr(node, "orelse", ())) for name in _defined(child)}
    return set()


def _members(module: Path, class_name: str) -> frozenset[str] | None:
    """The names a top-level class of ``module`` defines in its body; ``None`` when it is no class there."""
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return frozenset(name for child in node.body for name in _defined(child))
    return None


def missing(dotted: str) -> str | None:
    """Why ``dotted`` (``lightning_presets.``-prefixed or relative to the package) names nothing; ``None`` when it
    names a module, or a name a module defines (and, for a class, a name its body defines)."""
    parts = dotted.removeprefix("lightning_presets.").split(".") if dotted != "lightning_presets" else []
    where = PACKAGE
    for index, part in enumerate(parts):
        if (where / part / "__init__.py").exists():
            where = where / part
            continue
        if where.is_dir() and (where / f"{part}.py").exists():
            where = where / f"{part}.py"
            continue
        module = where / "__init__.py" if where.is_dir() else where
        shown = module.relative_to(PACKAGE.parent).as_posix()
        if part not in _names(module):
            return f"{shown} defines no {part!r}"
        rest = parts[index + 1 :]
        members = _members(module, part) if rest else None
        if members is not None and rest[0] not in members:
            return f"{shown}: class {part} defines no {rest[0]!r}"
        return None
    return None


def missing_path(path: str) -> str | None:
    """Why a ``.py`` path names no file: ``scripts/`` from the repository root, the rest in the package."""
    if path.startswith("scripts/"):
        return None if (ROOT / path).is_file() else f"no file {path}"
    in_package = path.removeprefix("src/").removeprefix("lightning_presets/")
    return None if (PACKAGE / in_package).is_file() else f"no file src/lightning_presets/{in_package}"


def stale_mentions(module: Path, source: str) -> list[str]:
    shown = module.relative_to(PACKAGE.parent).as_posix()
    found = []
    for line, text in mentions(source):
        for match in DOTTED.finditer(text):
            why = missing(match.group())
            if why is not None:
                found.append(f"{shown}:{line}: {match.group()!r}: {why}")
        for match in PATH.finditer(text):
            why = missing_path(match.group())
            if why is not None:
                found.append(f"{shown}:{line}: {match.group()!r}: {why}")
    return found


def test_every_module_path_a_docstring_or_comment_names_exists() -> None:
    stale = [
        problem
        for module in sorted(PACKAGE.rglob("*.py"))
        for problem in stale_mentions(module, module.read_text(encoding="utf-8"))
    ]
    assert stale == []


def test_a_stale_path_would_be_found() -> None:
    """The check above can fail: each kind of mention, renamed to something that is not there, is reported."""
    module = PACKAGE / "core" / "context.py"
    source = '''"""Read by ``tools.check.names`` and ``lightning_presets.core.context.Context.kind``."""
# see guards/resume/rules.py and src/lightning_presets/core/rules.py
'''
    assert stale_mentions(module, source) == []
    stale = source.replace("tools.check.names", "tools.check.nomen").replace(".kind", ".caller_kind")
    stale = stale.replace("resume/rules.py", "resume.py").replace("core/rules.py", "core/rule.py")
    assert stale_mentions(module, stale) == [
        "lightning_presets/core/context.py:1: 'tools.check.nomen': lightning_presets/tools/check/__init__.py defines "
        "no 'nomen'",
        "lightning_presets/core/context.py:1: 'lightning_presets.core.context.Context.caller_kind': "
        "lightning_presets/core/context.py: class Context defines no 'caller_kind'",
        "lightning_presets/core/context.py:2: 'guards/resume.py': no file src/lightning_presets/guards/resume.py",
        "lightning_presets/core/context.py:2: 'src/lightning_presets/core/rule.py': no file "
        "src/lightning_presets/core/rule.py",
    ]


def test_names_outside_the_package_are_not_read_as_its_modules() -> None:
    """``lightning.pytorch.plugins.precision`` and ``<namespace>.strategies`` are Lightning's, not ours."""
    source = '"""In ``lightning.pytorch.plugins.precision``, ``<namespace>.strategies.x`` and foo/core/x.py."""\n'
    assert stale_mentions(PACKAGE / "core" / "context.py", source) == []
