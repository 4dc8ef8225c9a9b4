"""Generated mutants of every error rule's condition, and the rule's own construction-level tests that must kill them.

The neighbours' mutation check (``tests/test_rule_mutations.py``) widens a rule only at the configurations its
neighbours recorded; a widening anywhere else (a ``==`` made ``<=``, one condition of an early exit dropped) is
invisible to it. This module rewrites the source of each error rule's function (``ast``), one change at a time:

- each comparison operator flipped or loosened (``==`` to ``!=``/``<=``/``>=``, ``<`` to ``<=``/``>=``, ``in`` to
  ``not in``, ``is`` to ``is not``, ...), and each integer compared with moved by one either way;
- each operand of an ``and``/``or`` dropped, and the operator swapped;
- each ``not`` dropped;
- each early exit (``if ...: return None``) removed.

A mutant is killed by the first of the rule's own tests it makes fail, each run in this process the way its test
runs it: the rule's documented ``fails`` example must still report it and its ``fixed`` example must not (what
``tests/test_examples.py`` checks), and each accepted neighbour (``tests/neighbours.py``) must stay accepted. The
2-process proofs (``@pytest.mark.proves``, ``tests/references.py``) are not run: they prove the failure with
the guards off, so no rule mutant changes them.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import hashlib
import inspect
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.rules import Rule
from lightning_presets.tools import examples
from neighbours import CHECK, GPU8, NEIGHBOURS, Neighbour, declared_rules, error_rules, run

_LOOSER: dict[type[ast.cmpop], tuple[type[ast.cmpop], ...]] = {
    ast.Eq: (ast.NotEq, ast.LtE, ast.GtE),
    ast.NotEq: (ast.Eq,),
    ast.Lt: (ast.LtE, ast.GtE),
    ast.LtE: (ast.Lt, ast.Gt),
    ast.Gt: (ast.GtE, ast.LtE),
    ast.GtE: (ast.Gt, ast.Lt),
    ast.In: (ast.NotIn,),
    ast.NotIn: (ast.In,),
    ast.Is: (ast.IsNot,),
    ast.IsNot: (ast.Is,),
}
_SYMBOL = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=", ast.In: "in",
           ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Mutant:
    """One change to one rule's function: where (line in the rule's source), what, and the changed tree."""

    code: str
    index: int
    """Its position among the rule's mutants (stable while the rule's source is)."""
    line: int
    """The line, counted from the rule function's ``def`` (1)."""
    what: str
    tree: ast.Module

    @property
    def name(self) -> str:
        return f"{self.code}#{self.index}"

    def describe(self) -> str:
        return f"{self.name} (line {self.line}: {self.what})"


def _function_tree(check: Callable[..., Any]) -> ast.Module:
    """The rule function's own source as a module holding only its ``def``: no decorators, no annotations (they
    name what only type checking imports)."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(check)))
    function = tree.body[0]
    if not isinstance(function, ast.FunctionDef):
        raise TypeError(f"{check!r} is not a plain function")
    function.decorator_list = []
    function.returns = None
    arguments = function.args
    for argument in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg):
        if argument is not None:
            argument.annotation = None
    return tree


def _is_early_exit(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.If)
        and not node.orelse
        and len(node.body) == 1
        and isinstance(node.body[0], ast.Return)
        and (node.body[0].value is None or (isinstance(node.body[0].value, ast.Constant)
                                            and node.body[0].value.value is None))
    )  # fmt: skip


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def _builds_the_message(node: ast.AST) -> bool:
    """``Problem(...)`` (the message and the fix, once the rule has decided) or an f-string: not the condition."""
    if isinstance(node, ast.JoinedStr):
        return True
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Problem"


def _message_nodes(function: ast.AST) -> set[int]:
    """The nodes that only build the message: inside ``Problem(...)`` or an f-string, and the value of each name
    assigned once and read nowhere else (``listed = ", ".join(...)``), transitively."""
    nodes = list(ast.walk(function))
    message = {id(inner) for node in nodes if _builds_the_message(node) for inner in ast.walk(node)}
    assigned = [node for node in nodes if isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)]  # fmt: skip
    changed = True
    while changed:
        changed = False
        for node in assigned:
            name = node.targets[0].id  # type: ignore[attr-defined]
            if id(node.value) in message or sum(1 for each in assigned if each.targets[0].id == name) != 1:  # type: ignore[attr-defined]
                continue
            reads = [each for each in nodes
                     if isinstance(each, ast.Name) and each.id == name and isinstance(each.ctx, ast.Load)]  # fmt: skip
            if reads and all(id(each) in message for each in reads):
                message |= {id(inner) for inner in ast.walk(node.value)}
                changed = True
    return message


def _edits(tree: ast.Module) -> list[tuple[int, str, Callable[[ast.Module], None]]]:
    """Each mutation as (line, description, an edit applied to a copy of ``tree``); nodes found by their position in
    ``ast.walk`` order, which a deep copy keeps."""
    nodes = list(ast.walk(tree.body[0]))
    message = _message_nodes(tree.body[0])
    edits: list[tuple[int, str, Callable[[ast.Module], None]]] = []

    def at(position: int) -> Callable[[ast.Module], ast.AST]:
        return lambda copied: list(ast.walk(copied.body[0]))[position]

    for position, node in enumerate(nodes):
        find = at(position)
        if id(node) in message:
            continue
        if isinstance(node, ast.Compare):
            for slot, op in enumerate(node.ops):
                pair = [node.left, *node.comparators][slot : slot + 2]
                for other in _LOOSER.get(type(op), ()):
                    if other in (ast.LtE, ast.GtE) and any(_is_text(each) for each in pair):
                        continue  # a string's order is no boundary: `!=` is the mutant of `==` 'cuda'

                    text = f"{_SYMBOL[type(op)]} -> {_SYMBOL[other]} in `{ast.unparse(node)}`"
                    edits.append((node.lineno, text, functools.partial(_set_op, find, slot, other)))
            for slot, operand in enumerate([node.left, *node.comparators]):
                if isinstance(operand, ast.Constant) and type(operand.value) is int:
                    for delta in (-1, 1):
                        text = f"{operand.value} -> {operand.value + delta} in `{ast.unparse(node)}`"
                        edits.append((node.lineno, text, functools.partial(_shift, find, slot, delta)))
        elif isinstance(node, ast.BoolOp):
            word = "and" if isinstance(node.op, ast.And) else "or"
            for slot, value in enumerate(node.values):
                text = f"`{ast.unparse(value)}` dropped from `{word}`"
                edits.append((node.lineno, text, functools.partial(_drop, find, slot)))
            edits.append((node.lineno, f"`{word}` swapped in `{ast.unparse(node)}`", functools.partial(_swap, find)))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            edits.append((node.lineno, f"`not` dropped in `{ast.unparse(node)}`", functools.partial(_unnot, find)))
        elif _is_early_exit(node):
            assert isinstance(node, ast.If)
            text = f"early exit `if {ast.unparse(node.test)}: return None` removed"
            edits.append((node.lineno, text, functools.partial(_no_exit, find)))
    return edits


def _set_op(find: Callable[[ast.Module], ast.AST], slot: int, other: type[ast.cmpop], tree: ast.Module) -> None:
    node = find(tree)
    assert isinstance(node, ast.Compare)
    node.ops[slot] = other()


def _shift(find: Callable[[ast.Module], ast.AST], slot: int, delta: int, tree: ast.Module) -> None:
    node = find(tree)
    assert isinstance(node, ast.Compare)
    operand = [node.left, *node.comparators][slot]
    assert isinstance(operand, ast.Constant)
    operand.value += delta


def _drop(find: Callable[[ast.Module], ast.AST], slot: int, tree: ast.Module) -> None:
    node = find(tree)
    assert isinstance(node, ast.BoolOp)
    del node.values[slot]
    if len(node.values) == 1:  # `a and b` without `a` is `b`
        _replace(tree, node, node.values[0])


def _swap(find: Callable[[ast.Module], ast.AST], tree: ast.Module) -> None:
    node = find(tree)
    assert isinstance(node, ast.BoolOp)
    node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()


def _unnot(find: Callable[[ast.Module], ast.AST], tree: ast.Module) -> None:
    node = find(tree)
    assert isinstance(node, ast.UnaryOp)
    # the operand in place of the `not`: replace the node in its parent
    _replace(tree, node, node.operand)


def _no_exit(find: Callable[[ast.Module], ast.AST], tree: ast.Module) -> None:
    node = find(tree)
    _replace(tree, node, ast.Pass())


def _replace(tree: ast.Module, old: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for name, value in ast.iter_fields(parent):
            if value is old:
                setattr(parent, name, new)
                return
            if isinstance(value, list) and any(item is old for item in value):
                value[[id(item) for item in value].index(id(old))] = new
                return
    raise LookupError("node not found")


DELEGATES: dict[str, str] = {
    "LP604": "returns what `_below_capability` decides (LP603's module): no comparison of its own",
    "LP717": "returns `t.about(launch.node_rank_outside(...))`: the condition is the launch module's",
    "LP718": "returns `t.about(launch.rank_outside(...))`: the condition is the launch module's",
}
"""Error rules whose function holds no condition to mutate (it returns a helper's decision), and where it lives."""


@functools.cache
def mutants(code: str) -> tuple[Mutant, ...]:
    """Every generated mutant of error rule ``code``'s function, in source order."""
    check = error_rules()[code].check
    tree = _function_tree(check)
    found = []
    for line, what, edit in _edits(tree):
        copied = copy.deepcopy(tree)
        edit(copied)
        ast.fix_missing_locations(copied)
        found.append(Mutant(code, len(found), line, what, copied))
    return tuple(found)


def _compiled(mutant: Mutant, original: Callable[..., Any]) -> Callable[..., Any]:
    """The mutated function with ``original``'s globals and closure (a rule factory's values kept)."""
    free = original.__code__.co_freevars
    maker = ast.FunctionDef(
        name="__mutant_maker__",
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=name) for name in free], kwonlyargs=[], kw_defaults=[],
                           defaults=[]),
        body=[*mutant.tree.body, ast.Return(value=ast.Name(id=mutant.tree.body[0].name, ctx=ast.Load()))],  # type: ignore[attr-defined]
        decorator_list=[],
    )  # fmt: skip
    module = ast.fix_missing_locations(ast.Module(body=[maker], type_ignores=[]))
    scratch: dict[str, Any] = dict(original.__globals__)
    exec(compile(module, f"<mutant {mutant.name}>", "exec"), scratch)  # this module's own rewrite of a rule
    cells = dict(zip(free, (cell.cell_contents for cell in original.__closure__ or ()), strict=True))
    inner = scratch["__mutant_maker__"](**cells)
    return types.FunctionType(
        inner.__code__, original.__globals__, original.__name__, original.__defaults__, inner.__closure__
    )


@contextlib.contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """Every rule object of the mutant's code running the mutated function (each with its own closure)."""
    rules: tuple[Rule, ...] = declared_rules()[mutant.code]
    originals = [each.check for each in rules]
    replacements = [_compiled(mutant, original) for original in originals]
    try:
        for each, replacement in zip(rules, replacements, strict=True):
            object.__setattr__(each, "check", replacement)  # a frozen dataclass: only this module swaps it
        yield
    finally:
        for each, original in zip(rules, originals, strict=True):
            object.__setattr__(each, "check", original)


# --- the rule's own tests ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Check:
    """One of a rule's construction-level tests: its name, and whether it passes now."""

    name: str
    passes: Callable[[], bool]


def _example(code: str, which: str) -> bool:
    rule = error_rules()[code]
    source, setting = (
        (rule.fails, rule.setting) if which == "fails" else (rule.fixed, rule.fixed_setting or rule.setting)
    )
    if source.startswith(CHECK):  # a `check` rule's example is the command (docs/errors.md runs it so)
        result = run(Neighbour(source=source, why=which, setting=setting))
        codes, error = result.codes, result.exception
    else:
        outcome = examples.run_example.__wrapped__(source, setting)  # uncached: the rule changed
        codes, error = outcome.codes, outcome.error
    return error is None and (code in codes) == (which == "fails")


def _neighbour(code: str, index: int) -> bool:
    """Accepted as ``tests/test_neighbours.py`` accepts it: no error of any code (a rule that raises is LP012), no
    exception."""
    result = run(NEIGHBOURS[code][index])
    return result.exception is None and not result.errors


_TP = 'Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", {}), accelerator="cuda", devices={}{})'
ACCEPTED: dict[str, tuple[Neighbour, ...]] = {
    "LP219": (
        Neighbour(
            "model = nn.Sequential(nn.Linear(8, 8), nn.SyncBatchNorm(8))\n"
            'Trainer(strategy="fsdp2", accelerator="cuda", devices=8).fit(model)',
            "SyncBatchNorm on CUDA, the device torch's SyncBatchNorm normalises (not run here: no GPU); kills the "
            "mutant without the rule's early exit for CUDA, which refused every SyncBatchNorm model",
        ),
    ),
}
"""Accepted configurations this check adds where a generated mutant showed that the rule's own tests pinned
nothing: run and judged as neighbours (``test_the_added_configurations_are_judged_as_declared``)."""

REFUSED: dict[str, tuple[str, ...]] = {
    "LP216": (_TP.format("data_parallel_size=4, tensor_parallel_size=2", 8, ", detect_anomaly=True"),),
    "LP201": (_TP.format("data_parallel_size=1, tensor_parallel_size=2", 4, ""),),
    "LP211": (
        'Trainer(strategy=lightning_presets.strategy("fsdp2", data_parallel_size=1, tensor_parallel_size=1), '
        'accelerator="cpu", devices=2)',
    ),
}
"""Refused configurations at a boundary the rule's ``fails`` example does not sit on (the smallest tensor-parallel
size anomaly mode fails with; a product of sizes below the world, not only above): each must report the rule."""


def _refused(code: str, source: str) -> bool:
    outcome = examples.run_example.__wrapped__(source, GPU8)
    return outcome.error is None and code in outcome.codes


def _accepted(code: str, neighbour: Neighbour) -> bool:
    result = run(neighbour)
    return result.exception is None and not result.errors


def checks(code: str) -> tuple[Check, ...]:
    """The rule's tests a mutant must pass: its examples (``fails`` first: most mutants that narrow die there), then
    its neighbours; a neighbour the rule refuses today (a recorded false rejection) is left out. Then what this check
    adds (:data:`ACCEPTED`, :data:`REFUSED`)."""
    found = [Check("fails example", lambda: _example(code, "fails")),
             Check("fixed example", lambda: _example(code, "fixed"))]  # fmt: skip
    for index, neighbour in enumerate(NEIGHBOURS.get(code, ())):
        if not neighbour.false_rejection:
            found.append(Check(f"neighbour {index}", functools.partial(_neighbour, code, index)))
    for index, neighbour in enumerate(ACCEPTED.get(code, ())):
        found.append(Check(f"added neighbour {index}", functools.partial(_accepted, code, neighbour)))
    for index, source in enumerate(REFUSED.get(code, ())):
        found.append(Check(f"added refusal {index}", functools.partial(_refused, code, source)))
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Verdict:
    mutant: Mutant
    killed_by: str | None
    """The first of the rule's tests that failed under the mutant; ``None``: it survived."""


class BrokenTest(AssertionError):
    """One of a rule's tests fails with no mutant applied: it cannot kill anything."""


@functools.cache
def passes_unmutated(code: str, name: str) -> bool:
    return next(check for check in checks(code) if check.name == name).passes()


def judge(mutant: Mutant) -> Verdict:
    """Run the rule's tests under the mutant up to the first that fails; that test must pass without it."""
    with applied(mutant):
        killer = next((check.name for check in checks(mutant.code) if not check.passes()), None)
    if killer is not None and not passes_unmutated(mutant.code, killer):
        raise BrokenTest(f"{mutant.code}'s {killer} fails without any mutant")
    return Verdict(mutant, killer)


def key(mutant: Mutant) -> str:
    """How the results file names a mutant: its rule and change, without the line (which edits elsewhere move)."""
    return f"{mutant.code} | {mutant.what}"


SURVIVOR = "survives: "
"""The prefix of each survivor's line in ``benchmarks/results/mutations.txt``."""


def recorded_survivors(text: str) -> set[str]:
    """The survivors the committed benchmark result lists (``survives: LP804 | ...``)."""
    return {line.split(SURVIVOR, 1)[1].strip() for line in text.splitlines() if SURVIVOR in line}


def all_mutants() -> list[Mutant]:
    return [mutant for code in sorted(error_rules()) for mutant in mutants(code)]


def sample(every: int, salt: str = "") -> list[Mutant]:
    """A deterministic share of the mutants (about one in ``every``, by a hash of the name and what it changes): the
    same set on every machine and run while the rules' source is unchanged."""
    chosen = []
    for mutant in all_mutants():
        digest = hashlib.sha256(f"{salt}{mutant.name}{mutant.what}".encode()).digest()
        if digest[0] % every == 0:
            chosen.append(mutant)
    return chosen
