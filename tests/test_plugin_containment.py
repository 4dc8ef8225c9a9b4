"""Hostile and broken plugins are contained: each costs only its own preset, never ``import lightning``.

Plugins are hand-made distributions (``tests/_dists.py``) in a temporary directory on ``sys.path``: in this
process through the ``install`` fixture, in fresh interpreters through ``PYTHONPATH``. Each test reproduces one
failure of issue 12 (``-W error``, a deadlock, ``SystemExit``, a corrupt distribution, a broken preset that
looked healthy, a denied preset, a printing or slow plugin, a trust list with spaces).
"""

from __future__ import annotations

import json
import os
import pickle
import re
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightning.fabric.strategies.registry import _StrategyRegistry

import _lightning_presets_autoload as hook  # type: ignore[import-untyped, unused-ignore]  # installed copy
import lightning_presets
from _dists import (  # registered_fixture: the fixture `registered`
    BAD_CLASS,
    BAD_CODE,
    BASE_EXCEPTION,
    CRASHING_RULE,
    ESCAPING_RULE,
    EXITING_RULE,
    FINE_RULE,
    GARBAGE_PROBLEM,
    HOSTILE,
    NAMELESS,
    PRINTING,
    RAISING,
    SLOW,
    SYSTEM_EXIT,
    UNPRINTABLE_RULE,
    WRONG_RETURN,
    Dist,
    registered_fixture,  # noqa: F401
    write_installed,
)
from helpers import QUIET, Fresh, Started, run_cli, start_python
from lightning_presets import Preset, PresetConfigError, PresetWarning, _activate
from lightning_presets.core.environment import distribution_names
from lightning_presets.core.namespaces import namespace_for_target
from lightning_presets.guards.strategy import HEADS
from lightning_presets.registry import bridge as _bridge
from lightning_presets.registry import catalog as _catalog
from lightning_presets.tools.catalog import all_entries

pytestmark = pytest.mark.usefixtures("fresh_catalog")


def load() -> _catalog.Catalog[Preset]:
    """The strategy catalog as a fresh process would load it (warnings shown, as with the default filters)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _catalog.load(Preset)


def entry_of(catalog: _catalog.Catalog[Any], dist: Dist) -> _catalog.Entry[Any]:
    (entry,) = [entry for entry in catalog.entries if entry.distribution == dist.name]
    return entry


def on_path(directory: Path) -> str:
    """``PYTHONPATH`` for a fresh interpreter: ``directory`` first, then what this one was given."""
    return os.pathsep.join(filter(None, (str(directory), os.environ.get("PYTHONPATH"))))


def last_json(output: str) -> Any:
    return json.loads(output.strip().splitlines()[-1])


# The two fresh interpreters of this module (``python -W error``, and an import of Lightning that must be the first,
# both with plugins on PYTHONPATH): started side by side when their tests are selected; each test reads its own.


@pytest.fixture(scope="module")
def fresh(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fresh]:
    runs = Fresh(request, {
        "hostile": (lambda: start_hostile(tmp_path_factory.mktemp("hostile")),
                    ("test_hostile_plugins_under_python_w_error_cost_only_themselves",)),
        "deadlock": (lambda: start_deadlock(tmp_path_factory.mktemp("deadlock")),
                     ("test_import_in_one_thread_and_presets_in_another_do_not_deadlock",)),
    })  # fmt: skip
    yield runs
    runs.close()


# --- 1. warnings filters never break `import lightning` ------------------------------------------------------


HOSTILE_CODE = """
        import json
        import lightning.pytorch
        from lightning.pytorch.strategies import StrategyRegistry
        import lightning_presets

        built = type(lightning_presets.strategy("fsdp2")).__name__

        def outcome(name):  # what Trainer(strategy=name) gets from the registry
            try:
                return type(StrategyRegistry.get(name)).__name__
            except lightning_presets.PresetConfigError as error:
                return list(error.codes)

        names = ["fsdp2", "printing_ddp", "raising", "exiting", "escaping", "bad_code_ddp", "nameless_ddp"]
        print(json.dumps({"outcome": {name: outcome(name) for name in names}, "built": built}))
        """


def start_hostile(site: Path) -> Started:
    for dist in HOSTILE:
        write_installed(dist, site)
    write_installed(NAMELESS, site, named=False)
    return start_python(
        HOSTILE_CODE, "-W", "error", timeout=240,
        env={"PYTHONPATH": on_path(site), "LIGHTNING_PRESETS_AUTOLOAD": "1", "PYTHONWARNINGS": "error"},
    )  # fmt: skip


def test_hostile_plugins_under_python_w_error_cost_only_themselves(fresh: Fresh) -> None:
    """``python -W error``: the import survives, the built-ins and the good plugin are registered, stdout is clean."""
    result = fresh["hostile"].result()
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.strip().splitlines()) == 1, result.stdout  # the plugin's print went to stderr
    data = last_json(result.stdout)
    assert data["built"] == "ModelParallelStrategy"
    # a broken plugin's name says why it cannot be used (issue 16), instead of Lightning's "invalid strategy name"
    assert data["outcome"] == {"fsdp2": "ModelParallelStrategy", "printing_ddp": "DDPStrategy", "raising": ["LP004"],
                               "exiting": ["LP004"], "escaping": ["LP004"], "bad_code_ddp": ["LP011"],
                               "nameless_ddp": ["LP013"]}  # fmt: skip
    assert "printing-presets says hello on stdout" in result.stderr
    for text in ("[LP004]", "raising-presets 0.2.0", "SystemExit: 2", "Escape: escaping-presets", "[LP011]",
                 "[LP013]"):  # fmt: skip
        assert text in result.stderr, text


def test_preset_warnings_made_errors_still_load_the_catalog(install: Any, capsys: pytest.CaptureFixture[str]) -> None:
    """The README's own filter: the broken plugin is reported on stderr; the catalog loads and is usable."""
    install(RAISING)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", category=PresetWarning)
        catalog = _catalog.load(Preset)
        assert lightning_presets.strategy("ddp_static_graph") is not None
    assert "fsdp2" in catalog.presets
    assert entry_of(catalog, RAISING).status == "broken"
    assert "[LP004]" in capsys.readouterr().err


def test_a_failing_registration_under_w_error_is_written_not_raised(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def broken(module: types.ModuleType) -> None:
        raise SystemExit(2)

    monkeypatch.setattr(_activate, "register_module", broken)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hook._register(types.ModuleType("lightning.pytorch.strategies"))
    assert "into lightning.pytorch.strategies: SystemExit: 2" in capsys.readouterr().err


# --- 2. no deadlock between the catalog lock and the import locks --------------------------------------------

# Thread B loads the catalog; its plugin imports Lightning once thread A is inside `import lightning.fabric`.
DEADLOCK = Dist(
    name="deadlock-presets",
    version="0.1.0",
    source="""\
        import time

        import _lp_sync

        _lp_sync.loading.set()
        time.sleep(0.5)  # thread A is inside `import lightning` by now (it takes seconds)
        from lightning.pytorch.strategies import DDPStrategy  # noqa: F401
        from lightning_presets import Preset

        PRESET = Preset(name="deadlock_ddp", description="d", family="ddp",
                        strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"})
        """,
    strategies={"deadlock_ddp": "deadlock_presets:PRESET"},
)


DEADLOCK_CODE = """
        import json, os, sys, threading, time
        import _lp_sync
        import lightning_presets

        assert "lightning" not in sys.modules
        seen = {}

        def load():  # thread B
            seen["presets"] = sorted(lightning_presets.presets())

        def import_fabric():  # thread A
            _lp_sync.loading.wait(60)
            import lightning.fabric

        threads = [threading.Thread(target=load, daemon=True), threading.Thread(target=import_fabric, daemon=True)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 90
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            print(json.dumps("DEADLOCK"), flush=True)
            os._exit(0)
        from lightning.fabric.strategies import STRATEGY_REGISTRY as fabric
        from lightning.pytorch.strategies import StrategyRegistry as trainer
        registered = {name: [name in fabric, name in trainer] for name in ("deadlock_ddp", "fsdp2")}
        print(json.dumps({"presets": seen["presets"], "registered": registered}))
        """


def start_deadlock(site: Path) -> Started:
    write_installed(DEADLOCK, site)
    (site / "_lp_sync.py").write_text("import threading\n\nloading = threading.Event()\n")
    return start_python(
        DEADLOCK_CODE, env={"PYTHONPATH": on_path(site), "LIGHTNING_PRESETS_AUTOLOAD": "1"}, timeout=240
    )


def test_import_in_one_thread_and_presets_in_another_do_not_deadlock(fresh: Fresh) -> None:
    result = fresh["deadlock"].result()
    assert result.returncode == 0, result.stderr
    data = last_json(result.stdout)
    assert data != "DEADLOCK"
    assert {"deadlock_ddp", "fsdp2"} <= set(data["presets"])
    assert data["registered"] == {"deadlock_ddp": [True, True], "fsdp2": [True, True]}


def test_registration_asked_while_another_thread_loads_is_run_by_that_thread() -> None:
    """The hook's registration never waits on the loading thread's lock: it is queued and run by that thread."""
    ran: list[str] = []
    _catalog._lock.acquire()  # another thread is loading
    try:
        import threading

        thread = threading.Thread(target=_catalog.after_loading, args=(lambda: ran.append("registered"),))
        thread.start()
        thread.join(10)
        assert not thread.is_alive()  # it did not wait
        assert ran == []
    finally:
        _catalog._lock.release()
    _catalog._run_deferred()  # what the loading thread does once it is done
    assert ran == ["registered"]


# --- 3. BaseException from a plugin ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("dist", "words"),
    [(SYSTEM_EXIT, "SystemExit: 2"), (BASE_EXCEPTION, "Escape: escaping-presets escapes Exception")],
)
def test_system_exit_and_base_exception_at_import_are_lp004(install: Any, dist: Dist, words: str) -> None:
    install(dist)
    catalog = load()
    entry = entry_of(catalog, dist)
    assert (entry.status, [f.code for f in entry.findings]) == ("broken", ["LP004"])
    assert words in entry.findings[0].message
    assert "tp2d_hybrid" in catalog.presets


def test_keyboard_interrupt_is_not_contained(monkeypatch: pytest.MonkeyPatch) -> None:
    def interrupted(module: types.ModuleType) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(_activate, "register_module", interrupted)
    with pytest.raises(KeyboardInterrupt):
        hook._register(types.ModuleType("lightning.pytorch.strategies"))


# --- 4. a corrupt distribution --------------------------------------------------------------------------------


def test_a_distribution_without_a_name_is_skipped_and_reported(install: Any) -> None:
    install(NAMELESS, named=False)
    catalog = load()
    (entry,) = [entry for entry in catalog.entries if entry.name == "nameless_ddp"]
    assert (entry.status, [f.code for f in entry.findings]) == ("broken", ["LP013"])
    assert "nameless_presets-0.1.0.dist-info has no Name" in entry.findings[0].message
    assert "fsdp2" in catalog.presets


def test_list_doctor_and_check_survive_a_distribution_without_a_name(
    install: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    install(NAMELESS, named=False)
    code, out, _ = run_cli(capsys, "list", "--json")
    assert code == 0
    (row,) = [row for row in json.loads(out)["presets"] if row["name"] == "nameless_ddp"]
    assert row["status"] == "broken"
    code, out, _ = run_cli(capsys, "doctor", "--json")
    assert "LP013" in [f["code"] for f in json.loads(out)["findings"]]
    code, out, _ = run_cli(capsys, "check", "--strategy", "ddp", "--accelerator", "cpu", "--json")
    assert code == 0, out


def test_a_scan_that_fails_falls_back_to_one_distribution_at_a_time(
    install: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``importlib.metadata.entry_points()`` stops at a distribution it cannot name (an egg's EGG-INFO)."""
    install(PRINTING)

    def failing(**params: Any) -> Any:
        raise TypeError("expected string or bytes-like object, got 'NoneType'")

    monkeypatch.setattr(_catalog.metadata, "entry_points", failing)
    catalog = load()
    assert {"fsdp2", "printing_ddp"} <= set(catalog.presets)


# --- 5. broken presets are marked broken, and a crashing rule blames its preset ---------------------------------


def test_a_malformed_rule_code_is_broken_at_load(install: Any) -> None:
    install(BAD_CODE)
    entry = entry_of(load(), BAD_CODE)
    assert (entry.status, [f.code for f in entry.findings]) == ("broken", ["LP011"])
    assert "rule 'ACME1' has a code that is not 'LP' followed by three digits" in entry.findings[0].message


def test_a_class_that_does_not_resolve_is_broken_in_list_show_and_doctor(
    install: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    install(BAD_CLASS)
    (listed,) = [each for each in all_entries() if each.entry.name == "bad_class_ddp"]
    assert (listed.entry.status, [f.code for f in listed.entry.findings]) == ("broken", ["LP011"])
    message = listed.entry.findings[0].message
    assert "'NoSuchStrategy'" in message
    assert "bad-class-presets 0.9.0" in message
    code, out, _ = run_cli(capsys, "list", "--strict")
    assert code == 1
    assert "bad_class_ddp (broken): 1 error" in out  # the findings block of the listing (grouped by severity)
    assert "  [LP011]  preset 'bad_class_ddp' from bad-class-presets 0.9.0" in out
    assert run_cli(capsys, "show", "bad_class_ddp")[0] == 1
    code, out, _ = run_cli(capsys, "doctor", "--json")
    data = json.loads(out)
    assert code == 1
    assert "LP011" in [f["code"] for f in data["findings"]]
    assert "LP724" not in [f["code"] for f in data["findings"]]  # not expected in the registries either


def test_an_unresolvable_class_is_reported_and_building_it_says_lp011(install: Any) -> None:
    """Registered all the same (issue 16): ``Trainer(strategy="bad_class_ddp")`` says LP011 and the distribution
    instead of Lightning's "invalid strategy name"."""
    install(BAD_CLASS)
    registry = _StrategyRegistry()
    findings = _bridge.register_into(registry, namespace_for_target("trainer"), HEADS)
    assert [f.code for f in findings] == ["LP011"]
    assert "fsdp2" in registry
    with pytest.raises(PresetConfigError) as excinfo:
        registry.get("bad_class_ddp")
    assert excinfo.value.codes == ("LP011",)
    assert "bad-class-presets 0.9.0" in excinfo.value.findings[0].message
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("bad_class_ddp")
    assert excinfo.value.codes == ("LP011",)
    assert lightning_presets.strategy("bad_class_ddp", target="fabric") is not None  # its Fabric form is fine


@pytest.mark.parametrize(
    ("dist", "devices", "words"),
    [
        (CRASHING_RULE, 1, "ZeroDivisionError: integer division or modulo by zero"),
        (WRONG_RETURN, 1, "TypeError: it returned a str, not a Problem or None"),
        # issue 16, item 2: sys.exit ended the process (check exited 7 with no output), a BaseException was a
        # traceback, a Problem of the wrong types an internal error, an unprintable exception blamed on Lightning
        (EXITING_RULE, 1, "SystemExit: 7"),
        (ESCAPING_RULE, 1, "Escape: the rule escapes Exception"),
        (
            GARBAGE_PROBLEM,
            1,
            "TypeError: it returned a Problem whose message and hint are int and NoneType; both must be str",
        ),
        (UNPRINTABLE_RULE, 1, "Unprintable (whose message cannot be shown: its __str__ raised ZeroDivisionError)"),
    ],
)
def test_a_crashing_rule_is_the_presets_fault_with_its_distribution(
    registered: Any, capsys: pytest.CaptureFixture[str], dist: Dist, devices: int, words: str
) -> None:
    from lightning.pytorch import Trainer

    registered(dist)
    name = next(iter(dist.strategies))
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy=name, accelerator="cpu", devices=devices, **QUIET)
    (finding,) = excinfo.value.findings
    assert finding.code == "LP012"
    assert f"rule LP901 of preset {name!r}" in finding.message
    assert f"from {dist.name} 0.9.0" in finding.message
    assert words in finding.message
    assert f"LIGHTNING_PRESETS_DENY={dist.name}" in finding.hint
    code, out, _ = run_cli(
        capsys, "check", "--strategy", name, "--accelerator", "cpu", "--devices", str(devices), "--json"
    )
    codes = [f["code"] for f in json.loads(out)["findings"]]
    assert (code, codes) == (1, ["LP012"])  # not LP700: Lightning is not blamed


def test_a_rule_that_works_is_reported_under_its_own_code(registered: Any) -> None:
    from lightning.pytorch import Trainer

    registered(FINE_RULE)
    with pytest.raises(PresetConfigError) as excinfo:
        Trainer(strategy="fine_rule_ddp", accelerator="cpu", devices=2, **QUIET)
    assert excinfo.value.codes == ("LP901",)
    assert Trainer(strategy="fine_rule_ddp", accelerator="cpu", devices=8, **QUIET).strategy is not None


# --- 9. smaller ---------------------------------------------------------------------------------------------------


def test_unpickling_with_our_distribution_denied_says_denied(monkeypatch: pytest.MonkeyPatch) -> None:
    data = pickle.dumps(lightning_presets.strategy("ddp_static_graph"))
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", "lightning-presets")
    _catalog.clear_cache()
    with pytest.raises(PresetConfigError) as excinfo:
        pickle.loads(data)
    (finding,) = excinfo.value.findings
    assert finding.code == "LP015"
    assert "denied by LIGHTNING_PRESETS_DENY=lightning-presets" in finding.message
    assert "remove lightning-presets from LIGHTNING_PRESETS_DENY" in finding.hint


def test_left_out_by_allow_says_so(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(PRINTING)
    monkeypatch.setenv("LIGHTNING_PRESETS_ALLOW", "acme-presets")
    with pytest.raises(PresetConfigError, match=r"left out by LIGHTNING_PRESETS_ALLOW=acme-presets"):
        _catalog.get(Preset, "printing_ddp")


def test_a_plugin_that_prints_at_import_leaves_list_json_clean(
    install: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    install(PRINTING)
    code, out, err = run_cli(capsys, "list", "--json")
    assert code == 0
    names = [row["name"] for row in json.loads(out)["presets"]]  # stdout is JSON only
    assert "printing_ddp" in names
    assert "printing-presets says hello on stdout" in err


def test_a_slow_plugin_is_named_while_it_loads(
    install: Any, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(_catalog, "SLOW_SECONDS", 0.3)
    install(SLOW)
    entry = entry_of(load(), SLOW)
    assert entry.status == "ok"
    assert [(f.code, f.severity) for f in entry.findings] == [("LP014", "warning")]
    assert re.search(r"took \d+\.\d s to load", entry.findings[0].message)
    err = capsys.readouterr().err
    assert "still loading strategy entry point 'slow_ddp'" in err
    assert "slow-presets 0.1.0" in err


@pytest.mark.parametrize("value", ["printing-presets other", "printing-presets;other", " printing-presets ,other "])
def test_allow_accepts_spaces_and_semicolons(install: Any, monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    assert distribution_names("X", {"X": value}) == {"printing-presets", "other"}
    install(PRINTING)
    monkeypatch.setenv("LIGHTNING_PRESETS_ALLOW", value)
    assert entry_of(load(), PRINTING).status == "ok"


def test_doctor_reports_a_lightning_that_cannot_be_imported(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "lightning.pytorch.strategies", None)  # `import` raises ImportError
    code, out, _ = run_cli(capsys, "doctor", "--json")
    data = json.loads(out)
    (finding,) = [f for f in data["findings"] if f["code"] == "LP016"]
    assert code == 1
    assert "lightning.pytorch.strategies is installed but fails to import" in finding["message"]


def test_doctor_is_ok_with_an_importable_lightning(capsys: pytest.CaptureFixture[str]) -> None:
    _, out, _ = run_cli(capsys, "doctor", "--json")
    assert "LP016" not in [f["code"] for f in json.loads(out)["findings"]]
