"""The documented examples of the codes that are not preset rules, executed: the catalog's (LP001-LP015), the
optional dependencies' (LP401, LP402, LP501, LP502, LP601, LP602) and the doctor's (LP720-LP724, LP016). The check's
(LP700+) run in test_cli_check.py; the rules' through ``check_examples`` in test_examples.py.

Each example runs as written; what a line of code cannot say (which distributions are installed, which package is
broken or too old) is the situation below, applied around it. ``fails`` must report the code, ``fixed`` must not.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import json
import re
import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from lightning.fabric.strategies.registry import _StrategyRegistry

from _dists import NAMELESS, Dist, with_rule, write_installed
from helpers import run
from lightning_presets import Preset
from lightning_presets.core.codes import Code, Setting
from lightning_presets.core.rules import RULE_CRASHED
from lightning_presets.registry import catalog as _catalog
from lightning_presets.registry import requirements
from lightning_presets.registry.codes import CODES as REGISTRY_CODES
from lightning_presets.tools import doctor as _doctor
from lightning_presets.tools import examples as _examples
from lightning_presets.tools import startup as _startup

Situation = Callable[[pytest.MonkeyPatch, Path], contextlib.AbstractContextManager[Any]]
ENTRY = re.compile(r'^(?P<name>[^\s#=\[]+) = "(?P<value>[^"]+)"', re.MULTILINE)
ASSIGNMENT = re.compile(r"^(?P<name>[A-Z_]+)=(?P<value>\S+)\s")
ACME = """
from lightning_presets import Preset

def _preset(name):
    return Preset(name=name, description="an example", family="ddp",
                  strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"})

FSDP_FAST, FSDP_QUICK, DDP, ACME_DDP = map(_preset, ["fsdp_fast", "fsdp_quick", "ddp", "acme_ddp"])
FSDP_FAST_UPPER = _preset("FSDP_Fast")

from dataclasses import replace
from lightning_presets import rule

def _eight_per_node(ctx):
    return None

ACME_FSDP = replace(_preset("acme_fsdp"), rules=(rule("LP901", "error", "construction", "8 per node",
                                                       fails="x", fixed="y")(_eight_per_node),))
ACME_FSDP_BAD_RULE = replace(ACME_FSDP, rules=(rule("ACME1", "error", "construction", "8 per node",
                                                    fails="x", fixed="y")(_eight_per_node),))

def make_dict():
    return {"name": "fsdp_fast"}
"""


def _outcome(code: Code, which: str) -> tuple[str, str]:
    return code.code, getattr(code, which)


def _params(codes: tuple[Code, ...] | list[Code]) -> list[Any]:
    return [pytest.param(code, which, id=f"{code.code}-{which}") for code in codes for which in ("fails", "fixed")]


def _judge(code: Code, which: str, found: set[str]) -> None:
    if which == "fails":
        assert code.code in found, f"{code.code}: {code.fails!r} reported {sorted(found)}"
    else:
        assert code.code not in found, f"{code.code}: {code.fixed!r} still reports it"


# --- catalog codes whose examples are entry points: installed as a distribution, then the catalog loaded -------

CATALOG_CODES = (*REGISTRY_CODES, RULE_CRASHED)
ENTRY_POINT_CODES = [code for code in CATALOG_CODES if ENTRY.search(code.fails)]


@pytest.mark.parametrize(("code", "which"), _params(ENTRY_POINT_CODES))
def test_entry_point_examples(
    code: Code, which: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_catalog: None
) -> None:
    text = getattr(code, which)
    strategies = {m["name"]: m["value"] for m in ENTRY.finditer(text or code.fails)}
    both = code.code == "LP003"  # "acme-presets and other-presets both declare" it
    dists = [Dist("acme-presets", "1.0", ACME, strategies)]
    if both:
        dists.append(Dist("other-presets", "2.0", "", strategies))
    for name, value in (m.groups() for m in ASSIGNMENT.finditer(text)):
        monkeypatch.setenv(name, value)
    monkeypatch.syspath_prepend(str(tmp_path))
    for dist in dists:
        write_installed(dist, tmp_path)
    try:
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            loaded = _catalog.load(Preset)
    finally:
        for dist in dists:
            sys.modules.pop(dist.package, None)
    found = {
        f.code for entry in loaded.entries if entry.distribution in {d.name for d in dists} for f in entry.findings
    }
    found |= {f.code for f in loaded.findings}
    _judge(code, which, found)


# --- codes whose examples are Python: run by the examples engine, inside the situation ------------------------


class _Broken(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds ``module`` (so it looks installed) and raises when it is imported, like a broken installation."""

    def __init__(self, module: str) -> None:
        self.module = module

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name == self.module else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return None

    def exec_module(self, module: ModuleType) -> None:
        raise ImportError(f"{self.module} is broken here: libsomething.so: cannot open shared object file")


@contextlib.contextmanager
def broken(module: str) -> Iterator[None]:
    saved = {name: mod for name, mod in sys.modules.items() if name == module or name.startswith(module + ".")}
    for name in saved:
        del sys.modules[name]
    finder = _Broken(module)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        sys.modules.pop(module, None)
        sys.modules.update(saved)


def versions(**installed: str) -> Situation:
    def situation(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> contextlib.AbstractContextManager[Any]:
        real = requirements.installed_version
        names = {name.replace("_", "-"): value for name, value in installed.items()} | installed
        monkeypatch.setattr(
            requirements, "installed_version", lambda d: names.get(d, names.get(d.replace("-", "_"))) or real(d)
        )
        return contextlib.nullcontext()

    return situation


def breaking(module: str) -> Situation:
    return lambda monkeypatch, tmp: broken(module)


NOTHING: Situation = lambda monkeypatch, tmp: contextlib.nullcontext()  # noqa: E731


@contextlib.contextmanager
def _installed(
    monkeypatch: pytest.MonkeyPatch, tmp: Path, *dists: Dist, named: bool = True, register: bool = False
) -> Iterator[None]:
    """Distributions on sys.path and a catalog read afresh inside the example (and again afterwards)."""
    monkeypatch.syspath_prepend(str(tmp))
    for dist in dists:
        write_installed(dist, tmp, named=named)
    _catalog.clear_cache()
    try:
        if register:  # what the start-up hook does in a fresh process
            from lightning.pytorch.strategies import StrategyRegistry

            from lightning_presets.core.namespaces import namespace_for_target
            from lightning_presets.guards.strategy import HEADS
            from lightning_presets.registry.bridge import register_into

            fresh = _StrategyRegistry()
            register_into(fresh, namespace_for_target("trainer"), HEADS)
            for dist in dists:
                for name in dist.strategies:
                    monkeypatch.setitem(StrategyRegistry, name, fresh[name])
        yield
    finally:
        _catalog.clear_cache()
        for dist in dists:
            sys.modules.pop(dist.package, None)


def _crashing_rule(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> contextlib.AbstractContextManager[Any]:
    acme = with_rule("acme-presets", "acme_ddp", "return 8 // (ctx.devices_per_node - 8)")
    return _installed(monkeypatch, tmp, acme, register=True)


def _nameless(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> contextlib.AbstractContextManager[Any]:
    return _installed(monkeypatch, tmp, NAMELESS, named=False)


def _slow(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> contextlib.AbstractContextManager[Any]:
    monkeypatch.setattr(_catalog, "SLOW_SECONDS", 0.1)  # 30 s in the example
    acme = Dist("acme-presets", "1.0", "import time\n\ntime.sleep(0.3)\n" + ACME, {"acme_ddp": "acme_presets:ACME_DDP"})
    return _installed(monkeypatch, tmp, acme)


def _denied(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> contextlib.AbstractContextManager[Any]:
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", "lightning-presets")
    return _installed(monkeypatch, tmp)


PYTHON_CODES: dict[str, tuple[Setting, Situation, Setting]] = {
    # code: (where fails runs, what is wrong there, where fixed runs)
    "LP006": (Setting(), NOTHING, Setting()),
    "LP007": (Setting(missing=("deepspeed",)), NOTHING, Setting()),
    "LP008": (Setting(gpus=0, simulated=("torch_xla",)), NOTHING, Setting(gpus=0, simulated=("torch_xla",))),
    "LP010": (Setting(), NOTHING, Setting()),
    "LP012": (Setting(gpus=0), _crashing_rule, Setting(gpus=0)),
    "LP013": (Setting(), _nameless, Setting()),
    "LP014": (Setting(), _slow, Setting()),
    "LP015": (Setting(), _denied, Setting()),
    "LP401": (Setting(), breaking("deepspeed"), Setting()),
    "LP402": (Setting(), versions(torch="2.6.0", deepspeed="0.15.4"), Setting()),
    "LP501": (Setting(gpus=0), breaking("torch_xla"), Setting(gpus=0, simulated=("torch_xla",))),
    "LP502": (
        Setting(gpus=0, simulated=("torch_xla",)),
        versions(torch="2.13.0", torch_xla="2.12.0"),
        Setting(gpus=0, simulated=("torch_xla",)),
    ),
    "LP601": (Setting(), breaking("transformer_engine"), Setting(simulated=("transformer_engine",))),
    "LP602": (
        Setting(simulated=("transformer_engine",)),
        versions(transformer_engine="0.10.0"),
        Setting(simulated=("transformer_engine",)),
    ),
}
PYTHON = [code for code in CATALOG_CODES if not ENTRY.search(code.fails)]


def test_every_python_example_has_its_situation() -> None:
    assert sorted(code.code for code in PYTHON) == sorted(PYTHON_CODES)


@pytest.mark.parametrize(("code", "which"), _params(PYTHON))
def test_python_examples(code: Code, which: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fails_on, situation, fixed_on = PYTHON_CODES[code.code]
    setting = fails_on if which == "fails" else fixed_on
    context = situation(monkeypatch, tmp_path) if which == "fails" else contextlib.nullcontext()
    with context:
        outcome = _examples.run_example.__wrapped__(getattr(code, which), setting)  # not from the cache
    assert outcome.error is None, f"{code.code} {which}: {outcome.error}"
    _judge(code, which, set(outcome.codes))


# --- doctor codes: the command run, in the situation its comment names ----------------------------------------


def _lightning(version: str | None) -> Situation:
    def situation(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> contextlib.AbstractContextManager[Any]:
        table = {"lightning": version, "pytorch-lightning": None, "lightning-fabric": None}
        monkeypatch.setattr(_doctor, "installed_version", lambda name: table.get(name, "1.0"))
        return contextlib.nullcontext()

    return situation


def _no_pth(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> contextlib.AbstractContextManager[Any]:
    monkeypatch.setattr(_startup, "site_directories", lambda: [str(tmp)])
    return contextlib.nullcontext()


@contextlib.contextmanager
def _unregistered(monkeypatch: pytest.MonkeyPatch, tmp: Path) -> Iterator[None]:
    """fsdp2 taken out of the Trainer's registry (by hand: Lightning's registry ``get`` builds the strategy, so
    ``monkeypatch.delitem`` would put an instance back)."""
    from lightning.pytorch.strategies import StrategyRegistry

    entry = dict.pop(StrategyRegistry, "fsdp2")
    try:
        yield
    finally:
        dict.__setitem__(StrategyRegistry, "fsdp2", entry)


DOCTOR_SITUATIONS: dict[str, Situation] = {
    "LP720": _lightning("2.4.0"),  # the version the documented example names
    "LP721": _lightning(None),
    "LP722": NOTHING,  # the example sets LIGHTNING_PRESETS_AUTOLOAD=0 itself
    "LP723": _no_pth,
    "LP724": _unregistered,
    "LP016": lambda monkeypatch, tmp: _unimportable(monkeypatch),
    "LP017": NOTHING,  # the examples set LIGHTNING_PRESETS_SKIP themselves
    "LP018": NOTHING,
}


def _unimportable(monkeypatch: pytest.MonkeyPatch) -> contextlib.AbstractContextManager[Any]:
    monkeypatch.setitem(sys.modules, "lightning.pytorch.strategies", None)  # `import` raises ImportError
    return contextlib.nullcontext()


def test_every_doctor_example_has_its_situation() -> None:
    assert sorted(code.code for code in _doctor.CODES) == sorted(DOCTOR_SITUATIONS)


@pytest.mark.parametrize(("code", "which"), _params(_doctor.CODES))
def test_doctor_examples(
    code: Code, which: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = getattr(code, which)
    monkeypatch.delenv("LIGHTNING_PRESETS_AUTOLOAD", raising=False)
    for name, value in (m.groups() for m in ASSIGNMENT.finditer(text)):
        monkeypatch.setenv(name, value)
    command = ASSIGNMENT.sub("", text).split("#")[0].split()
    assert command[:2] == ["lightning-presets", "doctor"], text
    context = DOCTOR_SITUATIONS[code.code](monkeypatch, tmp_path) if which == "fails" else contextlib.nullcontext()
    with context:
        _, out = run(capsys, *command[1:], "--json")
    _judge(code, which, {finding["code"] for finding in json.loads(out)["findings"]})
