"""The inventory's areas beyond Lightning: DeepSpeed's engine and ZeRO optimizers, torch's FSDP1, FSDP2, DDP, DTensor
and env:// rendezvous. Their sites are found by reading the installed source, never by importing it.

An area is a set of root functions (``module:qualname``) and the modules its helpers may live in. Its functions are
the roots and every function they call, transitively, that resolves statically to a function of those modules:
``self.m(...)`` to a method of the same class, ``f(...)`` to a function of the same module or one imported by name
from an allowed module, ``mod.f(...)`` through an imported module, ``C(...)`` to ``C.__init__``. A site is any
``raise``, ``assert`` (``_p_assert`` too), warning, or log that announces ignored or rewritten input
(``IGNORED_WORDS``) inside those functions (their nested functions included), and each sentence of a root's (and its
class's) docstring that documents a limitation (``LIMITATION_WORDS``). A function a new release adds to the chain,
or a site it adds or removes, changes the listing, which the drift test compares with the data.
"""

from __future__ import annotations

import ast
import importlib.util
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from late_failures_sites import Site, numbered, sites_in

LOG_CALLS = frozenset({"info", "log_dist", "print_rank_0", "debug", "warning_once", "warn_once"})
"""Calls that log: a site only when the message announces ignored or rewritten input."""
IGNORED_WORDS = re.compile(
    r"ignor|overrid|overwrit|instead|disabl|not supported|unsupported|will be set|will use|setting .* to"
    r"|fall(ing)? ?back|automatically|forc(e|ing)|skipp|reset",
    re.IGNORECASE,
)
LIMITATION_WORDS = re.compile(
    r"not (yet )?supported|unsupported|does not support|do not support|doesn.t support|incorrect|not compatible"
    r"|incompatible|undefined behavio|silently|cannot be used|must not|only support",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class Area:
    name: str
    package: str
    """``deepspeed`` or ``torch``: the release the sites are recorded under."""
    title: str
    roots: tuple[str, ...]
    """``module:qualname`` of the entry points."""
    modules: tuple[str, ...]
    """The modules whose functions the chain may enter."""


AREAS: tuple[Area, ...] = (
    Area(
        "deepspeed-engine",
        "deepspeed",
        "DeepSpeed's engine and ZeRO optimizers' initialisation",
        (
            "deepspeed:initialize",
            "deepspeed.runtime.engine:DeepSpeedEngine.__init__",
            "deepspeed.runtime.zero.stage_1_and_2:DeepSpeedZeroOptimizer.__init__",
            "deepspeed.runtime.zero.stage3:DeepSpeedZeroOptimizer_Stage3.__init__",
        ),
        (
            "deepspeed",
            "deepspeed.runtime.engine",
            "deepspeed.runtime.zero.stage_1_and_2",
            "deepspeed.runtime.zero.stage3",
        ),
    ),
    Area(
        "torch-fsdp1",
        "torch",
        "torch's FSDP1 (`FullyShardedDataParallel`)",
        ("torch.distributed.fsdp.fully_sharded_data_parallel:FullyShardedDataParallel.__init__",),
        ("torch.distributed.fsdp.fully_sharded_data_parallel", "torch.distributed.fsdp._init_utils"),
    ),
    Area(
        "torch-fsdp2",
        "torch",
        "torch's FSDP2 (`fully_shard`)",
        ("torch.distributed.fsdp._fully_shard._fully_shard:fully_shard",),
        ("torch.distributed.fsdp._fully_shard._fully_shard", "torch.distributed.fsdp._fully_shard._fsdp_init"),
    ),
    Area(
        "torch-ddp",
        "torch",
        "torch's DDP (`DistributedDataParallel`)",
        ("torch.nn.parallel.distributed:DistributedDataParallel.__init__",),
        ("torch.nn.parallel.distributed",),
    ),
    Area(
        "torch-dtensor",
        "torch",
        "torch's DTensor (`DeviceMesh`, `init_device_mesh`, `distribute_tensor`, `parallelize_module`)",
        (
            "torch.distributed.device_mesh:DeviceMesh.__init__",
            "torch.distributed.device_mesh:init_device_mesh",
            "torch.distributed.tensor._api:distribute_tensor",
            "torch.distributed.tensor.parallel.api:parallelize_module",
        ),
        ("torch.distributed.device_mesh", "torch.distributed.tensor._api", "torch.distributed.tensor.parallel.api"),
    ),
    Area(
        "torch-rendezvous",
        "torch",
        "torch's env:// rendezvous (`MASTER_ADDR`, `MASTER_PORT`, `WORLD_SIZE`, `RANK`)",
        ("torch.distributed.rendezvous:_env_rendezvous_handler",),
        ("torch.distributed.rendezvous",),
    ),
)


def module_path(base: Path, package: str, module: str) -> Path:
    """The source file of ``module`` (a module of ``package``, installed at ``base``)."""
    parts = module.split(".")[1:]
    path = base.joinpath(*parts)
    return path / "__init__.py" if (path / "__init__.py").exists() else path.with_suffix(".py")


@dataclass
class _Module:
    name: str
    path: Path
    tree: ast.Module
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef]
    """Every function by qualified name (the last definition of an overloaded name wins)."""
    classes: set[str]
    imports: dict[str, tuple[str, str]]
    """Local name -> (module, name): ``name`` empty when the local name is the module itself."""


def _resolve(package: str, module: str, level: int, target: str | None, is_package: bool) -> str:
    if not level:
        return target or ""
    parts = module.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join([*base, *([target] if target else [])])


def _parse(base: Path, package: str, module: str) -> _Module:
    path = module_path(base, package, module)
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    functions: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    classes: set[str] = set()
    imports: dict[str, tuple[str, str]] = {}

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                functions[prefix + child.name] = child
                visit(child, f"{prefix}{child.name}.<locals>.")
            elif isinstance(child, ast.ClassDef):
                classes.add(prefix + child.name)
                visit(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ImportFrom):
                source = _resolve(package, module, child.level, child.module, path.name == "__init__.py")
                for alias in child.names:
                    imports[alias.asname or alias.name] = (source, alias.name)
            elif isinstance(child, ast.Import):
                for alias in child.names:
                    if alias.asname:
                        imports[alias.asname] = (alias.name, "")
            else:
                visit(child, prefix)

    visit(tree, "")
    return _Module(module, path, tree, functions, classes, imports)


def _calls(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[str, str]]:
    """What each call in ``function``'s own body may name: ``("self", method)``, ``("name", f)`` or ``(alias,
    attribute)``. Nested functions and lambdas are not entered: they run when called (a hook, later), and a nested
    function the body calls by name is followed as a function of its own."""
    todo: list[ast.AST] = list(function.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        todo += ast.iter_child_nodes(node)
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Name):
            yield "name", func.id
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            yield ("self" if func.value.id in ("self", "cls") else func.value.id), func.attr


def functions(area: Area, base: Path) -> dict[str, set[str]]:
    """The area's functions: ``{module: {qualname, ...}}``, nested functions named ``outer.<locals>.inner``."""
    modules = {name: _parse(base, area.package, name) for name in area.modules}
    found: dict[str, set[str]] = {name: set() for name in modules}
    todo = [tuple(root.split(":")) for root in area.roots]
    while todo:
        module_name, qualname = todo.pop()
        module = modules[module_name]
        if qualname in found[module_name] or qualname not in module.functions:
            continue
        found[module_name].add(qualname)
        outer = qualname.split(".<locals>.")[0]
        owner = outer.rsplit(".", 1)[0] if "." in outer else ""
        for target, name in _calls(module.functions[qualname]):
            local = f"{qualname}.<locals>.{name}"
            if target == "name" and local in module.functions:
                todo.append((module_name, local))
            else:
                todo += _targets(modules, module, owner, target, name)
    return found


def _targets(modules: dict[str, _Module], module: _Module, owner: str, target: str, name: str) -> list[tuple[str, str]]:
    """The functions of the allowed ``modules`` a call ``target.name(...)`` (or ``name(...)``) resolves to."""
    if target == "self":
        return [(module.name, f"{owner}.{name}")] if owner in module.classes else []
    if target == "name":
        if name in module.functions:
            return [(module.name, name)]
        if name in module.classes:
            return [(module.name, f"{name}.__init__")]
        source, imported = module.imports.get(name, ("", ""))
        if source in modules and imported:
            return _targets(modules, modules[source], "", "name", imported)
        return []
    source, imported = module.imports.get(target, ("", ""))
    as_module = source if not imported else f"{source}.{imported}"
    if as_module in modules:
        return _targets(modules, modules[as_module], "", "name", name)
    return []


def area_sites(area: Area, base: Path) -> list[Site]:
    """Every site of the area's functions in the release installed at ``base``."""
    sites: list[Site] = []
    for module, chosen in functions(area, base).items():
        if not chosen:
            continue
        path = module_path(base, area.package, module)
        found = sites_in(path, area.name, module, asserts=True, logs=(LOG_CALLS, IGNORED_WORDS))
        sites += [site for site in found if site.qualname in chosen]
        sites += limitations(area, path, module, chosen)
    return sites


def limitations(area: Area, path: Path, module: str, chosen: set[str]) -> list[Site]:
    """The sentences of the roots' docstrings (and their classes') that document a limitation."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots = {root.split(":")[1] for root in area.roots if root.split(":")[0] == module} & chosen
    owners = {root.rsplit(".", 1)[0] for root in roots if "." in root}
    sites = []
    for node in _named(tree, ""):
        qualname, definition = node
        if qualname not in roots | owners:
            continue
        doc = ast.get_docstring(definition) or ""
        for sentence in re.split(r"(?<=[.!?])\s+|\n\s*\n", doc):
            if LIMITATION_WORDS.search(sentence):
                text = " ".join(sentence.split())
                line = definition.body[0].lineno
                sites.append(Site(area.name, module, qualname, "documented", "limitation", text, line, line, line))
    return list(numbered(sites))


def _named(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            yield prefix + child.name, child
            yield from _named(child, f"{prefix}{child.name}.")
        elif not isinstance(child, ast.expr):
            yield from _named(child, prefix)


# --- the installed packages ------------------------------------------------------------------------------------------


def package_dir(name: str) -> Path | None:
    """Where the installed top-level package ``name`` lives (found without importing it)."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def backend_sites(package: str) -> list[Site]:
    """Every site of the installed ``package``'s (``deepspeed``, ``torch``) areas."""
    base = package_dir(package)
    if base is None:
        return []
    return [site for area in AREAS if area.package == package for site in area_sites(area, base)]


def backend_files() -> list[Path]:
    """The source files of the areas (traced while constructing: none of their sites may run there)."""
    files = []
    for area in AREAS:
        base = package_dir(area.package)
        if base is not None:
            files += [module_path(base, area.package, module) for module in area.modules]
    return sorted(set(files))


def site_phases(sites: Iterable[Site], lines: Mapping[str, set[int]]) -> dict[str, str]:
    """Each site's phase: ``construction`` when its deciding line executed while constructing (``lines``: the
    trace's executed lines per file), else ``after``."""
    found = {}
    for site in sites:
        package = site.module.split(".")[0]
        base = package_dir(package)
        path = module_path(base, package, site.module) if base else Path()
        found[site.key] = "construction" if site.decides in lines.get(str(path), set()) else "after"
    return found
