"""Plugins, second round (issue 16): each test reproduces one failure an unrelated project or a hostile plugin met.

Item 4, registration never loses a race: built-in names are there when ``import lightning`` returns, also while
another thread loads a slow plugin, and an import hook put ahead of ours does not skip registration. Item 8, an
entry point never reads the program's stdin and only a preset factory is called. Item 9, every field of a preset is
validated when it loads. Item 10, hints that help: a denied preset says LP015 in ``Trainer(...)``, ``check`` tells
how to let it in, and LP001's suggested name is a valid one.
"""

from __future__ import annotations

import io
import json
import os
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightning.fabric.strategies.registry import _StrategyRegistry

from _dists import (  # registered_fixture: the fixture `registered`
    MALFORMED_FIELD_WORDS,
    MALFORMED_FIELDS,
    NOT_FACTORIES,
    PRINTING,
    Dist,
    registered_fixture,  # noqa: F401
    write_installed,
)
from helpers import QUIET, Fresh, Started, run_cli, start_python
from lightning_presets import Preset, PresetConfigError
from lightning_presets.core.namespaces import namespace_for_target
from lightning_presets.guards.strategy import HEADS
from lightning_presets.registry import bridge as _bridge
from lightning_presets.registry import catalog as _catalog

pytestmark = pytest.mark.usefixtures("fresh_catalog")


def on_path(directory: Path) -> str:
    return os.pathsep.join(filter(None, (str(directory), os.environ.get("PYTHONPATH"))))


def last_json(output: str) -> Any:
    return json.loads(output.strip().splitlines()[-1])


def load() -> _catalog.Catalog[Preset]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _catalog.load(Preset)


# --- fresh interpreters: what is on PYTHONPATH, or put on sys.meta_path, before Lightning is first imported is each
# claim, so each needs one of its own; they do not depend on each other, so the module starts those its selected tests
# need side by side (``fresh``) and each test reads its own.


@pytest.fixture(scope="module")
def fresh(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fresh]:
    runs = Fresh(request, {
        "race": (lambda: start_race(tmp_path_factory.mktemp("race")),
                 ("test_builtins_are_registered_when_import_lightning_returns_while_another_thread_loads",)),
        **{case: ((lambda case=case: start_finder(*FINDER_CASES[case])), (f"{FINDER_TEST}[{case}]",))
           for case in FINDER_CASES},
        "stdin": (lambda: start_stdin(tmp_path_factory.mktemp("stdin")),
                  ("test_import_lightning_leaves_piped_stdin_to_the_program",)),
    })  # fmt: skip
    yield runs
    runs.close()


# --- item 4: registration never loses a race ---------------------------------------------------------------------

# Its import blocks (a few seconds in the issue) until the threads that import Lightning and build a Trainer are done.
SLOW_PLUGIN = Dist(
    name="slow-race-presets",
    version="0.1.0",
    source="""\
        import _lp_race

        _lp_race.loading.set()
        _lp_race.release.wait(90)
        from lightning_presets import Preset

        PRESET = Preset(name="slow_race_ddp", description="d", family="ddp",
                        strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"})
        """,
    strategies={"slow_race_ddp": "slow_race_presets:PRESET"},
)


RACE = """
        import json, threading
        import torch  # before the threads: what is measured is registration, not torch's import time
        import _lp_race
        import lightning_presets

        outcomes = {}

        def load():
            outcomes["presets"] = sorted(lightning_presets.presets())

        def train(index):
            try:
                from lightning.pytorch import Trainer

                trainer = Trainer(strategy="fsdp2", accelerator="cpu", devices=1, logger=False,
                                  enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
                outcomes[index] = type(trainer.strategy).__name__
            except Exception as error:
                outcomes[index] = f"{type(error).__name__}: {str(error).splitlines()[0]}"

        loader = threading.Thread(target=load, daemon=True)
        loader.start()
        assert _lp_race.loading.wait(120)
        trainers = [threading.Thread(target=train, args=(index,), daemon=True) for index in range(3)]
        for thread in trainers:
            thread.start()
        for thread in trainers:
            thread.join(240)
        still_loading = loader.is_alive()
        _lp_race.release.set()
        loader.join(120)
        print(json.dumps({"trainers": [outcomes.get(index) for index in range(3)], "still_loading": still_loading,
                          "presets": outcomes.get("presets", [])}))
        """


def start_race(site: Path) -> Started:
    write_installed(SLOW_PLUGIN, site)
    (site / "_lp_race.py").write_text("import threading\n\nloading = threading.Event()\nrelease = threading.Event()\n")
    return start_python(RACE, env={"PYTHONPATH": on_path(site), "LIGHTNING_PRESETS_AUTOLOAD": "1"}, timeout=480)


def test_builtins_are_registered_when_import_lightning_returns_while_another_thread_loads(fresh: Fresh) -> None:
    """One thread loads the catalog (its plugin is slow); three others import Lightning and build
    ``Trainer(strategy="fsdp2")`` meanwhile. Before: "invalid strategy name: 'fsdp2'" in every one of them."""
    result = fresh["race"].result()
    assert result.returncode == 0, result.stderr[-3000:]
    data = last_json(result.stdout)
    assert data["still_loading"] is True  # the Trainers were built while the slow plugin was still being imported
    assert data["trainers"] == ["ModelParallelStrategy"] * 3
    assert {"fsdp2", "slow_race_ddp"} <= set(data["presets"])


# A finder ahead of ours that loads Lightning itself, as typeguard's import hook does for an instrumented package.
CLAIMING_FINDER = """
import importlib.machinery, sys

class Claiming:
    claimed = []

    def __init__(self, prefix):
        self.prefix = prefix

    def find_spec(self, name, path=None, target=None):
        if not name.startswith(self.prefix):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is not None:
            Claiming.claimed.append(name)
        return spec
"""


FINDER_CASES = {
    # typeguard's hook, instrumenting Lightning: our finder moves back to the front and wraps its loader
    "finder-ahead": ("sys.meta_path.insert(0, Claiming('lightning_fabric'))", ""),
    # a hook that bypasses ours altogether: `import lightning_presets` catches up
    "hook-bypassed": ("sys.meta_path[:] = [Claiming('lightning_fabric')] + [f for f in sys.meta_path "
                      "if not getattr(f, 'lightning_presets_finder', False)]", "import lightning_presets"),
}  # fmt: skip
FINDER_TEST = "test_a_finder_put_ahead_of_ours_does_not_skip_registration"


def start_finder(setup: str, then: str) -> Started:
    code = (
        CLAIMING_FINDER
        + f"""
import json
{setup}
from lightning_fabric.strategies import STRATEGY_REGISTRY
before = "ddp_static_graph" in STRATEGY_REGISTRY
{then}
print(json.dumps({{"claimed": "lightning_fabric.strategies" in Claiming.claimed, "before": before,
                  "registered": "ddp_static_graph" in STRATEGY_REGISTRY}}))
"""
    )
    return start_python(code, env={"LIGHTNING_PRESETS_AUTOLOAD": "1"}, timeout=300)


@pytest.mark.parametrize(("setup", "then"), list(FINDER_CASES.values()), ids=list(FINDER_CASES))
def test_a_finder_put_ahead_of_ours_does_not_skip_registration(fresh: Fresh, setup: str, then: str) -> None:
    (case,) = [case for case, value in FINDER_CASES.items() if value == (setup, then)]
    result = fresh[case].result()
    assert result.returncode == 0, result.stderr[-3000:]
    data = last_json(result.stdout)
    assert (data["claimed"], data["registered"]) == (True, True)
    assert data["before"] is (not then)  # registered by the hook itself, or only once lightning_presets caught up


# --- item 8: stdin detached, only factories called ------------------------------------------------------------------


def test_entry_points_neither_read_stdin_nor_call_what_is_not_a_factory(
    install: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "stdin", io.StringIO("the program's own input\n"))
    install(NOT_FACTORIES)
    catalog = load()
    found = {entry.name: entry for entry in catalog.entries if entry.distribution == NOT_FACTORIES.name}
    assert {name: (entry.status, [f.code for f in entry.findings]) for name, entry in found.items()} == {
        "reader": ("broken", ["LP005"]),
        "maker": ("broken", ["LP005"]),
        "needy": ("broken", ["LP005"]),
    }
    assert "gave a builtin_function_or_method" in found["reader"].findings[0].message
    assert "gave the class Maker" in found["maker"].findings[0].message
    module = sys.modules["not_factory_presets"]
    assert module.INSTANTIATED == []  # the class was never called
    assert module.READ_AT_IMPORT == ""  # its import read an empty stdin
    assert sys.stdin.read() == "the program's own input\n"  # the program's stdin is untouched
    assert "fsdp2" in catalog.presets


STDIN = """
        import sys
        from lightning_fabric.strategies import STRATEGY_REGISTRY
        print(repr(sys.stdin.read()), "ddp_static_graph" in STRATEGY_REGISTRY)
        """


def start_stdin(site: Path) -> Started:
    write_installed(NOT_FACTORIES, site)
    return Started(
        [sys.executable, "-c", textwrap.dedent(STDIN)],
        input="line one\nline two\n",
        env={**os.environ, "PYTHONPATH": on_path(site), "LIGHTNING_PRESETS_AUTOLOAD": "1"},
        timeout=300,
    )


def test_import_lightning_leaves_piped_stdin_to_the_program(fresh: Fresh) -> None:
    """Before: ``builtins:input`` was called during ``import lightning`` and consumed the program's first line."""
    result = fresh["stdin"].result()
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "'line one\\nline two\\n' True"


# --- item 9: malformed fields are broken at load, everywhere ---------------------------------------------------------


def test_every_malformed_field_is_lp011_with_its_distribution(install: Any) -> None:
    install(MALFORMED_FIELDS)
    catalog = load()
    for name, words in MALFORMED_FIELD_WORDS.items():
        (entry,) = [entry for entry in catalog.entries if entry.name == name]
        assert (entry.status, [f.code for f in entry.findings]) == ("broken", ["LP011"]), name
        message = entry.findings[0].message
        assert words in message, message
        assert "malformed-presets 0.2.0" in message


@pytest.mark.parametrize("name", sorted(MALFORMED_FIELD_WORDS))
def test_a_malformed_preset_is_broken_in_list_doctor_show_check_and_trainer(
    registered: Any, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    """Before: ``ok`` in list and doctor, then a raw TypeError in ``Trainer(...)``, an internal error in show or
    check."""
    from lightning.pytorch import Trainer

    registered(MALFORMED_FIELDS)
    code, out, _ = run_cli(capsys, "list", "--json")
    (row,) = [row for row in json.loads(out)["presets"] if row["name"] == name]
    assert (code, row["status"], [f["code"] for f in row["findings"]]) == (0, "broken", ["LP011"])
    code, out, _ = run_cli(capsys, "doctor", "--json")
    assert code == 1
    assert any(f["code"] == "LP011" and name in f["message"] for f in json.loads(out)["findings"])
    code, out, err = run_cli(capsys, "show", name, "--json")
    assert (code, "internal error" in err) == (1, False)
    assert [f["code"] for f in json.loads(out)["findings"]] == ["LP011"]
    code, out, err = run_cli(capsys, "check", "--strategy", name, "--accelerator", "cpu", "--json")
    assert (code, "internal error" in err) == (1, False)
    assert "LP011" in [f["code"] for f in json.loads(out)["findings"]]
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy=name, accelerator="cpu", devices=1, **QUIET)
    assert excinfo.value.codes == ("LP011",)
    assert MALFORMED_FIELD_WORDS[name] in excinfo.value.findings[0].message


# --- item 10: hints that help ----------------------------------------------------------------------------------------


def test_a_denied_preset_says_lp015_in_trainer_and_check_says_how_to_let_it_in(
    registered: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: Lightning's "invalid strategy name" in ``Trainer(...)``, and a check hint that suggested ALLOW for a
    distribution DENY names."""
    from lightning.pytorch import Trainer

    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", PRINTING.name)
    registered(PRINTING)
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy="printing_ddp", accelerator="cpu", devices=1, **QUIET)
    (finding,) = excinfo.value.findings
    assert finding.code == "LP015"
    assert "denied by LIGHTNING_PRESETS_DENY=printing-presets" in finding.message
    code, out, _ = run_cli(capsys, "check", "--strategy", "printing_ddp", "--accelerator", "cpu", "--json")
    assert (code, [f["code"] for f in json.loads(out)["findings"]]) == (1, ["LP015"])
    registry = sys.modules["lightning.pytorch.strategies"].StrategyRegistry
    stand_in = dict.pop(registry, "printing_ddp")  # not registered: check says LP701 (Lightning's `get` would build)
    try:
        code, out, _ = run_cli(capsys, "check", "--strategy", "printing_ddp", "--accelerator", "cpu", "--json")
    finally:
        dict.__setitem__(registry, "printing_ddp", stand_in)
    (lp701,) = [f for f in json.loads(out)["findings"] if f["code"] == "LP701"]
    assert code == 1
    assert "remove printing-presets from LIGHTNING_PRESETS_DENY" in lp701["hint"]
    assert "ALLOW" not in lp701["hint"]


def test_our_own_denied_presets_say_lp015_in_a_fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", "lightning-presets")
    _catalog.clear_cache()
    registry = _StrategyRegistry()
    _bridge.register_into(registry, namespace_for_target("trainer"), HEADS)
    assert not _bridge.is_ours(registry, "fsdp2")  # a stand-in, not a usable preset
    with pytest.raises(PresetConfigError) as excinfo:
        registry.get("fsdp2")
    assert excinfo.value.codes == ("LP015",)
    monkeypatch.delenv("LIGHTNING_PRESETS_DENY")
    _catalog.clear_cache()
    _bridge.register_into(registry, namespace_for_target("trainer"), HEADS)  # usable again: the stand-in is replaced
    assert _bridge.is_ours(registry, "fsdp2")
    assert type(registry.get("fsdp2")).__name__ == "ModelParallelStrategy"


@pytest.mark.parametrize(
    ("name", "suggested"),
    [
        ("Upper_Case", "upper_case"),
        ("9Fast", "acme_presets_9fast"),
        ("_Hidden", "hidden"),
        ("DDP", "acme_presets_ddp"),
        ("Ünï", "n"),
        ("!!!", "acme_presets_preset"),
    ],
)
def test_a_suggested_name_is_itself_valid(name: str, suggested: str) -> None:
    """Before: ``9Fast`` was told to become ``9fast``, which LP001 refuses again, and ``DDP`` to become Lightning's
    own ``ddp``."""
    found = _catalog.suggested_name(name, "Acme.Presets")
    assert found == suggested
    assert _catalog.is_valid_name(found)
    assert found not in _catalog.lightning_builtin_names(read_missing=True)


def test_lp001_suggests_a_valid_name_for_an_entry_point(install: Any) -> None:
    nine = Dist(
        name="nine-presets",
        version="0.1.0",
        source=(
            "from lightning_presets import Preset\n\nPRESET = Preset(name='9Fast', description='d', family='ddp', "
            "strategy={'trainer': 'DDPStrategy'})\n"
        ),
        strategies={"9Fast": "nine_presets:PRESET"},
    )
    install(nine)
    (entry,) = [entry for entry in load().entries if entry.distribution == nine.name]
    (finding,) = entry.findings
    assert finding.code == "LP001"
    assert "rename it to 'nine_presets_9fast'" in finding.hint
