"""The package's shape: layers import only downwards (``lint-imports`` in CI), no module imports itself in a
circle, and the package root holds only the public facade."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import grimp
import pytest

import lightning_presets

PACKAGE = Path(lightning_presets.__file__).parent
LAYERS = (
    "cli",
    "testing",
    "ray",
    "tools",
    "strategies",
    "plugins",
    "guards",
    "inspection",
    "diagnose",
    "registry",
    "checkpoints",
    "failures",
    "core",
)


@pytest.fixture
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("lightning_presets", include_external_packages=True)


def test_no_import_circle(graph: grimp.ImportGraph) -> None:
    """For every import A -> B inside the package, B never leads back to A (imports inside functions included)."""
    circles = []
    ours = {module for module in graph.modules if module.startswith("lightning_presets")}
    for importer in sorted(ours):
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & ours):
            chain = graph.find_shortest_chain(importer=imported, imported=importer)
            if chain is not None:
                circles.append(" -> ".join((importer, *chain)))
    assert circles == []


def test_a_circle_would_be_found(graph: grimp.ImportGraph) -> None:
    """The check above can fail: an import from the core up to the CLI closes a circle."""
    graph.add_import(importer="lightning_presets.core.findings", imported="lightning_presets.cli")
    chain = graph.find_shortest_chain(importer="lightning_presets.cli", imported="lightning_presets.core.findings")
    assert chain is not None


REPOSITORY = Path(__file__).resolve().parents[1]
SCRIPT_FOLDERS = ("scripts", "benchmarks", "tests")
"""The repository's folders of top-level modules (run as scripts, imported by their bare names)."""


def _sibling_imports(folder: Path) -> dict[str, set[str]]:
    """Each module of ``folder`` with the modules of the same folder it imports (inside functions too)."""
    modules = {path.stem: path for path in folder.glob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module.split(".")[0])
        edges[name] = found & modules.keys() - {name}
    return edges


def _circles(edges: dict[str, set[str]]) -> list[str]:
    """Every import edge A -> B from which A is reachable again, as ``A -> B -> ... -> A``."""
    circles = []
    for start in sorted(edges):
        for first in sorted(edges[start]):
            paths, seen = [[start, first]], {first}
            while paths:
                path = paths.pop(0)
                if path[-1] == start:
                    circles.append(" -> ".join(path))
                    break
                for following in sorted(edges.get(path[-1], ())):
                    if following == start or following not in seen:
                        seen.add(following)
                        paths.append([*path, following])
    return circles


@pytest.mark.parametrize("folder", SCRIPT_FOLDERS)
def test_no_import_circle_among_the_repository_scripts(folder: str) -> None:
    """The scripts, benchmarks and test helpers import each other by bare name: none of them in a circle."""
    edges = _sibling_imports(REPOSITORY / folder)
    assert len(edges) > 5  # the folder was read (the repository's, not an installed package's parent)
    assert _circles(edges) == []


def test_a_circle_among_scripts_would_be_found() -> None:
    """The check above can fail: the inventory's document importing the inventory back closes a circle."""
    edges = _sibling_imports(REPOSITORY / "scripts")
    edges["late_failures_doc"].add("late_failures")
    assert "late_failures -> late_failures_doc -> late_failures" in _circles(edges)


REPOSITORY_FOLDERS = ("scripts", "benchmarks", "tests", "examples")
"""Where the repository's modules outside the package live, in folders at any depth (``tests/evidence``,
``benchmarks/sweep``, the example distribution's package)."""


def _resolve(name: str, level: int, importer: Path, top: Path) -> Path | None:
    """The repository file an import of ``name`` from ``importer`` reaches, if any: relative to the importer's package
    for a relative import; else from the importer's folder or one above it up to ``top`` (pytest and ``python
    script.py`` put those on ``sys.path``), the longest dotted prefix that is a module or a package; else the one
    module of that name anywhere under ``top`` (a folder a conftest adds to ``sys.path``)."""
    if level:
        bases = [importer.parents[level - 1]]
    else:
        bases = [importer.parent, *(parent for parent in importer.parent.parents if parent.is_relative_to(top))]
    parts = [part for part in name.split(".") if part]
    for base in bases:
        for end in range(len(parts), 0, -1):
            stem = base.joinpath(*parts[:end])
            for candidate in (stem.with_suffix(".py"), stem / "__init__.py"):
                if candidate.is_file():
                    return candidate
        if level and not parts:
            return base / "__init__.py" if (base / "__init__.py").is_file() else None
    if not level:  # a folder a conftest puts on sys.path (tests/evidence's helpers): the one module of that name
        found = [path for path in top.rglob(f"{parts[0]}.py")] if parts else []
        return found[0] if len(found) == 1 else None
    return None


@functools.cache
def _repository_imports(root: Path) -> dict[str, frozenset[str]]:
    """Each module of the repository outside the package (by path from ``root``) with the repository modules it
    imports, inside functions too; an import of ``pkg.mod`` or ``from pkg import mod`` reaches ``mod`` itself."""
    edges: dict[str, frozenset[str]] = {}
    for folder in REPOSITORY_FOLDERS:
        top = root / folder
        for path in sorted(top.rglob("*.py")):
            found: set[Path] = set()
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names: list[tuple[str, int]] = []
                if isinstance(node, ast.Import):
                    names = [(alias.name, 0) for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    module = node.module or ""
                    names = [(f"{module}.{alias.name}" if module else alias.name, node.level) for alias in node.names]
                for name, level in names:
                    target = _resolve(name, level, path, top)
                    if target is not None and target != path:
                        found.add(target)
            edges[str(path.relative_to(root))] = frozenset(str(each.relative_to(root)) for each in found)
    return edges


def test_no_import_circle_anywhere_in_the_repository() -> None:
    """Beside the package (checked above): the scripts, benchmarks, tests and the example distribution, in folders
    at any depth, import no module that leads back to them."""
    edges = {module: set(targets) for module, targets in _repository_imports(REPOSITORY).items()}
    assert len(edges) > 100  # the repository was read
    assert sum(len(targets) for targets in edges.values()) > 50  # and its imports resolved
    assert _circles(edges) == []


def test_a_circle_in_a_nested_folder_would_be_found() -> None:
    """The check above can fail: an evidence helper importing a test that imports it closes a circle."""
    edges = {module: set(targets) for module, targets in _repository_imports(REPOSITORY).items()}
    importer = next(name for name, targets in edges.items() if "tests/evidence/proof.py" in targets)
    edges["tests/evidence/proof.py"].add(importer)
    assert f"tests/evidence/proof.py -> {importer} -> tests/evidence/proof.py" in _circles(edges)


def test_the_package_root_is_the_facade_and_its_wiring() -> None:
    modules = {path.name for path in PACKAGE.iterdir() if path.suffix == ".py"}
    assert modules == {"__init__.py", "__main__.py", "_version.py", "_api.py", "_activate.py"}
    folders = {path.name for path in PACKAGE.iterdir() if path.is_dir() and (path / "__init__.py").exists()}
    assert folders == set(LAYERS)


def test_the_core_needs_neither_torch_nor_lightning(graph: grimp.ImportGraph) -> None:
    core = graph.find_descendants("lightning_presets.core") | {"lightning_presets.core"}
    imported = {name for module in core for name in graph.find_modules_directly_imported_by(module)}
    assert "re" in imported  # the graph holds external packages
    assert not {name for name in imported if name.split(".")[0] in ("torch", "lightning", "pytorch_lightning")}
    guards = graph.find_modules_directly_imported_by("lightning_presets.inspection.blocks")
    assert "torch" in guards  # and it would see them


def test_tools_is_a_few_subpackages_named_for_what_they_do() -> None:
    """A newcomer finds ``check``, ``convert``, ``explain``, ``plan`` and the simulation from the folder names; few
    modules stay loose."""
    tools = PACKAGE / "tools"
    folders = {path.name for path in tools.iterdir() if (path / "__init__.py").exists()}
    assert folders == {"check", "convert", "explain", "plan", "simulation"}
    loose = [path.name for path in tools.glob("*.py") if path.name != "__init__.py"]
    assert len(loose) <= 8, loose


def test_check_never_reaches_the_planner(graph: grimp.ImportGraph) -> None:
    """``check`` and ``plan`` import each other in one direction only: the planner asks the check whether a preset
    applies; the check never reaches the planner, directly or through another module (``check --model``'s memory plan
    is added above both, in ``tools.verdict``; ``lint-imports`` holds the same contract)."""
    check, plan = "lightning_presets.tools.check", "lightning_presets.tools.plan"
    assert not graph.chain_exists(importer=check, imported=plan, as_packages=True)
    assert graph.chain_exists(importer=plan, imported=check, as_packages=True)  # the one direction there is
    graph.add_import(importer="lightning_presets.tools.check.stages", imported="lightning_presets.tools.plan.fit")
    assert graph.chain_exists(importer=check, imported=plan, as_packages=True)  # and it would see the other


def test_only_the_simulation_imports_unittest(graph: grimp.ImportGraph) -> None:
    """Patching torch or Lightning is the simulation's job alone (``lint-imports`` holds the same contract)."""
    importers = {
        module
        for module in graph.find_modules_that_directly_import("unittest")
        if module.startswith("lightning_presets")
    }
    assert importers
    assert all(module.startswith("lightning_presets.tools.simulation") for module in importers), importers


def test_repository_generators_are_not_in_the_wheel() -> None:
    """What only writes repository files (docs/errors.md, the README's tables) lives in scripts/, not the package."""
    names = {path.stem for path in PACKAGE.rglob("*.py")}
    assert not names & {"docs", "evidence", "errors_doc", "evidence_table"}
    assert (Path(__file__).resolve().parents[1] / "scripts" / "errors_doc.py").exists()


MAX_MODULE_LINES = 500
"""The most lines a module under src/ may have (issue 39 item 6): a longer one is split by concern."""


def test_no_module_is_over_the_size_limit() -> None:
    sizes = {path: len(path.read_text(encoding="utf-8").splitlines()) for path in sorted(PACKAGE.rglob("*.py"))}
    over = [f"{path.relative_to(PACKAGE.parent)}: {lines} lines" for path, lines in sizes.items()
            if lines > MAX_MODULE_LINES]  # fmt: skip
    assert not over, f"modules over {MAX_MODULE_LINES} lines (split them by concern): {over}"


MAX_GUARDS_LINES = 3_500
"""The most lines ``guards/`` may hold (issue 39 item 5): it holds guards only; what reads facts lives in
``inspection``, what explains a stuck run in ``diagnose``."""


def _lines_under(folder: Path) -> int:
    return sum(len(path.read_text(encoding="utf-8").splitlines()) for path in folder.rglob("*.py"))


def test_guards_hold_guards_only() -> None:
    lines = _lines_under(PACKAGE / "guards")
    assert lines <= MAX_GUARDS_LINES, (
        f"guards/ holds {lines} lines, over {MAX_GUARDS_LINES}: move what is not a guard (a fact reader, a report) "
        "to the package of what it is"
    )
    assert _lines_under(PACKAGE / "diagnose") > 0  # the hang report moved out of guards/runtime
