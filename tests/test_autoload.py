"""The start-up hook: presets resolvable by name with no import, cheap at start, gone on uninstall."""

from __future__ import annotations

import ast
import builtins
import importlib.util
import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import _lightning_presets_autoload as hook  # type: ignore[import-untyped, unused-ignore]  # installed copy: no py.typed
from _dists import IMPORTER, build_wheel, make_venv, pip, pip_install, site_packages, write_installed
from helpers import Fresh, Started, start_python
from lightning_presets import _activate
from lightning_presets.core.environment import autoload_enabled
from lightning_presets.core.namespaces import NAMESPACES
from lightning_presets.registry import bridge as _bridge

ROOT = Path(__file__).resolve().parents[1]
PTH = ROOT / "src" / "lightning_presets_autoload.pth"
ON = {"LIGHTNING_PRESETS_AUTOLOAD": "1"}
OFF = {"LIGHTNING_PRESETS_AUTOLOAD": "0"}
HEAVY = ("importlib.abc", "importlib.metadata", "importlib.util", "typing", "re", "torch", "lightning")
QUIET = "logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False"


def last_json(output: str) -> Any:
    return json.loads(output.strip().splitlines()[-1])


# --- fresh interpreters ---------------------------------------------------------------------------


# Every check below needs a fresh interpreter of its own: the start-up hook, ``python -O``/``-S`` and the variables
# read at import (LIGHTNING_PRESETS_AUTOLOAD, PYTHONPATH) are the claims. They do not depend on each other, so the
# module starts those its selected tests need side by side (``fresh``), and each test reads its own result.
HOOKED = f"""
        import json, subprocess, sys
        from lightning.pytorch import Trainer

        trainer = Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, {QUIET})
        try:
            Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, detect_anomaly=True, {QUIET})
            codes = []
        except ValueError as exc:
            codes = list(getattr(exc, "codes", ()))
        # A worker started with the same interpreter (as Lightning's launchers do) sees the preset too.
        child = subprocess.run(
            [sys.executable, "-c",
             "from lightning.fabric.strategies import STRATEGY_REGISTRY as r; print('tp2d_hybrid' in r)"],
            capture_output=True, text=True, check=True,
        )
        print(json.dumps({{
            "class": type(trainer.strategy).__name__,
            "module": type(trainer.strategy).__module__,
            "hook": "_lightning_presets_autoload" in sys.modules,
            "finder": [type(f).__name__ for f in sys.meta_path].count("StrategiesFinder"),
            "child": child.stdout.strip(),
            "optimize": sys.flags.optimize,
            "codes": codes,
        }}))
        """

AUTOLOAD_OFF = """
        import importlib, json, sys
        from lightning.pytorch.strategies import StrategyRegistry

        before = "tp2d_hybrid" in StrategyRegistry
        hook = "_lightning_presets_autoload" in sys.modules
        import lightning_presets

        registries = {}
        for module, attr in [("lightning.pytorch.strategies", "StrategyRegistry"),
                             ("lightning.fabric.strategies", "STRATEGY_REGISTRY"),
                             ("pytorch_lightning.strategies", "StrategyRegistry"),
                             ("lightning_fabric.strategies", "STRATEGY_REGISTRY")]:
            registries[module] = "tp2d_hybrid" in getattr(importlib.import_module(module), attr)
        finders = [type(f).__name__ for f in sys.meta_path].count("StrategiesFinder")
        print(json.dumps({"before": before, "hook": hook, "after": registries, "finders": finders}))
        """

SITE_DIRS = [path for path in sys.path if path.endswith("site-packages")] + [str(ROOT / "src")]
WITHOUT_SITE = f"""
        import json, sys
        sys.path.extend({SITE_DIRS!r})
        from lightning.fabric.strategies import STRATEGY_REGISTRY

        before = "tp2d_hybrid" in STRATEGY_REGISTRY
        import lightning_presets

        print(json.dumps({{"before": before, "after": "tp2d_hybrid" in STRATEGY_REGISTRY}}))
        """

IMPORTING = """
        import json, sys
        STATEMENT
        registries = {}
        for module, attr in [("lightning.pytorch.strategies", "StrategyRegistry"),
                             ("lightning.fabric.strategies", "STRATEGY_REGISTRY"),
                             ("pytorch_lightning.strategies", "StrategyRegistry"),
                             ("lightning_fabric.strategies", "STRATEGY_REGISTRY")]:
            if module in sys.modules:
                registries[module] = "importer_ddp" in getattr(sys.modules[module], attr)
        print(json.dumps(registries))
        """
STATEMENTS = ["import pytorch_lightning", "import lightning_fabric"]
IMPORTING_TEST = "test_preset_module_importing_lightning_neither_hangs_nor_breaks_it"


HOOKED_TESTS = ("test_trainer_resolves_the_name_without_importing_the_package", "test_worker_processes_see_the_presets",
                "test_guards_work_under_python_optimize")  # fmt: skip


@pytest.fixture(scope="module")
def fresh(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fresh]:
    """The fresh interpreters of the selected tests, started together; keyed by what they check."""
    site = tmp_path_factory.mktemp("importer")
    write_installed(IMPORTER, site)

    def importing(statement: str) -> Started:
        code = IMPORTING.replace("STATEMENT", statement)
        return start_python(code, env={**ON, "PYTHONPATH": str(site)}, timeout=180)

    runs = Fresh(request, {
        # what a fresh ``python -O`` sees when user code never imports lightning_presets
        "hooked": (lambda: start_python(HOOKED, "-O", env=ON), HOOKED_TESTS),
        "off": (lambda: start_python(AUTOLOAD_OFF, env=OFF), ("test_autoload_off_needs_an_explicit_import",)),
        "without_site": (lambda: start_python(WITHOUT_SITE, "-S", env=ON),
                         ("test_import_registers_into_modules_imported_before_the_hook",)),
        **{statement: ((lambda statement=statement: importing(statement)), (f"{IMPORTING_TEST}[{statement}]",))
           for statement in STATEMENTS},
    })  # fmt: skip
    yield runs
    runs.close()


@pytest.fixture(scope="module")
def hooked(fresh: Fresh) -> dict[str, Any]:
    """What a fresh ``python -O`` sees when user code never imports lightning_presets."""
    result = fresh["hooked"].result()
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = last_json(result.stdout)
    return data


def test_trainer_resolves_the_name_without_importing_the_package(hooked: dict[str, Any]) -> None:
    assert (hooked["class"], hooked["module"]) == ("ModelParallelStrategy", "lightning_presets")
    assert (hooked["hook"], hooked["finder"]) == (True, 1)


def test_worker_processes_see_the_presets(hooked: dict[str, Any]) -> None:
    assert hooked["child"] == "True"


def test_guards_work_under_python_optimize(hooked: dict[str, Any]) -> None:
    assert hooked["optimize"] == 1
    assert hooked["codes"] == ["LP216"]


def test_autoload_off_needs_an_explicit_import(fresh: Fresh) -> None:
    result = fresh["off"].result()
    assert result.returncode == 0, result.stderr
    data = last_json(result.stdout)
    assert (data["before"], data["hook"], data["finders"]) == (False, False, 0)
    assert data["after"] == dict.fromkeys((ns.strategies_module for ns in NAMESPACES), True)


def test_import_registers_into_modules_imported_before_the_hook(fresh: Fresh) -> None:
    """Without the ``.pth`` (``python -S``), ``import lightning_presets`` installs the hook and catches up."""
    result = fresh["without_site"].result()
    assert result.returncode == 0, result.stderr
    assert last_json(result.stdout) == {"before": False, "after": True}


@pytest.mark.parametrize("statement", STATEMENTS)
def test_preset_module_importing_lightning_neither_hangs_nor_breaks_it(fresh: Fresh, statement: str) -> None:
    """Its entry point is loaded while Lightning is being imported (``import lightning`` is in test_third_party)."""
    result = fresh[statement].result()
    assert result.returncode == 0, result.stderr
    registries = last_json(result.stdout)
    assert f"{statement.split()[1]}.strategies" in registries
    assert registries == dict.fromkeys(registries, True)


def modules_at_start(env: dict[str, str]) -> set[str]:
    """``sys.modules`` of a bare ``python -c`` (no PYTHONWARNINGS, no json: both import ``re``)."""
    clean = {key: value for key, value in os.environ.items() if key != "PYTHONWARNINGS"}
    code = "import sys; print(' '.join(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**clean, **env}, check=True, timeout=60
    )
    return set(result.stdout.split())


def test_hook_imports_nothing_at_start() -> None:
    with_hook, without = modules_at_start(ON), modules_at_start(OFF)
    assert with_hook - without == {"_lightning_presets_autoload"}
    assert not with_hook & set(HEAVY)


# --- the hook in this process ---------------------------------------------------------------------


def test_strategy_modules_match_the_namespaces() -> None:
    assert {ns.strategies_module for ns in NAMESPACES} == hook.STRATEGY_MODULES


def test_the_hook_module_imports_only_sys_at_start() -> None:
    tree = ast.parse(Path(hook.__file__).read_text())
    top_level = [node for node in tree.body if isinstance(node, ast.Import | ast.ImportFrom)]
    assert [alias.name for node in top_level for alias in node.names] == ["sys"]
    guarded = [node for node in tree.body if isinstance(node, ast.If)]
    assert all(isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING" for node in guarded)
    assert hook.TYPE_CHECKING is False  # the annotation-only imports never run


def test_install_is_idempotent() -> None:
    hook.install()
    hook.install()
    assert sum(isinstance(finder, hook.StrategiesFinder) for finder in sys.meta_path) == 1


def test_finder_answers_only_for_strategies_modules_and_their_packages() -> None:
    assert {name.rpartition(".")[0] for name in hook.STRATEGY_MODULES} == hook.PACKAGES
    finder = hook.StrategiesFinder()
    assert finder.find_spec("json") is None
    assert finder.find_spec("lightning") is None
    assert finder.find_spec("lightning.pytorch.trainer") is None
    package = finder.find_spec("lightning_fabric")
    assert package is not None
    assert isinstance(package.loader, hook._RegisteringLoader)
    import lightning.pytorch

    spec = finder.find_spec("lightning.pytorch.strategies", lightning.pytorch.__path__)
    assert spec is not None
    assert spec.name == "lightning.pytorch.strategies"
    assert isinstance(spec.loader, hook._RegisteringLoader)


def test_registering_loader_fills_a_freshly_executed_module() -> None:
    """Execute Lightning's strategies module anew (not in ``sys.modules``): the loader registers into it."""
    import lightning.fabric.strategies  # (its submodules are then cached)

    spec = hook.StrategiesFinder().find_spec("lightning.fabric.strategies", lightning.fabric.__path__)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    registry = module.STRATEGY_REGISTRY
    assert registry is not sys.modules["lightning.fabric.strategies"].STRATEGY_REGISTRY
    assert "ddp" in registry
    assert _bridge.is_ours(registry, "tp2d_hybrid")


def test_a_failing_registration_warns_instead_of_raising(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(module: types.ModuleType) -> None:
        raise RuntimeError("preset module exploded")

    monkeypatch.setattr(_activate, "register_module", broken)
    module = types.ModuleType("lightning.pytorch.strategies")
    with pytest.warns(
        RuntimeWarning, match=r"into lightning\.pytorch\.strategies: RuntimeError: preset module exploded"
    ):
        hook._register(module)


@pytest.mark.parametrize(
    ("value", "enabled"),
    [("1", True), ("", True), ("yes", True), ("0", False), ("false", False), (" OFF ", False), ("No", False)],
)
def test_pth_line_and_package_agree_on_the_variable(monkeypatch: pytest.MonkeyPatch, value: str, enabled: bool) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_AUTOLOAD", value)
    assert autoload_enabled() is enabled
    imported: list[str] = []

    def recording_import(name: str, *args: Any, **kwargs: Any) -> Any:
        imported.append(name)
        return builtins.__import__(name, *args, **kwargs)

    exec(PTH.read_text(), {"__builtins__": {**vars(builtins), "__import__": recording_import}})
    assert ("_lightning_presets_autoload" in imported) is enabled


def test_pth_is_a_single_import_line() -> None:
    lines = PTH.read_text().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("import ")  # site.py executes only lines that start with "import"


# --- packaging: installed at the root of site-packages, removed by uninstall ----------------------


@pytest.mark.install
def test_wheel_installs_the_hook_and_uninstall_removes_it(tmp_path: Path) -> None:
    wheel = build_wheel(ROOT, tmp_path / "wheels")
    python = make_venv(tmp_path / "venv", inherit=False)
    pip_install(python, wheel)
    site = site_packages(python)
    files = {"lightning_presets_autoload.pth", "_lightning_presets_autoload.py"}
    assert files <= {path.name for path in site.iterdir()}
    probe = "import sys; print('_lightning_presets_autoload' in sys.modules)"
    assert run_python_in(python, probe) == "True"

    pip(python, "uninstall", "-y", "lightning-presets")
    left = {path.name for path in site.iterdir()} if site.exists() else set()  # pip may remove it, emptied
    assert not left & files
    assert not [name for name in left if name.startswith("lightning_presets")]
    assert run_python_in(python, probe) == "False"


def run_python_in(python: Path, code: str) -> str:
    result = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout.strip()
