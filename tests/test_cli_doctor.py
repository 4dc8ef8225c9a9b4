"""``lightning-presets doctor``: each code (LP720–LP724) rejected and accepted, no CUDA context, JSON, exit codes."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch

from helpers import run, run_forked
from lightning_presets.core.findings import Finding
from lightning_presets.core.namespaces import NAMESPACES
from lightning_presets.registry import requirements as _requirements
from lightning_presets.registry.catalog import strategy_catalog
from lightning_presets.tools import doctor as _doctor
from lightning_presets.tools import startup as _startup


def codes(findings: Sequence[Finding]) -> list[str]:
    return [each.code for each in findings]


def test_doctor_in_this_environment_is_clean_and_creates_no_cuda_context(
    capsys: pytest.CaptureFixture[str], forbid_cuda_init: list[str]
) -> None:
    code, out = run(capsys, "doctor", "--json")
    data = json.loads(out)
    assert code == data["exit_code"] == 0, data["findings"]
    assert data["schema"] == "lightning-presets/doctor"
    assert data["lightning"]["packages"]["lightning"]["supported"] is True
    assert data["autoload"]["enabled"] is True
    assert data["autoload"]["pth"].endswith(_startup.PTH_NAME)
    trainer = data["registries"]["trainer"]
    assert trainer["importable"]
    assert "fsdp2" in trainer["registered"]
    assert not trainer["missing"]
    assert "xla_fsdp_ckpt" in data["registries"]["fabric"]["registered"]  # a Fabric-only preset
    assert set(data["optional_dependencies"]) == set(_requirements.DEPENDENCIES)
    assert data["torch"]["cuda_initialized"] is False
    assert torch.cuda.is_initialized() is False  # type: ignore[no-untyped-call]
    assert forbid_cuda_init == []


def test_doctor_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "doctor")
    assert code == 0
    assert "no CUDA context was created" in out
    assert re.search(r"^registry +lightning\.pytorch\.strategies: 10 preset\(s\) registered$", out, re.MULTILINE)
    assert "findings: none" in out
    assert out.rstrip().endswith("exit 0")


def test_doctor_never_imports_optional_dependencies_or_cuda_by_default() -> None:
    # Forked from the harness's server (torch, Lightning and the presets imported, CUDA never initialised): whatever
    # they imported is in sys.modules either way, so an optional dependency they or diagnose() import is still seen.
    result = run_forked(
        """
        import sys
        from lightning_presets.tools.doctor import diagnose
        report = diagnose()
        heavy = [m for m in ("deepspeed", "torchao", "bitsandbytes", "transformer_engine", "torch_xla")
                 if m in sys.modules]
        import torch
        print(heavy, torch.cuda.is_initialized(), report.exit_code())
        """
    )
    assert result.returncode == 0, result.stdout
    assert result.stdout.strip().splitlines()[-1] == "[] False 0"


def test_device_count_is_the_only_cuda_query_on_a_cuda_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.version, "cuda", "12.4")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)

    def forbidden() -> bool:
        raise AssertionError("torch.cuda.is_available must not be called")

    monkeypatch.setattr(torch.cuda, "is_available", forbidden)
    info = _doctor.torch_section()
    assert info["build"] == "CUDA 12.4"
    assert info["cuda_devices"] == 8
    assert info["cuda_initialized"] is False


# LP720 / LP721: Lightning versions


def test_lp720_lightning_outside_supported_range(monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    versions = {"lightning": "2.4.0", "pytorch-lightning": None, "lightning-fabric": None}
    monkeypatch.setattr(_doctor, "installed_version", lambda name: versions.get(name, "1.0"))
    code, out = run(capsys, "doctor", "--json")
    data = json.loads(out)
    assert code == 1
    lp720 = [f for f in data["findings"] if f["code"] == "LP720"]
    assert len(lp720) == 1
    assert "lightning 2.4.0 is older than what lightning-presets supports" in lp720[0]["message"]
    assert "pip install 'lightning" in lp720[0]["hint"]


def test_lp720_accepts_supported_versions() -> None:
    assert (
        _doctor.lightning_findings({"lightning": "2.6.6", "pytorch-lightning": "2.6.0", "lightning-fabric": None}) == []
    )
    assert _doctor.lightning_findings({"lightning": "2.5.0", "pytorch-lightning": "2.5.6"}) == []
    assert codes(_doctor.lightning_findings({"lightning": "2.7.0"})) == ["LP720"]


def test_lp720_says_which_side_of_the_range_and_why() -> None:
    (older,) = _doctor.lightning_findings({"lightning": "2.4.0"})
    (newer,) = _doctor.lightning_findings({"pytorch-lightning": "2.7.0"})
    (junk,) = _doctor.lightning_findings({"lightning": "nightly"})
    assert "lightning 2.4.0 is older than what lightning-presets supports (lightning>=2.5,<2.7" in older.message
    assert older.hint == "pip install 'lightning>=2.5,<2.7'"
    assert "pytorch-lightning 2.7.0 is newer than" in newer.message
    assert newer.hint.startswith("pip install 'pytorch-lightning==2.6.6', or upgrade lightning-presets")
    assert "is not a version comparable with" in junk.message
    for finding in (older, newer, junk):
        assert "tested on 2.5.6 and 2.6.6" in finding.message
        assert "`Strategy._configure_launcher`" in finding.message


def test_doctor_reports_the_supported_range_and_the_tested_versions(capsys: pytest.CaptureFixture[str]) -> None:
    _, out = run(capsys, "doctor", "--json")
    section = json.loads(out)["lightning"]
    assert section["supported"] == ">=2.5,<2.7"
    assert section["tested"] == ["2.5.6", "2.6.6"]


def test_lp721_no_lightning_installed() -> None:
    found = _doctor.lightning_findings({"lightning": None, "pytorch-lightning": None, "lightning-fabric": "2.6.6"})
    assert codes(found) == ["LP721"]
    assert codes(_doctor.lightning_findings({"lightning": None, "pytorch-lightning": "2.6.6"})) == []


# LP722 / LP723: autoload


def test_lp722_autoload_turned_off(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_AUTOLOAD", "0")
    info, found = _startup.autoload_section()
    assert info["enabled"] is False
    assert codes(found) == ["LP722"]
    assert found[0].severity == "warning"
    assert "LIGHTNING_PRESETS_AUTOLOAD=0" in found[0].message
    assert run(capsys, "doctor")[0] == 0  # a warning
    assert run(capsys, "doctor", "--strict")[0] == 1


def test_lp722_accepted_when_enabled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_AUTOLOAD", "1")
    assert _startup.autoload_section()[1] == []


def test_lp723_pth_missing(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.delenv("LIGHTNING_PRESETS_AUTOLOAD", raising=False)
    monkeypatch.setattr(_startup, "site_directories", lambda: [str(tmp_path)])
    info, found = _startup.autoload_section()
    assert info["pth"] is None
    assert codes(found) == ["LP723"]
    assert "lightning_presets_autoload.pth is in none of the site directories" in found[0].message
    assert "--force-reinstall" in found[0].hint


def test_lp723_each_cause_and_accepted_neighbour() -> None:
    pth = "/site/lightning_presets_autoload.pth"
    assert _startup.autoload_findings(enabled=True, pth=pth, hook_importable=True, site_enabled=True) == []
    no_hook = _startup.autoload_findings(enabled=True, pth=pth, hook_importable=False, site_enabled=True)
    assert codes(no_hook) == ["LP723"]
    assert "not importable" in no_hook[0].message
    no_site = _startup.autoload_findings(enabled=True, pth=pth, hook_importable=True, site_enabled=False)
    assert codes(no_site) == ["LP723"]
    assert "-S" in no_site[0].message


# LP724: registration


def test_lp724_preset_missing_from_a_registry() -> None:
    namespace = NAMESPACES[0]
    presets = strategy_catalog().presets
    missing = _doctor.unregistered({}, namespace, presets)
    assert "fsdp2" in missing
    assert "xla_fsdp_ckpt" not in missing
    finding = _doctor.registration_finding(namespace, missing)
    assert finding is not None
    assert finding.code == "LP724"
    assert finding.severity == "error"
    assert "lightning.pytorch.strategies.StrategyRegistry" in finding.message


def test_lp724_accepted_with_the_real_registry() -> None:
    from lightning.pytorch.strategies import StrategyRegistry

    namespace = NAMESPACES[0]
    assert _doctor.unregistered(StrategyRegistry, namespace, strategy_catalog().presets) == []
    assert _doctor.registration_finding(namespace, []) is None


# catalog, trust, optional dependencies, cluster


def test_catalog_problem_is_reported(broken_entry: None, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run(capsys, "doctor", "--json")
    data = json.loads(out)
    assert code == 1
    problem = next(row for row in data["catalog"]["problems"] if row["name"] == "acme_broken")
    assert problem["status"] == "broken"
    assert problem["findings"][0]["code"] == "LP004"
    assert "LP004" in [f["code"] for f in data["findings"]]


def test_trust_variables_shown(monkeypatch: pytest.MonkeyPatch, fresh_catalog: None) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", "acme-presets")
    assert _doctor.trust_section() == {"LIGHTNING_PRESETS_ALLOW": None, "LIGHTNING_PRESETS_DENY": "acme-presets"}


def test_broken_optional_dependency_reuses_its_code(monkeypatch: pytest.MonkeyPatch) -> None:
    def probe(module: str) -> _requirements.Probe:
        if module == "deepspeed":
            return _requirements.Probe(module=module, status="broken", version="0.15.0", detail="OSError: CUDA_HOME")
        return _requirements.Probe(module=module, status="missing")

    monkeypatch.setattr(_requirements, "probe", probe)
    info, found = _doctor.dependencies_section(import_optional=True)
    assert info["deepspeed"]["status"] == "broken"
    assert codes(found) == ["LP401"]
    assert "Trainer(strategy='deepspeed_zero2_offload')" in found[0].message
    assert info["torch_xla"]["install"] == "pip install 'torch-xla>=2.1'"


def test_working_optional_dependency_has_no_finding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_requirements, "probe", lambda module: _requirements.Probe(module=module, status="ok"))
    info, found = _doctor.dependencies_section(import_optional=True)
    assert found == []
    assert {row["status"] for row in info.values()} == {"ok"}


def test_lookup_only_dependencies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_doctor, "is_importable", lambda module: module == "torchao")
    info, found = _doctor.dependencies_section()
    assert found == []
    assert info["torchao"]["status"] == "found"
    assert info["deepspeed"]["status"] == "missing"


TORCHRUN = {"TORCHELASTIC_RUN_ID": "x", "RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "8",
            "WORLD_SIZE": "8", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}  # fmt: skip


@pytest.mark.parametrize(
    ("env", "detected"),
    [
        ({"SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "8", "SLURM_NNODES": "2", "SLURM_JOB_NAME": "train"}, "slurm"),
        ({"SLURM_NTASKS": "1", "SLURM_JOB_NAME": "bash"}, "none (an interactive SLURM allocation"),
        (TORCHRUN, "torchelastic"),
        ({**TORCHRUN, "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2", "SLURM_JOB_NAME": "train"}, "torchelastic"),
        # torchrun's ranks without its run id: Lightning (torch.distributed.is_torchelastic_launched) sees no torchrun
        ({"RANK": "0", "GROUP_RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "8"}, "none"),
        ({"KUBERNETES_PORT": "tcp://10.96.0.1:443", "MASTER_ADDR": "m", "MASTER_PORT": "1", "WORLD_SIZE": "2",
          "RANK": "0"}, "none (a Kubeflow pod: Lightning does not detect Kubeflow"),
        ({}, "none"),
    ],
)  # fmt: skip
def test_cluster_detection_is_lightnings_own(env: dict[str, str], detected: str) -> None:
    assert _doctor.detected_cluster(env).startswith(detected)


def test_cluster_detection_says_what_lightnings_environment_refuses(tmp_path: Path) -> None:
    """``--ntasks`` without ``--ntasks-per-node`` and an LSF rank file that is not there: Lightning picks the
    environment and its constructor raises; the doctor names both, and leaves this process's variables as they were."""
    before = dict(os.environ)
    slurm = _doctor.detected_cluster({"SLURM_NTASKS": "16", "SLURM_JOB_NAME": "train"})
    assert slurm.startswith("slurm (Lightning refuses this job's variables: You set `--ntasks=16`"), slurm
    missing = str(tmp_path / "rankfile")
    lsf = _doctor.detected_cluster({"LSB_JOBID": "1", "LSB_DJOB_RANKFILE": missing, "JSM_NAMESPACE_LOCAL_RANK": "0",
                                    "JSM_NAMESPACE_SIZE": "4"})  # fmt: skip
    assert lsf.startswith("lsf (Lightning refuses this job's variables: "), lsf
    assert missing in lsf
    assert dict(os.environ) == before


def test_cluster_section_lists_variables_and_visible_devices() -> None:
    env = {"SLURM_NTASKS": "16", "CUDA_VISIBLE_DEVICES": "0,1", "HOME": "/root", "MASTER_PORT": "29500"}
    info = _doctor.cluster_section(env)
    assert info["cuda_visible_devices"] == "0,1"
    assert info["variables"] == {"CUDA_VISIBLE_DEVICES": "0,1", "MASTER_PORT": "29500", "SLURM_NTASKS": "16"}


def test_codes_documented() -> None:
    assert [code.code for code in _doctor.CODES] == [
        "LP720",
        "LP721",
        "LP722",
        "LP723",
        "LP724",
        "LP016",
        "LP017",
        "LP018",
    ]
    assert all(code.fails and code.fixed and code.title for code in _doctor.CODES)


def test_cli_import_flag_probes_and_reports_broken(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def probe(module: str) -> _requirements.Probe:
        if module != "bitsandbytes":
            return _requirements.Probe(module=module, status="missing")
        return _requirements.Probe(module=module, status="broken", detail="OSError: libcudart.so not found")

    monkeypatch.setattr(_requirements, "probe", probe)
    assert run(capsys, "doctor")[0] == 0  # without --import nothing is imported, so nothing is broken
    code, out = run(capsys, "doctor", "--import")
    assert code == 1
    assert "LP601" in out
    assert "lightning_presets.precision('nf4-bnb')" in out


def test_a_lightning_package_that_comes_with_another_distribution_is_not_called_missing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """pytorch-lightning's wheel ships lightning_fabric: doctor says so instead of "not installed" beside a
    lightning_fabric registry that holds presets."""
    versions = {"lightning": "2.6.6", "pytorch-lightning": "2.6.6", "lightning-fabric": None}
    carried, _ = _doctor.lightning_section(versions.get, lambda name: ["pytorch-lightning"])
    fabric = carried["packages"]["lightning-fabric"]
    assert fabric["provided_by"] == [{"distribution": "pytorch-lightning", "version": "2.6.6"}]
    alone, _ = _doctor.lightning_section(versions.get, lambda name: [])
    assert alone["packages"]["lightning-fabric"]["provided_by"] == []
    from lightning_presets.cli._doctor import _lightning_package

    assert _lightning_package("lightning-fabric", fabric, ">=2.5,<2.7") == (
        "no distribution of its own; the lightning_fabric package comes with pytorch-lightning 2.6.6"
    )
    assert _lightning_package("lightning-fabric", alone["packages"]["lightning-fabric"], "") == "not installed"
    # and in this environment the text agrees with the registry lines below it
    _code, out = run(capsys, "doctor")
    importable = json.loads(run(capsys, "doctor", "--json")[1])["registries"]["lightning_fabric"]["importable"]
    fabric_line = next(line for line in out.splitlines() if line.startswith("lightning-fabric"))
    assert ("not installed" in fabric_line) is (not importable)


def test_cluster_detection_with_a_broken_lightning_says_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    """The doctor explains a broken install (LP016): the cluster line says what it could not ask, never raises."""
    from lightning_presets.tools.simulation import lightning as simulation

    def broken(kind: str) -> None:
        raise RuntimeError("lightning.fabric failed to import")

    monkeypatch.setattr(simulation, "selected_environment", broken)
    detected = _doctor.detected_cluster({"SLURM_NTASKS": "2"})
    assert detected == ("unknown (Lightning's cluster environments do not import: RuntimeError: lightning.fabric "
                        "failed to import)")  # fmt: skip


# --- the machine against the torch build (issue 35 item 4; core.machine, guards.machine) ---------------------------


def _machine_doctor(monkeypatch: pytest.MonkeyPatch, gpus: tuple[tuple[int, int], ...], driver: tuple[int, int] | None,
                    build: object, **env: str) -> tuple[dict[str, object], list[Finding], str]:  # fmt: skip
    """The doctor's machine section and its text, with NVML's facts and the build simulated."""
    from rich.console import Console

    from lightning_presets.cli._doctor import _machine
    from lightning_presets.cli._output import fields
    from lightning_presets.core import machine as m
    from lightning_presets.inspection import machine as guards

    facts = m.Machine(tuple(m.GPU(i, cap, "NVIDIA B200") for i, cap in enumerate(gpus)), driver, env)
    monkeypatch.setattr(guards, "observed_machine", lambda env=None: facts)
    monkeypatch.setattr(guards, "installed_build", lambda: build)
    info, found = _doctor.machine_section()
    console = Console(width=400, record=True)
    console.print(fields(_machine(info), indent=0))
    return info, found, console.export_text()


def test_the_doctor_names_each_gpu_the_build_has_no_kernels_for_and_the_build_that_has(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lightning_presets.core.machine import Build

    cu126 = Build("2.13.0+cu126", "12.6", ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"), True,
                  {"12.6": (50, 60, 70, 75, 80, 86, 90), "12.9": (75, 80, 86, 90, 100, 120)})  # fmt: skip
    info, found, text = _machine_doctor(monkeypatch, ((12, 0),) * 8, (12, 8), cu126)
    assert codes(found) == ["LP120"]
    assert re.search(
        r"GPUs 0-7 \(NVIDIA B200\) +WARNING: compute capability 12\.0 \(sm_120\); this torch 2\.13\.0\+cu126 has "
        r"kernels for sm_50\.\.sm_90",
        text,
    ), text
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cu129" in text
    assert re.search(r"driver +OK: the driver supports CUDA 12\.8; torch was built with CUDA 12\.6", text)
    # the accepted neighbours: Hopper on that build, a driver of the same major, NCCL built in
    info, found, text = _machine_doctor(monkeypatch, ((9, 0),) * 8, (12, 2), cu126)
    assert codes(found) == []
    assert [v["status"] for v in info["verdicts"]] == ["ok", "ok", "ok"]  # type: ignore[index]
    old = _machine_doctor(monkeypatch, ((9, 0),), (11, 8), cu126)[1]
    assert codes(old) == ["LP122"]


def test_the_doctor_without_a_gpu_says_so_calmly() -> None:
    """This machine: no NVIDIA driver, a CPU-only torch; nothing compared, no finding, no context."""
    info, found = _doctor.machine_section()
    if torch.version.cuda is not None:
        pytest.skip("a CUDA build of torch")
    assert codes(found) == []
    assert "a machine without one needs nothing more" in str(info.get("reason", ""))
