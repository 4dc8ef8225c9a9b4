"""Small third-party distributions that publish presets, and the tools to install them.

Two ways to make one visible: ``write_installed`` writes the package and a ``.dist-info`` straight into
a directory on ``sys.path`` (fast, in-process catalog tests); ``write_project`` writes a hatchling
project that ``pip_install`` builds and installs into a temporary virtual environment (a real install).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

STRATEGY_GROUP = "lightning_presets.strategies"


@dataclass(frozen=True)
class Dist:
    """A distribution with one package (``package/__init__.py``) and strategy entry points."""

    name: str
    version: str
    source: str
    """The package's ``__init__.py``."""
    strategies: dict[str, str] = field(default_factory=dict)
    """Entry-point name to ``module:attr``."""

    @property
    def package(self) -> str:
        return self.name.replace("-", "_")


@pytest.fixture(name="registered")
def registered_fixture(install: Any, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """``registered(*dists)``: install distributions and put what the bridge registers for their names into
    Lightning's Trainer registry, for this test only (what the start-up hook does in a fresh process)."""
    from lightning.fabric.strategies.registry import _StrategyRegistry
    from lightning.pytorch.strategies import StrategyRegistry

    from lightning_presets.core.namespaces import namespace_for_target
    from lightning_presets.guards.strategy import HEADS
    from lightning_presets.registry.bridge import register_into

    def use(*dists: Dist) -> None:
        install(*dists)
        fresh = _StrategyRegistry()
        register_into(fresh, namespace_for_target("trainer"), HEADS)
        for dist in dists:
            for name in dist.strategies:
                if name in fresh:
                    monkeypatch.setitem(StrategyRegistry, name, fresh[name])

    return use


def _entry_points_txt(dist: Dist) -> str:
    lines = [f"[{STRATEGY_GROUP}]"] + [f"{name} = {value}" for name, value in dist.strategies.items()]
    return "\n".join(lines) + "\n"


def write_installed(dist: Dist, site: Path, *, named: bool = True) -> None:
    """Write the package and its ``.dist-info`` into ``site``, as an installer would.

    ``named=False`` leaves the ``Name`` out of ``METADATA`` (a corrupt installation).
    """
    package = site / dist.package
    package.mkdir(parents=True, exist_ok=True)
    (package / "__init__.py").write_text(textwrap.dedent(dist.source))
    info = site / f"{dist.package}-{dist.version}.dist-info"
    info.mkdir(exist_ok=True)
    name = f"Name: {dist.name}\n" if named else ""
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\n{name}Version: {dist.version}\n")
    (info / "entry_points.txt").write_text(_entry_points_txt(dist))


def write_project(dist: Dist, root: Path) -> Path:
    """Write a hatchling project for ``dist`` under ``root`` and return its directory."""
    project = root / dist.name
    (project / dist.package).mkdir(parents=True, exist_ok=True)
    (project / dist.package / "__init__.py").write_text(textwrap.dedent(dist.source))
    entry_points = "\n".join(f'"{name}" = "{value}"' for name, value in dist.strategies.items())
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            f"""\
            [build-system]
            requires = ["hatchling"]
            build-backend = "hatchling.build"

            [project]
            name = "{dist.name}"
            version = "{dist.version}"

            [project.entry-points."{STRATEGY_GROUP}"]
            """
        )
        + entry_points
        + f'\n\n[tool.hatch.build.targets.wheel]\npackages = ["{dist.package}"]\n'
    )
    return project


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def make_venv(venv: Path, *, inherit: bool = True) -> Path:
    """A virtual environment without pip (the outer pip installs into it); returns its python.

    With ``inherit``, the outer environment's site-packages is added through a ``.pth`` line, with its
    own ``.pth`` files processed (``--system-site-packages`` would only reach the base interpreter's).
    """
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv_python(venv)
    if inherit:
        outer = sysconfig.get_path("purelib")
        (site_packages(python) / "_outer_environment.pth").write_text(f"import site; site.addsitedir({outer!r})\n")
    return python


def pip(python: Path, *args: str) -> str:
    """Run the outer environment's pip against ``python``'s environment, offline."""
    return _run([sys.executable, "-m", "pip", "--python", str(python), *args])


def pip_install(python: Path, *paths: Path | str) -> str:
    """Build (hatchling, no isolation) and install projects or wheels into ``python``'s environment."""
    return pip(python, "install", "--no-build-isolation", "--no-deps", "--no-index", *map(str, paths))


_BUILT: dict[Path, Path] = {}
"""The wheel already built of each project in this session (the tree does not change while the tests run)."""


def build_wheel(project: Path, wheel_dir: Path) -> Path:
    """Build one wheel of ``project`` into ``wheel_dir`` and return its path. A project built before in this session
    is not built again: its wheel, the same bytes, is copied into ``wheel_dir``."""
    built = _BUILT.get(project.resolve())
    if built is not None and built.is_file():
        wheel_dir.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(built, wheel_dir / built.name))
    _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "-w", str(wheel_dir), str(project)]
    )  # fmt: skip
    (wheel,) = wheel_dir.glob("*.whl")
    _BUILT[project.resolve()] = wheel
    return wheel


def site_packages(python: Path) -> Path:
    """The environment's purelib directory (asked with ``site`` on: without it, the base interpreter's)."""
    out = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"])
    path = Path(out.strip())
    venv = python.parent.parent
    if venv.resolve() not in path.resolve().parents:
        raise RuntimeError(f"{python} reports site-packages {path}, outside its environment {venv}")
    return path


def _run(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=300)
    if result.returncode:
        raise RuntimeError(f"{' '.join(command)} failed ({result.returncode}):\n{result.stdout}\n{result.stderr}")
    return result.stdout


# --- The third-party distributions the tests install -------------------------------------------------

ACME = Dist(
    name="acme-presets",
    version="1.2.0",
    source="""\
        from lightning_presets import Preset

        ACME_DDP = Preset(
            name="acme_ddp",
            description="Acme's standard DDP on gloo.",
            family="ddp",
            strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"},
            init_params={"process_group_backend": "gloo"},
        )


        def make_fabric_only():
            return Preset(
                name="acme_fabric_ddp",
                description="Acme's Fabric-only DDP, built by a function.",
                family="ddp",
                strategy={"fabric": "DDPStrategy"},
            )
        """,
    strategies={"acme_ddp": "acme_presets:ACME_DDP", "acme_fabric_ddp": "acme_presets:make_fabric_only"},
)

BROKEN_IMPORT = Dist(
    name="broken-import-presets",
    version="0.1.0",
    source="import lightning_presets_no_such_module  # noqa: F401\n",
    strategies={"broken_import": "broken_import_presets:PRESET"},
)

RAISING = Dist(
    name="raising-presets",
    version="0.2.0",
    source="""\
        def make():
            raise RuntimeError("raising-presets cannot build its preset")
        """,
    strategies={"raising": "raising_presets:make"},
)

WRONG_TYPE = Dist(
    name="wrong-type-presets",
    version="0.3.0",
    source='NOT_A_PRESET = {"strategy": "ddp"}\n',
    strategies={"wrong_type": "wrong_type_presets:NOT_A_PRESET"},
)


def _preset_source(name: str, attr: str = "PRESET") -> str:
    return f"""\
        from lightning_presets import Preset

        {attr} = Preset(
            name={name!r},
            description="a DDP preset",
            family="ddp",
            strategy={{"trainer": "DDPStrategy", "fabric": "DDPStrategy"}},
        )
        """


UPPER_CASE = Dist(
    name="upper-presets",
    version="0.4.0",
    source=_preset_source("Upper_Case"),
    strategies={"Upper_Case": "upper_presets:PRESET"},
)

BUILTIN_NAME = Dist(
    name="ddp-name-presets",
    version="0.5.0",
    source=_preset_source("ddp"),
    strategies={"ddp": "ddp_name_presets:PRESET"},
)

DUP_ONE = Dist(
    name="dup-one-presets",
    version="1.0.0",
    source=_preset_source("team_ddp"),
    strategies={"team_ddp": "dup_one_presets:PRESET"},
)

DUP_TWO = Dist(
    name="dup-two-presets",
    version="2.0.0",
    source=_preset_source("team_ddp"),
    strategies={"team_ddp": "dup_two_presets:PRESET"},
)

SHADOW = Dist(
    name="shadow-presets",
    version="0.6.0",
    source=_preset_source("tp2d_hybrid"),
    strategies={"tp2d_hybrid": "shadow_presets:PRESET"},
)

# A good preset whose module imports Lightning itself: its catalog entry is loaded while Lightning is
# being imported, so this must neither hang nor meet a half-initialized Lightning package.
IMPORTER = Dist(
    name="importer-presets",
    version="0.8.0",
    source="""\
        from lightning.pytorch.strategies import DDPStrategy
        from lightning_fabric.strategies import DDPStrategy as FabricDDPStrategy

        from lightning_presets import Preset

        BASES = (DDPStrategy, FabricDDPStrategy)
        PRESET = Preset(
            name="importer_ddp",
            description="a DDP preset from a module that imports Lightning",
            family="ddp",
            strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"},
        )
        """,
    strategies={"importer_ddp": "importer_presets:PRESET"},
)

BROKEN = (BROKEN_IMPORT, RAISING, WRONG_TYPE, UPPER_CASE, BUILTIN_NAME, DUP_ONE, DUP_TWO, SHADOW)

# --- hostile and broken plugins (tests/test_plugin_*.py, tests/test_cli_and_plugin_fuzz.py) --------------------


def with_rule(dist: str, name: str, body: str, code: str = "LP901", strategy: str = "DDPStrategy") -> Dist:
    """A distribution with one DDP preset ``name`` whose construction rule runs ``body`` (indented code)."""
    return Dist(
        name=dist,
        version="0.9.0",
        source=f"""\
            from lightning_presets import Preset, Problem, rule

            @rule({code!r}, "error", "construction", "a third party's rule", fails="x", fixed="y")
            def third_party_rule(ctx):
            {textwrap.indent(textwrap.dedent(body), "    ")}

            PRESET = Preset(
                name={name!r},
                description="a DDP preset with a rule",
                family="ddp",
                strategy={{"trainer": {strategy!r}, "fabric": "DDPStrategy"}},
                rules=(third_party_rule,),
            )
            """,
        strategies={name: f"{dist.replace('-', '_')}:PRESET"},
    )


SYSTEM_EXIT = Dist(  # an argparse call at the top of a module, the realistic SystemExit
    name="exiting-presets",
    version="0.1.0",
    source="""\
        import argparse

        argparse.ArgumentParser(prog="exiting-presets").parse_args(["--no-such-flag"])
        """,
    strategies={"exiting": "exiting_presets:PRESET"},
)
BASE_EXCEPTION = Dist(
    name="escaping-presets",
    version="0.1.0",
    source="""\
        class Escape(BaseException):
            pass

        raise Escape("escaping-presets escapes Exception")
        """,
    strategies={"escaping": "escaping_presets:PRESET"},
)
PRINTING = Dist(
    name="printing-presets",
    version="0.1.0",
    source='print("printing-presets says hello on stdout")\n' + textwrap.dedent(_preset_source("printing_ddp")),
    strategies={"printing_ddp": "printing_presets:PRESET"},
)
NAMELESS = Dist(  # written with ``named=False``: its METADATA has no Name
    name="nameless-presets",
    version="0.1.0",
    source=_preset_source("nameless_ddp"),
    strategies={"nameless_ddp": "nameless_presets:PRESET"},
)
SLOW = Dist(
    name="slow-presets",
    version="0.1.0",
    source="import time\n\ntime.sleep(1.0)\n" + textwrap.dedent(_preset_source("slow_ddp")),
    strategies={"slow_ddp": "slow_presets:PRESET"},
)
BAD_CLASS = with_rule("bad-class-presets", "bad_class_ddp", "return None", strategy="NoSuchStrategy")
CRASHING_RULE = with_rule("crashing-presets", "crashing_ddp", "return 8 // (ctx.devices_per_node - 1)")
WRONG_RETURN = with_rule("wrong-return-presets", "wrong_return_ddp", 'return "devices must be 8"')
FINE_RULE = with_rule(
    "fine-rule-presets",
    "fine_rule_ddp",
    'return Problem("Acme nodes have 8 devices", "use devices=8") if ctx.devices_per_node != 8 else None',
)
BAD_CODE = with_rule("bad-code-presets", "bad_code_ddp", "return None", code="ACME1")
HOSTILE = (RAISING, SYSTEM_EXIT, BASE_EXCEPTION, PRINTING, BAD_CODE)
ALL = (ACME, IMPORTER, *BROKEN)

# --- issue 16: rules that exit, escape, return garbage or cannot be printed; entry points that are not factories;
# malformed fields -----------------------------------------------------------------------------------------------

# One-line bodies: ``with_rule`` indents the first line only.
EXITING_RULE = with_rule("exiting-rule-presets", "exiting_rule_ddp", '__import__("sys").exit(7)')
ESCAPING_RULE = with_rule(
    "escaping-rule-presets",
    "escaping_rule_ddp",
    'raise type("Escape", (BaseException,), {})("the rule escapes Exception")',
)
GARBAGE_PROBLEM = with_rule("garbage-presets", "garbage_ddp", "return Problem(12345, None)")
UNPRINTABLE_RULE = with_rule(  # an exception whose __str__ raises
    "unprintable-presets",
    "unprintable_ddp",
    'raise type("Unprintable", (Exception,), {"__str__": lambda self: 1 / 0})()',
)
NOT_FACTORIES = Dist(  # entry points naming a builtin that reads stdin, a class, and a function that needs arguments
    name="not-factory-presets",
    version="0.1.0",
    source="""\
        import sys

        READ_AT_IMPORT = sys.stdin.read()  # the catalog detaches stdin: this reads nothing of the program's
        INSTANTIATED = []


        class Maker:
            def __init__(self):
                INSTANTIATED.append(self)


        def needs_arguments(size):
            raise AssertionError("never called")
        """,
    strategies={
        "reader": "builtins:input",
        "maker": "not_factory_presets:Maker",
        "needy": "not_factory_presets:needs_arguments",
    },
)
MALFORMED_FIELDS = Dist(
    name="malformed-presets",
    version="0.2.0",
    source="""\
        from lightning_presets import Preset


        def _preset(name, **bad):
            return Preset(name=name, description="a DDP preset with one malformed field", family="ddp",
                          strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"}, **bad)


        EXTRA_KEYS = _preset("bad_extra_keys", extra_keys=5)
        PREPARE = _preset("bad_prepare", prepare="drop_unknown_keys")
        INIT_PARAMS = _preset("bad_init_params", init_params=[("process_group_backend", "gloo")])
        MESH = _preset("bad_mesh", mesh="2d")
        TESTED_WITH = _preset("bad_tested_with", tested_with={"lightning": 2.6})
        """,
    strategies={
        "bad_extra_keys": "malformed_presets:EXTRA_KEYS",
        "bad_prepare": "malformed_presets:PREPARE",
        "bad_init_params": "malformed_presets:INIT_PARAMS",
        "bad_mesh": "malformed_presets:MESH",
        "bad_tested_with": "malformed_presets:TESTED_WITH",
    },
)
MALFORMED_FIELD_WORDS = {
    "bad_extra_keys": "extra_keys= must be a set of str, got 5 (int)",
    "bad_prepare": "prepare= must be a function or None, got 'drop_unknown_keys' (str)",
    "bad_init_params": "init_params= must be a mapping with str keys, got [('process_group_backend', 'gloo')] (list)",
    "bad_mesh": "mesh= must be MeshSpec or None, got '2d' (str)",
    "bad_tested_with": "tested_with= must be a mapping of str to str, got {'lightning': 2.6} (dict)",
}
