"""The failure sites in a package's source, found by reading it (``ast``), never by importing it.

A site is a ``raise``, a call that warns, an ``assert`` (DeepSpeed only), a pydantic validator (which may rewrite
what the user gave) or a deprecated config field (renamed silently). It is named stably across releases: module,
qualified function, exception type and a fingerprint of the message's literal text; never a line number.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

WARN_CALLS = frozenset({"rank_zero_warn", "rank_zero_deprecation", "warn", "warning"})
"""Calls that warn: ``rank_zero_warn``, ``warnings.warn``, ``WarningCache.warn``, ``logger.warning``."""
VALIDATORS = frozenset({"field_validator", "model_validator", "validator", "root_validator"})
ONCE_WARNINGS = frozenset({"warning_once", "warn_once"})
Logs = tuple[frozenset[str], re.Pattern[str]]
"""Log calls that are a site when their message matches (``late_failures_backends``: ignored or rewritten input)."""


@dataclass(frozen=True, slots=True)
class Site:
    """One place that fails, warns or rewrites, in one installed release."""

    area: str
    module: str
    """The importable module, standalone copies already mapped to their ``lightning.*`` name."""
    qualname: str
    """``Class.method``, ``function``, ``outer.<locals>.inner`` or ``<module>``."""
    kind: str
    """``raise``, ``warn``, ``assert``, ``validator``, ``deprecated``, ``schema``, ``rewrite``, ``log`` or
    ``documented``."""
    error: str
    """The exception (or warning call, validator name, deprecated field) as written."""
    message: str
    """The message's literal text, ``{}`` where a value is formatted in."""
    line: int
    decides: int
    """The line whose execution decides whether the site can fire (see :func:`deciding_line`)."""
    starts: int
    """The first line its function (class body, module) executes: that line ran iff the function ran."""
    occurrence: int = 1
    """1 for the first site with the same key in the function, 2 for the next, ..."""

    @property
    def key(self) -> str:
        """The stable identifier: ``module:qualname:kind:error:fingerprint`` (``#n`` for the n-th repeat)."""
        base = f"{self.module}:{self.qualname}:{self.kind}:{self.error}:{fingerprint(self.message)}"
        return base if self.occurrence == 1 else f"{base}#{self.occurrence}"


def normalised(message: str) -> str:
    """The message as compared across releases: case, whitespace and quoting differences ignored."""
    return re.sub(r"\s+", " ", message.replace("`", "").replace("'", "").replace('"', "")).strip().lower()


def fingerprint(message: str) -> str:
    return hashlib.sha1(normalised(message).encode()).hexdigest()[:8]


def literal_text(node: ast.expr | None) -> str:
    """The literal text of a message expression; ``{}`` for each value formatted into it."""
    if node is None:
        return ""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(literal_text(part) if isinstance(part, ast.Constant) else "{}" for part in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return literal_text(node.left) + literal_text(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "..." % values
        return re.sub(r"%[-#0 +]*\d*(?:\.\d+)?[sdrifg]", "{}", literal_text(node.left))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format":
        return re.sub(r"\{[^{}]*\}", "{}", literal_text(node.func.value))
    return "{" + ast.unparse(node) + "}"


def _call_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _raised(node: ast.Raise) -> tuple[str, str]:
    """(exception, message) of a ``raise``; a bare ``raise`` re-raises what was caught."""
    exc = node.exc
    if exc is None:
        return "<re-raise>", ""
    if isinstance(exc, ast.Call):
        first = exc.args[0] if exc.args else None
        return ast.unparse(exc.func), literal_text(first)
    return ast.unparse(exc), ""


def _warned(node: ast.Call) -> tuple[str, str] | None:
    """(warning call, message) when ``node`` is a call that warns."""
    name = _call_name(node.func)
    if name not in WARN_CALLS:
        return None
    if name == "warn" and isinstance(node.func, ast.Attribute) and _call_name(node.func.value) == "warnings":
        name = "warnings.warn"
    category = next((ast.unparse(k.value) for k in node.keywords if k.arg == "category"), "")
    if not category and len(node.args) > 1 and name != "warning":  # logger.warning's arguments are format values
        category = ast.unparse(node.args[1])
    label = f"{name}[{category}]" if category else name
    return label, literal_text(node.args[0] if node.args else None)


def _is_validator(decorator: ast.expr) -> str:
    call = decorator.func if isinstance(decorator, ast.Call) else decorator
    name = _call_name(call)
    return name if name in VALIDATORS else ""


def _deprecated_field(node: ast.AnnAssign) -> str | None:
    """The new parameter's name when ``node`` declares a pydantic field marked deprecated (DeepSpeed's convention:
    ``Field(..., json_schema_extra={"deprecated": True, "new_param": "..."})``)."""
    value = node.value
    if not (isinstance(value, ast.Call) and _call_name(value.func) == "Field"):
        return None
    for keyword in value.keywords:
        if keyword.arg != "json_schema_extra" or not isinstance(keyword.value, ast.Dict):
            continue
        extra = {
            k.value: v
            for k, v in zip(keyword.value.keys, keyword.value.values, strict=True)
            if isinstance(k, ast.Constant)
        }
        flag = extra.get("deprecated")
        if isinstance(flag, ast.Constant) and flag.value is True:
            new = extra.get("new_param")
            return literal_text(new) if new is not None else ""
    return None


def _forbids_extra(node: ast.Assign) -> bool:
    """``model_config = ConfigDict(..., extra="forbid")``: pydantic rejects unknown keys of the model."""
    value = node.value
    if not (isinstance(value, ast.Call) and _call_name(value.func) == "ConfigDict"):
        return False
    return any(
        k.arg == "extra" and isinstance(k.value, ast.Constant) and k.value.value == "forbid" for k in value.keywords
    )


def _compares_to(test: ast.expr, literal: str) -> bool:
    return any(
        isinstance(node, ast.Compare)
        and any(isinstance(side, ast.Constant) and side.value == literal for side in (node.left, *node.comparators))
        for node in ast.walk(test)
    )


_TRIES = (ast.Try, getattr(ast, "TryStar", ast.Try))  # try/except* exists from Python 3.11


def deciding_line(stack: list[ast.AST], node: ast.stmt) -> int:
    """The line whose execution decides whether ``node`` can run.

    The test of the innermost ``if``/``while`` around it, the iterable of a ``for``, the first statement of the
    ``try`` whose handler holds it, the items of a ``with``, the subject of a ``match``; at the top of a function,
    the function's first statement. Each of these lines executes (and is traced) before ``node`` could.
    """
    child: ast.AST = node
    for parent in reversed(stack):
        if isinstance(parent, ast.If | ast.While) and child is not parent.test:
            return _first_evaluated(parent.test)
        if isinstance(parent, ast.For | ast.AsyncFor) and child is not parent.iter:
            return _first_evaluated(parent.iter)
        if isinstance(parent, _TRIES) and child in parent.handlers:
            return _first_evaluated(parent.body[0])
        if isinstance(parent, ast.With | ast.AsyncWith):
            return _first_evaluated(parent.items[0].context_expr)
        if isinstance(parent, ast.Match):
            return _first_evaluated(parent.subject)
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            return _first_statement(parent.body).lineno
        if isinstance(parent, ast.ClassDef | ast.Module):
            return _first_statement(parent.body).lineno
        child = parent
    return node.lineno


def _first_evaluated(node: ast.AST) -> int:
    """The line of the leftmost leaf of ``node``: the first line its evaluation executes (``(`` on a line of its own
    emits no line event)."""
    leaves = [n for n in ast.walk(node) if isinstance(n, ast.Name | ast.Constant) and hasattr(n, "lineno")]
    return min((n.lineno, n.col_offset) for n in leaves)[0] if leaves else getattr(node, "lineno", 0)


def _first_statement(body: list[ast.stmt]) -> ast.stmt:
    """The first statement that executes (a docstring emits no line event)."""
    if len(body) > 1 and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[1]
    return body[0]


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Module)


class _Finder(ast.NodeVisitor):
    def __init__(self, area: str, module: str, *, asserts: bool, pydantic: bool, logs: Logs | None = None) -> None:
        self.area, self.module, self.asserts, self.pydantic, self.logs = area, module, asserts, pydantic, logs
        self.stack: list[ast.AST] = []
        self.names: list[str] = []
        self.sites: list[Site] = []

    def generic_visit(self, node: ast.AST) -> None:
        self.stack.append(node)
        super().generic_visit(node)
        self.stack.pop()

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        function_parent = any(isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef) for p in self.stack[-1:])
        self.names.append(f"<locals>.{node.name}" if function_parent else node.name)
        if self.pydantic and not isinstance(node, ast.ClassDef):
            validator = next((v for v in map(_is_validator, node.decorator_list) if v), "")
            if validator:
                self._add(node, "validator", validator, "")
        self.generic_visit(node)
        self.names.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    @property
    def qualname(self) -> str:
        return ".".join(self.names) or "<module>"

    def _add(self, node: ast.stmt, kind: str, error: str, message: str) -> None:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):  # a validator: it runs or it does not
            starts = decides = _first_statement(node.body).lineno
        else:
            scope = next((p for p in reversed(self.stack) if isinstance(p, _SCOPES)), None)
            starts = _first_statement(scope.body).lineno if scope is not None else node.lineno
            decides = deciding_line(self.stack, node)
        site = Site(self.area, self.module, self.qualname, kind, error, message, node.lineno, decides, starts)
        self.sites.append(site)

    def visit_Raise(self, node: ast.Raise) -> None:
        self._add(node, "raise", *_raised(node))
        self.generic_visit(node)

    def visit_Assert(self, node: ast.Assert) -> None:
        if self.asserts:
            self._add(node, "assert", "AssertionError", literal_text(node.msg) or ast.unparse(node.test))
        self.generic_visit(node)

    def visit_Expr(self, node: ast.Expr) -> None:
        if isinstance(node.value, ast.Call):
            warned = _warned(node.value)
            if warned:
                self._add(node, "warn", *warned)
            elif self.logs:
                self._logged(node, node.value, *self.logs)
        self.generic_visit(node)

    def _logged(self, node: ast.Expr, call: ast.Call, names: frozenset[str], words: re.Pattern[str]) -> None:
        """A ``_log_and_throw(Error, message)``, a ``_p_assert(condition, message)``, a warning logged once, or a log
        whose message matches ``words``."""
        name = _call_name(call.func)
        if name == "_log_and_throw" and len(call.args) > 1:  # torch's DDP: logs, then raises the given type
            self._add(node, "raise", ast.unparse(call.args[0]), literal_text(call.args[1]))
        elif name == "_p_assert" and len(call.args) > 1:
            self._add(node, "assert", "_p_assert", literal_text(call.args[1]))
        elif name in ONCE_WARNINGS and call.args:  # warning_once(logger, message) or logger.warning_once(message)
            first = call.args[0]
            logger = isinstance(first, ast.Name) and "log" in first.id and len(call.args) > 1
            self._add(node, "warn", name, literal_text(call.args[1] if logger else first))
        elif name in names and call.args:
            message = literal_text(call.args[0])
            if words.search(message):
                self._add(node, "log", name, message)

    def visit_Assign(self, node: ast.Assign) -> None:
        if self.pydantic and _forbids_extra(node):
            self._add(node, "schema", "pydantic.ValidationError", "unknown keys or values of the wrong type rejected")
        self.generic_visit(node)

    def visit_comprehension(self, node: ast.comprehension) -> None:
        statement = next(p for p in reversed(self.stack) if isinstance(p, ast.stmt))
        if self.pydantic and any(_compares_to(test, "auto") for test in node.ifs):
            self._add(statement, "rewrite", "dropped", "values equal to {} dropped before validation".format('"auto"'))
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        new = _deprecated_field(node) if self.pydantic else None
        if new is not None and isinstance(node.target, ast.Name):
            self._add(node, "deprecated", node.target.id, f"renamed to {new}" if new else "ignored")
        self.generic_visit(node)


def sites_in(
    path: Path, area: str, module: str, *, asserts: bool = False, pydantic: bool = False, logs: Logs | None = None
) -> list[Site]:
    """Every site in one source file, numbered where one function repeats the same key."""
    finder = _Finder(area, module, asserts=asserts, pydantic=pydantic, logs=logs)
    finder.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return list(numbered(finder.sites))


def numbered(sites: Iterable[Site]) -> Iterator[Site]:
    seen: dict[str, int] = {}
    for site in sites:
        base = site.key
        seen[base] = seen.get(base, 0) + 1
        yield dataclasses.replace(site, occurrence=seen[base])
