"""Lightning's, DeepSpeed's and torch's private names: each declared once (``registry.private``), each present in the
installed releases (run on both Lightning legs and both torch ends), and none used in the package without its entry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from lightning_presets.registry import private

PACKAGE = Path(private.__file__).resolve().parents[1]

NOT_THEIRS = {
    # the standard library's and pynvml's, not a Lightning/torch release's
    "_getframe": "sys", "_current_frames": "sys", "_exit": "os", "_Unpickler": "pickle", "_Stop": "pickle",
    "_Unframer": "pickle", "_initializing": "importlib's module spec", "_call": "pynvml (core.hardware)",
    "_path": "importlib.metadata's entry-point distribution",
    # probed on purpose: present means Lightning 2.6's behaviour, absent 2.5's (registry.compat)
    "_pl_static_graph_delay_done": "a release probe",
    # torch operator names (aten._*), dispatch-time attributes of an OpOverload, and compiled-module attributes the
    # planner reads defensively (getattr with a default): listed by what they are, not by a class
    "_scaled_dot_product_flash_attention": "an aten operator",
    "_scaled_dot_product_efficient_attention": "an aten operator",
    "_local_scalar_dense": "an aten operator", "_grouped_mm": "an aten operator", "_opname": "an OpOverload attribute",
    "_overloadpacket": "an OpOverload attribute", "_orig_mod": "torch.compile's wrapper",
    "_compiled_call_impl": "torch.compile's wrapper", "_resolve_process_group": "c10d's functional collectives",
    "_base": "a view tensor's base", "_fsdp_state_pre_forward": "FSDP2's hook (tools.plan.tracking)",
    "_C": "torch's extension module", "_dynamo": "torch.compile", "_subclasses": "fake tensors",
}  # fmt: skip
"""Private names the scan finds that are not a Lightning/DeepSpeed/torch API this list pins, with why."""


@pytest.mark.parametrize("entry", private.NAMES, ids=lambda entry: entry.label)
def test_the_installed_releases_have_it(entry: private.Private) -> None:
    assert private.missing([entry]) == []


def test_a_renamed_private_name_is_reported_by_name() -> None:
    """The check above can fail: a name a release does not have, as a rename would leave it."""
    gone = private.Private(f"{private._STRATEGY}", "_configure_launcher_renamed", "override", ("guards.strategy",))
    (problem,) = private.missing([gone])[:1]
    assert "Strategy._configure_launcher_renamed" in problem
    assert "guards.strategy" in problem
    attribute = private.Private("lightning.pytorch.strategies.ddp:DDPStrategy", "_no_such_state", "attribute", ("x",))
    assert "no longer sets _no_such_state" in private.missing([attribute])[0]


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")


def _used(tree: ast.AST) -> set[str]:
    """Private names the module reaches on something other than itself: attributes, imports, getattr strings."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) not in ("self", "cls"):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("lightning_presets"):
            found.update(part for part in node.module.split("."))
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(part for alias in node.names for part in alias.name.split("."))
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("getattr", "hasattr", "setattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            found.add(node.args[1].value)
    return {name for name in found if name.startswith("_") and not name.startswith(("__", "_lp"))}


def _own(tree: ast.Module) -> set[str]:
    """The private names the module defines at its top level (functions, classes, names, our own imports) and the
    attributes its classes set on themselves; methods are not ours by definition: they may override Lightning's."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(target.id for target in targets if isinstance(target, ast.Name))
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("lightning_presets"):
            names.update(alias.asname or alias.name for alias in node.names)
    return names


def _overrides(tree: ast.Module) -> set[str]:
    """Private methods the module's classes define that a Lightning strategy class has too: overrides."""
    from lightning.fabric import strategies as fabric_strategies
    from lightning.pytorch import strategies as trainer_strategies

    lightning = {name for module in (trainer_strategies, fabric_strategies) for cls in vars(module).values()
                 if isinstance(cls, type) for name in dir(cls) if name.startswith("_")}  # fmt: skip
    return {
        node.name
        for cls in ast.walk(tree)
        if isinstance(cls, ast.ClassDef)
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name in lightning and not node.name.startswith("__")
    }


def test_no_private_name_is_used_without_its_entry() -> None:
    declared: dict[str, set[str]] = {}
    for entry in private.NAMES:
        for name in (entry.name, *entry.owner.replace(":", ".").split(".")):
            if name.startswith("_"):
                declared.setdefault(name, set()).update(entry.where)
    ours: set[str] = set().union(*(_own(ast.parse(path.read_text())) for path in PACKAGE.rglob("*.py")))
    unlisted = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        if module == "registry.private":
            continue
        tree = ast.parse(path.read_text())
        for name in sorted(((_used(tree) - ours) | _overrides(tree)) - NOT_THEIRS.keys()):
            if module not in declared.get(name, set()):
                unlisted.append(f"{module}: {name}")
    assert unlisted == [], "declare these in lightning_presets.registry.private (or say why in NOT_THEIRS)"
