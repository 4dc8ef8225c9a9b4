"""Lightning's, DeepSpeed's and torch's private names: each declared once (``registry.private``), each present in the
installed releases (run on both Lightning legs and both torch ends); Lightning's and DeepSpeed's used only through that
module (the door), torch's only by the modules their entry names."""

from __future__ import annotations

import ast
import functools
import importlib.util
import re
from collections.abc import Iterable
from pathlib import Path

import pytest

from lightning_presets.registry import private, private_check

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
    "_environ": "rich's Console keyword (cli._output)", "_fn": "the suffix of a preset argument's name (tools.catalog)",
}  # fmt: skip
"""Private names the scan finds that are not a Lightning/DeepSpeed/torch API this list pins, with why."""


@pytest.mark.parametrize("entry", private.NAMES, ids=lambda entry: entry.label)
def test_the_installed_releases_have_it(entry: private.Private) -> None:
    assert private_check.missing([entry]) == []


def test_a_renamed_private_name_is_reported_by_name() -> None:
    """The check above can fail: a name a release does not have, as a rename would leave it."""
    gone = private.Private(f"{private._STRATEGY}", "_configure_launcher_renamed", "override", ("guards.strategy",))
    (problem,) = private_check.missing([gone])[:1]
    assert "Strategy._configure_launcher_renamed" in problem
    assert "guards.strategy" in problem
    attribute = private.Private("lightning.pytorch.strategies.ddp:DDPStrategy", "_no_such_state", "attribute", ("x",))
    assert "no longer sets _no_such_state" in private_check.missing([attribute])[0]


DOOR = "registry.private"
"""The one module that names Lightning's and DeepSpeed's private names."""
THEIRS = (*private.LIGHTNING, *private.DEEPSPEED)
_DOTTED_PRIVATE = re.compile(r"^(?:[\w.]*\.)?(_[A-Za-z]\w*)$")


def _module_name(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE).with_suffix("").parts).removesuffix(".__init__")


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith(("__", "_lp"))


def _declared(entries: Iterable[private.Private]) -> dict[str, set[str]]:
    """Each private name of ``entries`` (their own and their owners' underscore parts), with the modules that use it."""
    declared: dict[str, set[str]] = {}
    for entry in entries:
        for name in (entry.name, *entry.owner.replace(":", ".").split(".")):
            if name.startswith("_"):
                declared.setdefault(name, set()).update(entry.where)
    return declared


def _used(tree: ast.AST) -> set[str]:
    """Private names the module reaches on something other than itself: attributes, imports, getattr strings, keyword
    arguments."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and ast.unparse(node.value) not in ("self", "cls"):
            found.add(node.attr)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.module.startswith("lightning_presets"):
            found.update(part for part in node.module.split("."))
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(part for alias in node.names for part in alias.name.split("."))
        elif isinstance(node, ast.Call):
            found.update(keyword.arg for keyword in node.keywords if keyword.arg)
            if (
                ast.unparse(node.func) in ("getattr", "hasattr", "setattr")
                and len(node.args) >= 2
                and isinstance(node.args[1], ast.Constant)
                and isinstance(node.args[1].value, str)
            ):
                found.add(node.args[1].value)
    return {name for name in found if _private(name)}


def _strings(tree: ast.AST) -> set[str]:
    """Private names spelled as a whole string or its dotted tail (``"_launcher"``, ``f"{module}._IS_INTERACTIVE"``),
    docstrings and other prose left out."""
    prose = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose:
            match = _DOTTED_PRIVATE.match(node.value)
            if match and _private(match.group(1)):
                found.add(match.group(1))
    return found


def _own(tree: ast.Module) -> set[str]:
    """The private names the module defines at its top level (functions, classes, names, our own imports); methods
    are not ours by definition: they may override Lightning's."""
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


_DEFINED = re.compile(r"^\s*(?:def|class)\s+(_\w+)|^(_\w+)\s*[:=]|self\.(_\w+)\s*(?::|=[^=])", re.MULTILINE)


@functools.cache
def _lightning() -> tuple[frozenset[str], frozenset[str]]:
    """Lightning's private names, read from its installed source (nothing imported): what its modules and classes
    define and what its methods set on ``self``; and the names of its classes."""
    spec = importlib.util.find_spec("lightning")
    assert spec is not None
    assert spec.origin is not None
    names: set[str] = set()
    classes: set[str] = set()
    for part in ("pytorch", "fabric"):
        for path in (Path(spec.origin).parent / part).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            names.update(name for match in _DEFINED.findall(text) for name in match if name)
            classes.update(re.findall(r"^\s*class\s+(\w+)", text, re.MULTILINE))
    return frozenset(name for name in names if _private(name)), frozenset(classes)


def _on_lightning(trees: Iterable[ast.Module]) -> set[str]:
    """The package's classes that end up in a Lightning strategy or plugin class (heads, mixins, the door's hooks):
    their ``self`` is Lightning's object, so their private attributes and methods are Lightning's."""
    bases = {node.name: {ast.unparse(base).rpartition(".")[2] for base in node.bases}
             for tree in trees for node in ast.walk(tree) if isinstance(node, ast.ClassDef)}  # fmt: skip
    found = {"Next", "PresetHooks", *_lightning()[1]}
    while grown := {name for name, parents in bases.items() if name not in found and parents & found}:
        found |= grown
    return found


def _on_self(tree: ast.Module, classes: set[str]) -> set[str]:
    """Private names of Lightning's that the module's Lightning-side classes use on ``self`` or define (overrides)."""
    found = set()
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or cls.name not in classes:
            continue
        for node in ast.walk(cls):
            if isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self":
                found.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AnnAssign)) and node in cls.body:
                found.add(node.name if isinstance(node, ast.FunctionDef) else ast.unparse(node.target))
    return {name for name in found if _private(name)} & _lightning()[0]


def _findings(sources: dict[str, str]) -> list[str]:
    """What the scan reports for ``sources`` (module name: code): a Lightning or DeepSpeed private name outside the
    door, a torch one in a module its entry does not name, one in the door that the door does not declare."""
    trees = {module: ast.parse(code) for module, code in sources.items()}
    ours: set[str] = set().union(*(_own(tree) for tree in trees.values()))
    theirs, torch_names = _declared(THEIRS), _declared(private.TORCH)
    everything = _declared(private.NAMES)
    lightning_side = _on_lightning(trees.values())
    found = []
    for module, tree in sorted(trees.items()):
        used = (
            (_used(tree) - ours) | (_strings(tree) & (theirs.keys() | _lightning()[0])) | _on_self(tree, lightning_side)
        )
        if module == DOOR:
            found += [f"{module}: {name} (not declared)" for name in sorted(used - _own(tree) - everything.keys())]
            continue
        for name in sorted(used - NOT_THEIRS.keys()):
            if module in torch_names.get(name, set()):
                continue
            if name in theirs or name in _lightning()[0]:
                found.append(f"{module}: {name} (Lightning's or DeepSpeed's: through {DOOR})")
            else:
                found.append(f"{module}: {name}")
    return found


def _package() -> dict[str, str]:
    return {_module_name(path): path.read_text() for path in sorted(PACKAGE.rglob("*.py"))}


def test_no_private_name_is_used_outside_the_door_or_without_its_entry() -> None:
    found = _findings(_package())
    assert found == [], (
        f"Lightning's and DeepSpeed's private names go through an accessor or mixin of {DOOR} (declared there); "
        "torch's are declared there for the module that uses them (or say why in NOT_THEIRS)"
    )


def test_the_scan_finds_a_private_name_outside_the_door() -> None:
    """The scan can fail: a module that reads ``strategy._launcher`` itself, or overrides Lightning's hook itself."""
    sources = _package()
    sources["tools.check.engine"] += "\n\ndef _peek(strategy):\n    return strategy._launcher\n"
    sources["strategies.fsdp"] += (
        "\n\nclass _Bypass(FSDPHooks):\n    def _setup_model(self, model):\n        return self._fsdp_kwargs\n"
    )
    found = _findings(sources)
    assert "tools.check.engine: _launcher (Lightning's or DeepSpeed's: through registry.private)" in found
    assert "strategies.fsdp: _setup_model (Lightning's or DeepSpeed's: through registry.private)" in found
    assert "strategies.fsdp: _fsdp_kwargs (Lightning's or DeepSpeed's: through registry.private)" in found


def test_each_door_user_goes_through_the_door() -> None:
    """The ``where`` of a Lightning or DeepSpeed entry names modules that reach it through the door: they import it, or
    define a class that inherits its hooks (through ``guards.strategy``'s head and ``PresetHooks``)."""
    trees = {module: ast.parse(code) for module, code in _package().items()}
    lightning_side = _on_lightning(trees.values())
    stale = []
    for entry in THEIRS:
        for module in entry.where:
            tree = trees[module]
            imports = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
            names = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                     and node.module == "lightning_presets.registry" for alias in node.names}  # fmt: skip
            inherits = any(isinstance(node, ast.ClassDef) and node.name in lightning_side for node in tree.body)
            if f"lightning_presets.{DOOR}" not in imports and "private" not in names and not inherits:
                stale.append(f"{entry.label}: {module}")
    assert stale == []


# Pins: what the package relies on a private name *meaning*, beyond its presence. Each test fails when the name is
# gone or no longer means what the package reads it for.

_XLA_REQUIREMENTS = {"_XLA_AVAILABLE": "torch_xla>=1.13", "_XLA_GREATER_EQUAL_2_1": "torch_xla>=2.1",
                     "_XLA_GREATER_EQUAL_2_5": "torch_xla>=2.5"}  # fmt: skip


def test_the_xla_flags_are_lightnings_torch_xla_requirements() -> None:
    """``XLA_FLAGS`` are what Lightning asks "is torch_xla (of this release) installed?" (the simulation of a TPU host
    sets them): each a requirement on torch_xla, false where torch_xla is missing."""
    from lightning.fabric.accelerators import xla

    assert set(private.XLA_FLAGS) == set(_XLA_REQUIREMENTS)
    for flag in private.XLA_FLAGS:
        requirement = getattr(xla, flag)
        assert str(requirement.requirement) == _XLA_REQUIREMENTS[flag], flag
        assert bool(requirement) is (importlib.util.find_spec("torch_xla") is not None), flag


def test_the_xla_flags_gate_what_the_simulation_turns_on() -> None:
    """Off, ``_XLA_AVAILABLE`` refuses the XLA accelerator; on (the TPU-host simulation), the accelerator builds,
    ``_XLA_GREATER_EQUAL_2_1`` makes the XLA environment ask torch_xla's ``runtime`` for the world size and
    ``_XLA_GREATER_EQUAL_2_5`` makes Lightning ask ``runtime.device_type()`` whether PJRT is in use."""
    import sys

    from lightning.fabric.accelerators import xla
    from lightning.fabric.plugins.environments import XLAEnvironment

    from lightning_presets.tools.simulation.stand_ins import standing_in

    if importlib.util.find_spec("torch_xla") is None:
        with pytest.raises(ModuleNotFoundError):
            xla.XLAAccelerator()
    with standing_in("torch_xla"):
        torch_xla = sys.modules["torch_xla"]
        xla.XLAAccelerator()
        XLAEnvironment().world_size()
        assert torch_xla.runtime.world_size.called
        assert not torch_xla.core.xla_model.xrt_world_size.called
        using_pjrt = getattr(xla, "_using_pjrt", None)
        if using_pjrt is not None:  # where the release still asks (all supported ones do)
            using_pjrt()
            assert torch_xla.runtime.device_type.called
            assert not torch_xla.runtime.using_pjrt.called


def test_the_hook_callers_name_the_hook_they_run(tmp_path: Path) -> None:
    """``HOOK_CALLERS`` are the Trainer's functions that run a user's hook, with the hook's name in their frame's
    ``hook_name`` (diagnose mode reads it: ``diagnose.hangs``); ``_call_callbacks_state_dict`` is the one that
    runs a callback's ``state_dict`` when a checkpoint is saved. One step of a real fit on the CPU shows each."""
    import sys

    import torch
    from lightning.pytorch import Callback, LightningModule, Trainer

    seen: dict[str, set[str]] = {name: set() for name in private.HOOK_CALLERS}

    def look() -> None:
        frame = sys._getframe(1)
        while frame is not None:
            if frame.f_code.co_name in seen:
                seen[frame.f_code.co_name].add(str(frame.f_locals.get("hook_name", "")))
            frame = frame.f_back

    class Model(LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(2, 1)

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            look()
            return self.layer(batch).sum()

        def on_train_start(self) -> None:
            look()

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self) -> torch.utils.data.DataLoader[torch.Tensor]:
            return torch.utils.data.DataLoader(torch.ones(2, 2), batch_size=2)

    class Watch(Callback):
        def on_train_batch_start(self, *args: object) -> None:
            look()

        def state_dict(self) -> dict[str, int]:
            look()
            return {"seen": 1}

    trainer = Trainer(accelerator="cpu", devices=1, max_steps=1, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False, callbacks=[Watch()],
                      default_root_dir=tmp_path)  # fmt: skip
    trainer.fit(Model())
    trainer.save_checkpoint(tmp_path / "step.ckpt")
    assert "on_train_start" in seen["_call_lightning_module_hook"]
    assert "on_train_batch_start" in seen["_call_callback_hooks"]
    assert "training_step" in seen["_call_strategy_hook"]
    assert seen["_call_callbacks_state_dict"] == {""}  # reached, and it names no hook: the state dicts are saved
