"""Dependency probing: missing, installed but broken, known-bad version pairs; and optional stays optional."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from helpers import run_forked
from lightning_presets import Requirement
from lightning_presets.core.preset import Preset
from lightning_presets.registry import codes, requirements

OPTIONAL = ("deepspeed", "transformer_engine", "torchao", "bitsandbytes", "torch_xla")


def test_is_importable_never_imports(monkeypatch: pytest.MonkeyPatch) -> None:
    assert requirements.is_importable("json")
    assert not requirements.is_importable("lp_no_such_module_anywhere")
    monkeypatch.setitem(sys.modules, "json", None)  # how an import blocker looks
    assert not requirements.is_importable("json")


def test_probe_statuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lp_fake_broken").mkdir()
    (tmp_path / "lp_fake_broken" / "__init__.py").write_text('raise ValueError("no backend\\nsecond")\n')
    (tmp_path / "lp_fake_fine.py").write_text("VALUE = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("lp_fake_broken", "lp_fake_fine"):
        dependency = requirements.Dependency(
            module=name, distribution=name, broken=codes.DEEPSPEED_BROKEN, pair=codes.DEEPSPEED_TORCH_PAIR
        )
        monkeypatch.setitem(requirements.DEPENDENCIES, name, dependency)
    broken = requirements.probe("lp_fake_broken")
    assert (broken.status, broken.detail) == ("broken", "ValueError: no backend")
    assert requirements.probe("lp_fake_fine").status == "ok"
    assert requirements.probe("lp_not_installed").status == "missing"


def test_probe_checks_the_pair_before_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(requirements, "installed_version", {"deepspeed": "0.14.0", "torch": "2.7.1"}.get)
    monkeypatch.setattr(requirements, "is_importable", lambda name: True)
    imported = []
    monkeypatch.setattr(requirements.importlib, "import_module", imported.append)
    result = requirements.probe("deepspeed")
    assert (result.status, result.version) == ("incompatible", "0.14.0")
    assert imported == []


def test_unparsable_versions_never_match() -> None:
    assert requirements.known_bad_pair(requirements.DEPENDENCIES["deepspeed"], "2.6.0", "not-a-version") is None


def test_findings_name_the_call_and_the_fix() -> None:
    requirement = Requirement(module="deepspeed", extra="deepspeed", builds_against_torch=True)
    missing = requirements.finding(requirement, requirements.Probe(module="deepspeed", status="missing"), "Trainer()")
    assert missing is not None
    assert (missing.code, missing.hint) == (
        "LP007",
        "install it with: pip install --no-build-isolation 'deepspeed>=0.16'",
    )
    broken = requirements.Probe(module="deepspeed", status="broken", version="0.19.8", detail="OSError: no libaio")
    found = requirements.finding(requirement, broken, "Trainer()")
    assert found is not None
    assert found.code == "LP401"
    assert "deepspeed 0.19.8, which is installed but fails to import: OSError: no libaio" in found.message
    ok = requirements.Probe(module="deepspeed", status="ok")
    assert requirements.finding(requirement, ok, "Trainer()") is None


def test_first_error_line() -> None:
    assert requirements.first_error_line(RuntimeError("first\nsecond")) == "RuntimeError: first"
    assert requirements.first_error_line(ImportError()) == "ImportError"


def test_every_code_used_is_a_declared_one() -> None:
    used = {dep.broken for dep in requirements.DEPENDENCIES.values()}
    used |= {dep.pair for dep in requirements.DEPENDENCIES.values()}
    assert used <= set(codes.CODES)


def test_a_third_party_requirement_keeps_the_missing_check() -> None:
    preset = Preset(
        name="acme_fast",
        description="x",
        family="ddp",
        strategy={"trainer": "DDPStrategy"},
        requires=(Requirement(module="lp_acme_missing_dep", extra="acme"),),
    )
    findings = requirements.findings(preset.requires, "Trainer(strategy='acme_fast')")
    assert [finding.code for finding in findings] == ["LP007"]
    assert "`Trainer(strategy='acme_fast')` needs the optional dependency 'lp_acme_missing_dep'" in findings[0].message


def test_importing_and_listing_never_import_optional_dependencies() -> None:
    # Forked from the harness's server, which imported torch, Lightning and the presets already: what they import is
    # in sys.modules either way, so an optional dependency imported by them (or by the listing) is still seen.
    result = run_forked(
        f"""
        import sys
        import lightning_presets
        import lightning.pytorch, lightning.fabric
        from lightning_presets.registry.catalog import precision_catalog
        strategies, precisions = lightning_presets.presets(), precision_catalog().presets
        print("COUNTS", len(strategies) > 0, sorted(precisions))
        print("IMPORTED", [name for name in {OPTIONAL!r} if name in sys.modules])
        """
    )
    assert "IMPORTED []" in result.stdout, result.stdout + result.stderr
    assert "'fp8-te'" in result.stdout


def test_cli_list_never_imports_optional_dependencies() -> None:
    result = run_forked(  # as above: the server's imports are in sys.modules too
        f"""
        import sys
        from lightning_presets.cli import main
        try:
            main(["list"])
        except SystemExit:
            pass
        print("IMPORTED", [name for name in {OPTIONAL!r} if name in sys.modules])
        """
    )
    assert "nf4-bnb" in result.stdout, result.stdout + result.stderr
    assert "IMPORTED []" in result.stdout


def test_the_install_hint_is_the_extras_own_requirement_which_works_from_a_clone() -> None:
    """`pip install 'lightning-presets[x]'` fails until the package is on an index; the extra's requirement, read from
    the installed metadata, installs the dependency however lightning-presets was installed."""
    from lightning_presets.core.preset import Requirement, extra_requirements

    extras = extra_requirements()
    assert extras["deepspeed"] == "deepspeed>=0.16"
    assert "test" not in extras  # several requirements: not an install hint
    assert Requirement(module="torchao", extra="torchao").install_command == "pip install 'torchao>=0.18'"
    assert (
        Requirement(module="x", extra="not-an-extra").install_command == "pip install 'lightning-presets[not-an-extra]'"
    )
    assert extra_requirements("no-such-distribution") == {}
