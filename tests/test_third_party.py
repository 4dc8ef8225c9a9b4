"""Third-party distributions, really built and pip-installed into a temporary environment.

One virtual environment per module (``--system-site-packages``, so Lightning and this package, with its
start-up hook, are visible) gets every distribution of ``_dists``: a good one (acme-presets) and broken
ones. Each test reads what a fresh interpreter of that environment saw.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from _dists import (
    ACME,
    ALL,
    BROKEN_IMPORT,
    BUILTIN_NAME,
    DUP_ONE,
    DUP_TWO,
    IMPORTER,
    RAISING,
    SHADOW,
    UPPER_CASE,
    WRONG_TYPE,
    make_venv,
    pip,
    pip_install,
    write_project,
)
from helpers import Fresh, Started

pytestmark = pytest.mark.install

# Runs in the temporary environment: import Lightning (the hook registers), then try each name.
PROBE = textwrap.dedent(
    """\
    import json, sys, warnings
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import lightning
        from lightning.fabric import Fabric
        from lightning.pytorch import Trainer
        from lightning.pytorch.strategies import StrategyRegistry, DDPStrategy

    QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)

    def attempt(make):
        try:
            strategy = make().strategy
        except Exception as exc:
            return {"ok": False, "error": type(exc).__name__, "message": str(exc).splitlines()[0]}
        preset = getattr(strategy, "_lp_preset", None)
        return {
            "ok": True,
            "class": type(strategy).__name__,
            "module": type(strategy).__module__,
            "preset_distribution": preset.distribution if preset else None,
            "preset_version": preset.version if preset else None,
        }

    trainer_names = ["acme_ddp", "acme_fabric_ddp", "importer_ddp", "tp2d_hybrid", "team_ddp", "upper_case", "ddp",
                     "broken_import", "raising", "wrong_type"]
    fabric_names = ["acme_ddp", "acme_fabric_ddp", "importer_ddp"]
    from lightning_presets.registry.catalog import strategy_catalog

    result = {
        "trainer": {n: attempt(lambda: Trainer(strategy=n, accelerator="cpu", devices=2, **QUIET))
                    for n in trainer_names},
        "fabric": {n: attempt(lambda: Fabric(strategy=n, accelerator="cpu", devices=2)) for n in fabric_names},
        "ddp_is_lightnings": StrategyRegistry["ddp"]["strategy"] is DDPStrategy,
        "warnings": [
            {"category": w.category.__name__, "text": str(w.message),
             "code": getattr(getattr(w.message, "finding", None), "code", None)}
            for w in caught if "lightning_presets" in repr(type(w.message)) or "LP0" in str(w.message)
        ],
        "entries": [
            {"name": e.name, "distribution": e.distribution, "version": e.version, "status": e.status,
             "codes": [f.code for f in e.findings], "messages": [f.message for f in e.findings]}
            for e in strategy_catalog().entries
        ],
    }
    print("RESULT" + json.dumps(result))
    """
)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A temporary environment with every test distribution built and installed; returns its python."""
    root = tmp_path_factory.mktemp("third_party")
    python = make_venv(root / "venv")
    pip_install(python, *(write_project(dist, root / "src") for dist in ALL))
    return python


def start_probe(python: Path, **env: str) -> Started:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LIGHTNING_PRESETS_")}
    return Started([str(python), "-c", PROBE], env={**clean, **env}, timeout=300)


def probe(python: Path | Started, **env: str) -> dict[str, Any]:
    """What a fresh interpreter of the environment saw (``python``), or what the one started (``Started``) saw."""
    started = python if isinstance(python, Started) else start_probe(python, **env)
    result = started.result()
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("RESULT"))
    data: dict[str, Any] = json.loads(line.removeprefix("RESULT"))
    return data


DENY = {"LIGHTNING_PRESETS_DENY": f"{ACME.name},{RAISING.name}"}
ALLOW = {"LIGHTNING_PRESETS_ALLOW": "Acme_Presets"}  # normalized like distribution names
DENY_OURS = {"LIGHTNING_PRESETS_DENY": "lightning-presets", "LIGHTNING_PRESETS_ALLOW": "acme-presets"}


@pytest.fixture(scope="module")
def probes(request: pytest.FixtureRequest, venv: Path) -> Iterator[Fresh]:
    """The probes of the selected tests, started side by side: each needs a fresh interpreter of its own (the trust
    variables are read when the catalog is first built, during ``import lightning``), none depends on another."""
    default_tests = tuple(
        item.name for item in request.session.items if item.path == request.path and "default" in item.fixturenames
    )
    runs = Fresh(request, {
        "default": (lambda: start_probe(venv), default_tests),
        "deny": (lambda: start_probe(venv, **DENY), ("test_deny_skips_a_distribution",)),
        "allow": (lambda: start_probe(venv, **ALLOW), ("test_allow_keeps_only_listed_distributions_and_ours",)),
        "deny_ours": (lambda: start_probe(venv, **DENY_OURS), ("test_deny_applies_to_our_own_distribution",)),
    })  # fmt: skip
    yield runs
    runs.close()


@pytest.fixture(scope="module")
def default(probes: Fresh) -> dict[str, Any]:
    return probe(probes["default"])


def entries_of(data: dict[str, Any], distribution: str) -> list[dict[str, Any]]:
    return [entry for entry in data["entries"] if entry["distribution"] == distribution]


def warnings_with(data: dict[str, Any], code: str) -> list[str]:
    return [w["text"] for w in data["warnings"] if w["code"] == code]


def test_installed_with_pip(venv: Path) -> None:
    listed = pip(venv, "list", "--format=json")
    names = {item["name"] for item in json.loads(listed)}
    assert {dist.name for dist in ALL} <= names


def test_third_party_preset_works_by_name_without_import(default: dict[str, Any]) -> None:
    acme = default["trainer"]["acme_ddp"]
    assert acme["ok"], acme
    assert acme["class"] == "DDPStrategy"
    assert acme["module"] == "lightning_presets"  # the guarded subclass, built by our factory
    assert (acme["preset_distribution"], acme["preset_version"]) == (ACME.name, ACME.version)
    assert default["fabric"]["acme_ddp"]["ok"], default["fabric"]["acme_ddp"]


def test_entry_point_may_be_a_function_returning_a_preset(default: dict[str, Any]) -> None:
    assert default["fabric"]["acme_fabric_ddp"]["ok"], default["fabric"]["acme_fabric_ddp"]
    # Fabric-only: never registered into the Trainer's registry.
    trainer = default["trainer"]["acme_fabric_ddp"]
    assert not trainer["ok"]
    assert "acme_fabric_ddp" in trainer["message"]


def test_preset_module_that_imports_lightning_loads_during_import_lightning(default: dict[str, Any]) -> None:
    for caller in ("trainer", "fabric"):
        importer = default[caller]["importer_ddp"]
        assert importer["ok"], importer
        assert importer["preset_distribution"] == IMPORTER.name


def test_provenance_of_every_entry(default: dict[str, Any]) -> None:
    versions = {(e["name"], e["distribution"]): e["version"] for e in default["entries"]}
    assert versions[("acme_ddp", ACME.name)] == ACME.version
    assert versions[("raising", RAISING.name)] == RAISING.version
    own = entries_of(default, "lightning-presets")
    assert {e["name"] for e in own} >= {"fsdp_offload_ckpt", "tp2d_hybrid"}


def test_lightning_still_works_despite_broken_plugins(default: dict[str, Any]) -> None:
    tp2d = default["trainer"]["tp2d_hybrid"]
    assert tp2d["ok"], tp2d
    assert tp2d["class"] == "ModelParallelStrategy"
    assert tp2d["preset_distribution"] == "lightning-presets"  # the shadowing dist did not override it
    ddp = default["trainer"]["ddp"]
    assert ddp["ok"]
    assert ddp["module"].startswith("lightning.pytorch.strategies")
    assert default["ddp_is_lightnings"]


@pytest.mark.parametrize(
    ("dist", "entry_name", "code", "status", "words"),
    [
        (BROKEN_IMPORT, "broken_import", "LP004", "broken", "ModuleNotFoundError"),
        (RAISING, "raising", "LP004", "broken", "raising-presets cannot build its preset"),
        (WRONG_TYPE, "wrong_type", "LP005", "broken", "gave a dict, not a Preset"),
        (UPPER_CASE, "Upper_Case", "LP001", "refused", "'Upper_Case'"),
        (BUILTIN_NAME, "ddp", "LP002", "refused", "Lightning built-in"),
    ],
)
def test_broken_plugin_is_reported_not_raised(
    default: dict[str, Any], dist: Any, entry_name: str, code: str, status: str, words: str
) -> None:
    (entry,) = entries_of(default, dist.name)
    assert (entry["name"], entry["status"], entry["codes"]) == (entry_name, status, [code])
    assert words in entry["messages"][0]
    # The warning names the distribution and its version.
    assert any(f"{dist.name} {dist.version}" in text for text in warnings_with(default, code))


@pytest.mark.parametrize("name", ["broken_import", "raising", "wrong_type", "upper_case"])
def test_broken_names_are_not_registered(default: dict[str, Any], name: str) -> None:
    assert not default["trainer"][name]["ok"]


def test_duplicate_name_is_an_error_naming_both_and_neither_registered(default: dict[str, Any]) -> None:
    one, two = entries_of(default, DUP_ONE.name), entries_of(default, DUP_TWO.name)
    for (entry,) in (one, two):
        assert (entry["status"], entry["codes"]) == ("conflict", ["LP003"])
        assert f"{DUP_ONE.name} {DUP_ONE.version}" in entry["messages"][0]
        assert f"{DUP_TWO.name} {DUP_TWO.version}" in entry["messages"][0]
        assert "neither is registered" in entry["messages"][0]
    assert not default["trainer"]["team_ddp"]["ok"]
    (warning,) = [text for text in warnings_with(default, "LP003") if "'team_ddp'" in text]  # reported once
    assert f"LIGHTNING_PRESETS_DENY={DUP_ONE.name} or LIGHTNING_PRESETS_DENY={DUP_TWO.name}" in warning


def test_duplicate_of_a_builtin_leaves_ours_in_place(default: dict[str, Any]) -> None:
    (shadow,) = entries_of(default, SHADOW.name)
    assert (shadow["status"], shadow["codes"]) == ("conflict", ["LP003"])
    (ours,) = [e for e in entries_of(default, "lightning-presets") if e["name"] == "tp2d_hybrid"]
    assert (ours["status"], ours["codes"]) == ("ok", ["LP003"])
    assert SHADOW.name in ours["messages"][0]
    assert "lightning-presets's built-in keeps the name" in ours["messages"][0]
    (warning,) = [text for text in warnings_with(default, "LP003") if "'tp2d_hybrid'" in text]
    assert f"LIGHTNING_PRESETS_DENY={SHADOW.name}" in warning
    assert "LIGHTNING_PRESETS_DENY=lightning-presets" not in warning  # never advise denying the built-ins


def test_deny_skips_a_distribution(probes: Fresh) -> None:
    data = probe(probes["deny"])
    assert not data["trainer"]["acme_ddp"]["ok"]
    assert {e["status"] for e in entries_of(data, ACME.name)} == {"denied"}
    assert {e["status"] for e in entries_of(data, RAISING.name)} == {"denied"}
    assert not any(RAISING.name in w["text"] for w in data["warnings"])  # denied: never imported
    assert warnings_with(data, "LP005")  # the others still load and are reported
    assert data["trainer"]["tp2d_hybrid"]["ok"]


def test_allow_keeps_only_listed_distributions_and_ours(probes: Fresh) -> None:
    data = probe(probes["allow"])
    assert data["trainer"]["acme_ddp"]["ok"], data["trainer"]["acme_ddp"]
    assert data["trainer"]["tp2d_hybrid"]["ok"]  # our own distribution is always allowed
    for dist in (BROKEN_IMPORT, RAISING, WRONG_TYPE, UPPER_CASE, BUILTIN_NAME, DUP_ONE, DUP_TWO, SHADOW):
        assert {e["status"] for e in entries_of(data, dist.name)} == {"denied"}
    assert data["warnings"] == []
    (ours,) = [e for e in entries_of(data, "lightning-presets") if e["name"] == "tp2d_hybrid"]
    assert ours["codes"] == []  # the shadowing dist is not loaded, so no conflict either


def test_deny_applies_to_our_own_distribution(probes: Fresh) -> None:
    data = probe(probes["deny_ours"])
    assert {e["status"] for e in entries_of(data, "lightning-presets")} == {"denied"}
    assert not data["trainer"]["tp2d_hybrid"]["ok"]
    assert data["trainer"]["acme_ddp"]["ok"]


def test_venv_sees_no_third_party_dist_outside(default: dict[str, Any]) -> None:
    """The outer environment is untouched: its catalog has none of the test distributions."""
    from lightning_presets.registry.catalog import strategy_catalog

    outer = {entry.distribution for entry in strategy_catalog().entries}
    assert not outer & {dist.name for dist in ALL}
