"""What ``lightning-presets doctor`` explains: versions, autoload, registries, trust, extras and cluster.

Nothing here starts a process, a launcher or a CUDA context. CUDA is asked about only on a CUDA build
of torch, and only through ``torch.cuda.device_count()``: it reads NVML first (falling back to the CUDA
runtime's device count), which creates no context, so ``torch.cuda.is_initialized()`` stays ``False`` and
forking afterwards stays safe. ``torch.cuda.is_available()`` is not used: without
``PYTORCH_NVML_BASED_CUDA_CHECK=1`` it always goes to the runtime. Optional dependencies are only looked up
(``find_spec`` and their metadata) unless ``import_optional=True`` (``doctor --import``): then
:func:`lightning_presets.registry.requirements.probe` imports each installed one to tell "installed" from "installed
but broken", and that import is the dependency's own code, which may touch CUDA; the report says whether a
context exists at the end.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import platform
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

from lightning_presets.core.codes import Code
from lightning_presets.core.environment import (
    ALLOW_VARIABLE,
    DENY_VARIABLE,
    is_cluster_variable,
    skipped_rules,
)
from lightning_presets.core.findings import Finding, PresetWarning
from lightning_presets.core.namespaces import NAMESPACES, Namespace, constructor
from lightning_presets.core.versions import LIGHTNING_TESTED
from lightning_presets.core.versions import SUPPORTED_LIGHTNING as _SUPPORTED_RANGE
from lightning_presets.registry import bridge, catalog, requirements
from lightning_presets.registry.requirements import DEPENDENCIES, installed_version, is_importable
from lightning_presets.registry.variables import RULES_SKIPPED, UNKNOWN_VALUE, variable_findings
from lightning_presets.tools import catalog as catalogs
from lightning_presets.tools.startup import (
    AUTOLOAD_OFF,
    NO_STARTUP_HOOK,
    REINSTALL,
    autoload_section,
    doctor_code,
)

DOCTOR_SCHEMA = "lightning-presets/doctor"
DOCTOR_SCHEMA_VERSION = 1
RANGE = _SUPPORTED_RANGE
"""The supported Lightning range as written in ``pyproject.toml``, for messages."""
SUPPORTED_LIGHTNING = SpecifierSet(RANGE)
LIGHTNING_DISTRIBUTIONS = ("lightning", "pytorch-lightning", "lightning-fabric")


@dataclass(slots=True)
class Report:
    """Sections of facts (JSON-ready) and the findings they raised."""

    sections: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)

    def rejected(self, strict: bool = False) -> bool:
        return any(f.severity == "error" or strict for f in self.findings)

    def exit_code(self, strict: bool = False) -> int:
        return 1 if self.rejected(strict) else 0

    def as_dict(self, strict: bool = False) -> dict[str, Any]:
        return {
            "schema": DOCTOR_SCHEMA,
            "schema_version": DOCTOR_SCHEMA_VERSION,
            **self.sections,
            "findings": [finding.as_dict() for finding in self.findings],
            "exit_code": self.exit_code(strict),
        }


# --- Python and torch ---------------------------------------------------------------------------------------


def python_section() -> dict[str, Any]:
    return {"version": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
            "site_enabled": not sys.flags.no_site}  # fmt: skip


def cuda_initialized() -> bool:
    """Whether this process holds a CUDA context (never creates one)."""
    import torch

    return bool(torch.cuda.is_initialized())  # type: ignore[no-untyped-call]  # torch leaves it unannotated


def torch_section() -> dict[str, Any]:
    """torch's version and build; the visible CUDA device count without creating a CUDA context."""
    if not is_importable("torch"):
        return {"installed": False}
    import torch

    cuda_build = torch.version.cuda
    info: dict[str, Any] = {"installed": True, "version": torch.__version__, "cuda_build": cuda_build,
                            "build": f"CUDA {cuda_build}" if cuda_build else "CPU"}  # fmt: skip
    if cuda_build:
        info["cuda_devices"] = torch.cuda.device_count()  # NVML first; never creates a context
    else:
        info["cuda_devices"] = 0
    info["cuda_initialized"] = cuda_initialized()
    return info


def gpus_section() -> dict[str, Any]:
    """The GPUs this process would use (``CUDA_VISIBLE_DEVICES``) as the driver names them, read through NVML (no CUDA
    context), and the ``--gpu-type`` of ``plan``'s table they are, when they are all one known type."""
    from lightning_presets.core import hardware
    from lightning_presets.tools.plan.hardware import machine_gpu_type

    gpus = hardware.nvml_gpus()
    if gpus is None:
        return {"read": False, "count": 0, "names": [], "memory_bytes": None, "gpu_type": None}
    return {"read": True, "count": gpus.count, "names": list(gpus.names), "memory_bytes": gpus.memory_bytes,
            "gpu_type": machine_gpu_type(), "torch_build": hardware.build_note(gpus, _arch_list())}  # fmt: skip


def _arch_list() -> list[str]:
    """The architectures the installed torch was built for (its flags: no CUDA context, no driver call), empty without
    torch (``inspection.machine.arch_list``)."""
    try:
        import torch
    except ImportError:
        return []
    from lightning_presets.inspection.machine import arch_list

    return arch_list(torch)


def machine_section() -> tuple[dict[str, Any], list[Finding]]:
    """The machine against the torch build (``core.machine``): each GPU's compute capability against the build's
    architectures, the driver's CUDA version against torch's, NCCL, and the scheduler's GPUs against those this
    process sees; read through NVML and torch's compiled-in facts, never a CUDA context. The comparisons that are
    off are findings with the codes construction reports them under (LP120-LP125)."""
    if not is_importable("torch"):
        return {"compared": False, "reason": "torch is not installed", "verdicts": []}, []
    import torch

    from lightning_presets.core import machine as _machine
    from lightning_presets.guards import machine as _guards
    from lightning_presets.inspection import machine as _facts

    build = _facts.installed_build()
    facts = _facts.observed_machine()
    verdicts = _machine.compare(facts, build)
    if torch.version.hip is not None:
        verdicts = [each for each in verdicts if each.check != "kernels"]
    info: dict[str, Any] = {
        "compared": True,
        "build": {"version": build.version, "cuda": build.cuda, "arch_list": list(build.arch_list),
                  "nccl": build.nccl},
        "driver_cuda": None if facts.driver_cuda is None else ".".join(map(str, facts.driver_cuda)),
        "gpus_read": facts.gpus is not None,
        "verdicts": [each.as_dict() for each in verdicts],
    }  # fmt: skip
    if facts.gpus is None:
        info["reason"] = ("no NVIDIA GPU was read (the driver's libnvidia-ml.so.1 is absent or did not start); a "
                          "machine without one needs nothing more")  # fmt: skip
    elif not facts.gpus:
        info["reason"] = "the driver lists no GPU this process may use (CUDA_VISIBLE_DEVICES)"
    codes = {"kernels": _guards.gpus_have_kernels, "driver": _guards.driver_runs_the_build,
             "nccl": _guards.nccl_is_built, "assignment": _guards.gpus_assigned}  # fmt: skip
    found = []
    for each in verdicts:
        if each.status in ("warning", "error"):
            code = _guards.gpus_have_cubins if "through its PTX" in each.message else codes[each.check]
            if each.check == "kernels" and "CPU-only build" in each.message:
                code = _guards.gpus_usable
            found.append(code.finding(each.message, each.fix))
    return info, found


UNSUPPORTED_LIGHTNING = doctor_code("LP720", "error", "a Lightning package outside the supported range",
    "with lightning 2.4.0 installed", f"after pip install 'lightning{RANGE}'",
    "source: lightning_presets/guards/strategy.py hooks Lightning's private _configure_launcher, whose contract is "
    f"verified on Lightning {' and '.join(LIGHTNING_TESTED)} (the compatibility tests; pyproject requires "
    f"lightning{RANGE})")  # fmt: skip
NO_LIGHTNING = doctor_code("LP721", "error", "no Lightning package installed",
    "neither lightning nor pytorch-lightning installed", f"after pip install 'lightning{RANGE}'",
    "runtime: importing pytorch_lightning raises ImportError")  # fmt: skip
NOT_REGISTERED = doctor_code("LP724", "error", "a preset missing from an importable Lightning registry",
    "fsdp2 absent from lightning.pytorch.strategies.StrategyRegistry",
    f"after `import lightning_presets` or {REINSTALL}",
    "runtime: the Trainer raises ValueError 'invalid strategy name'")  # fmt: skip
LIGHTNING_BROKEN = doctor_code("LP016", "error", "an installed Lightning package that fails to import",
    "`import lightning.pytorch.strategies` raises ImportError (a broken install)",
    f"after pip install --force-reinstall 'lightning{RANGE}'",
    "runtime: importing Lightning's strategies raises ImportError")  # fmt: skip

CODES: tuple[Code, ...] = (
    UNSUPPORTED_LIGHTNING,
    NO_LIGHTNING,
    AUTOLOAD_OFF,
    NO_STARTUP_HOOK,
    NOT_REGISTERED,
    LIGHTNING_BROKEN,
    UNKNOWN_VALUE,
    RULES_SKIPPED,
)


# --- Lightning versions (LP720, LP721) ------------------------------------------------------------------------


def lightning_findings(versions: Mapping[str, str | None]) -> list[Finding]:
    """LP721 when neither ``lightning`` nor ``pytorch-lightning`` is installed; LP720 for each out of range."""
    found = []
    if versions.get("lightning") is None and versions.get("pytorch-lightning") is None:
        found.append(
            NO_LIGHTNING.finding(
                "neither `lightning` nor `pytorch-lightning` is installed, so no preset can be registered",
                f"pip install 'lightning{RANGE}'",
            )
        )  # fmt: skip
    for distribution, version in versions.items():
        if version is not None and not _supported(version):
            found.append(unsupported_lightning(distribution, version))
    return found


def unsupported_lightning(distribution: str, version: str) -> Finding:
    """LP720: which side of the supported range the version is on, why it matters and the install line that fixes it."""
    try:
        newer = Version(version) > Version(LIGHTNING_TESTED[-1])
        side = "is newer than" if newer else "is older than"
    except InvalidVersion:
        newer, side = False, "is not a version comparable with"
    fix = f"pip install '{distribution}{RANGE}'"
    if newer:
        fix = (
            f"pip install '{distribution}=={LIGHTNING_TESTED[-1]}', or upgrade lightning-presets "
            f"(pip install -U lightning-presets) once a release supports {distribution} {version}"
        )
    return UNSUPPORTED_LIGHTNING.finding(
        f"{distribution} {version} {side} what lightning-presets supports ({distribution}{RANGE}, tested on "
        f"{' and '.join(LIGHTNING_TESTED)}): the guards run inside a private Lightning hook "
        "(`Strategy._configure_launcher`, called by the connector) that may change in any minor release; the presets "
        f"still register, but whether their guards fire on {version} is untested",
        fix,
    )  # fmt: skip


def _supported(version: str) -> bool:
    try:
        return SUPPORTED_LIGHTNING.contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def providers(distribution: str) -> list[str]:
    """The installed distributions that ship the import package of ``distribution`` (``lightning-fabric`` ->
    ``lightning_fabric``): pytorch-lightning's wheel carries ``lightning_fabric`` without a lightning-fabric
    distribution."""
    import importlib.metadata

    return sorted(set(importlib.metadata.packages_distributions().get(distribution.replace("-", "_"), [])))


def lightning_section(
    version_of: Callable[[str], str | None] | None = None,
    provided_by: Callable[[str], list[str]] | None = None,
) -> tuple[dict[str, Any], list[Finding]]:
    version_of = version_of or installed_version
    provided_by = provided_by or providers
    versions = {name: version_of(name) for name in LIGHTNING_DISTRIBUTIONS}
    packages: dict[str, dict[str, Any]] = {}
    for name, version in versions.items():
        packages[name] = {"version": version, "supported": version is not None and _supported(version)}
        if version is None:  # not installed as its own distribution: its import package may come with another
            packages[name]["provided_by"] = [
                {"distribution": other, "version": version_of(other)} for other in provided_by(name) if other != name
            ]
    info = {"supported": RANGE, "tested": list(LIGHTNING_TESTED), "packages": packages}
    return info, lightning_findings(versions)


# --- registries (LP724) ----------------------------------------------------------------------------------------


def unregistered(registry: Any, namespace: Namespace, presets: Mapping[str, Any]) -> list[str]:
    """Presets of the namespace's kind that the registry does not hold as ours."""
    return [
        name
        for name, preset in presets.items()
        if namespace.kind in preset.strategy and not bridge.is_ours(registry, name)
    ]


def registration_finding(namespace: Namespace, missing: list[str]) -> Finding | None:
    if not missing:
        return None
    return NOT_REGISTERED.finding(
        f"{len(missing)} preset(s) are not registered in {namespace.strategies_module}."
        f"{namespace.registry_attr}: {', '.join(missing)}; `{namespace.constructor}(strategy='{missing[0]}')` "
        "would fail as an unknown strategy",
        "run `lightning-presets list` for the preset's status and any warning printed at import; "
        f"`import lightning_presets` registers explicitly; if that does not help, {REINSTALL}",
    )  # fmt: skip


def unimportable_finding(namespace: Namespace, error: BaseException) -> Finding:
    """LP016: a Lightning package that is installed but fails to import, so no preset can be registered into it."""
    return LIGHTNING_BROKEN.finding(
        f"{namespace.strategies_module} is installed but fails to import ({type(error).__name__}: "
        f"{error}): `{namespace.constructor}(...)` cannot run in this environment, with or without a preset",
        f"reinstall a supported Lightning (pip install --force-reinstall '{namespace.package.split('.')[0]}"
        f"{SUPPORTED_LIGHTNING}') and check that `python -c 'import {namespace.strategies_module}'` works",
    )  # fmt: skip


def registries_section() -> tuple[dict[str, Any], list[Finding]]:
    presets = catalogs.registered("strategy")
    info: dict[str, Any] = {}
    found = []
    for namespace in NAMESPACES:
        if not is_importable(namespace.package.partition(".")[0]):
            info[namespace.target] = {"module": namespace.strategies_module, "importable": False}
            continue
        try:
            module = importlib.import_module(namespace.strategies_module)
        except Exception as exc:  # an installed but broken Lightning is reported, not raised
            info[namespace.target] = {"module": namespace.strategies_module, "importable": False,
                                      "error": f"{type(exc).__name__}: {exc}"}  # fmt: skip
            found.append(unimportable_finding(namespace, exc))
            continue
        registry = getattr(module, namespace.registry_attr, {})
        missing = unregistered(registry, namespace, presets)
        expected = [name for name, preset in presets.items() if namespace.kind in preset.strategy]
        info[namespace.target] = {"module": namespace.strategies_module, "importable": True,
                                  "registered": [name for name in expected if name not in missing],
                                  "missing": missing}  # fmt: skip
        finding = registration_finding(namespace, missing)
        if finding is not None:
            found.append(finding)
    return info, found


# --- trust and catalog ----------------------------------------------------------------------------------------


def trust_section() -> dict[str, Any]:
    return {name: os.environ.get(name) for name in (ALLOW_VARIABLE, DENY_VARIABLE)}


def catalog_section() -> tuple[dict[str, Any], list[Finding]]:
    """Every entry that is not usable (broken, refused, conflict, denied, or its optional dependency missing), with
    the catalog's own findings. A missing dependency is no finding of the environment (a job that does not use the
    preset runs): the row names it and the dependency table says how to install it."""
    rows = []
    found: list[Finding] = []
    entries = catalogs.all_entries()
    for listed in entries:
        entry = listed.entry
        if entry.status == "ok" and not entry.findings:
            continue
        rows.append({"name": entry.name, "kind": listed.kind, "status": entry.status,
                     "source": f"{entry.distribution} {entry.version}",
                     "findings": [finding.as_dict() for finding in entry.findings]})  # fmt: skip
        if entry.status == "missing":
            rows[-1]["install"] = sorted({r.install_command for r in listed.item.requires
                                          if not is_importable(r.module)})  # fmt: skip
        if entry.status != "missing":
            found.extend(finding for finding in entry.findings if finding not in found)
    usable = sum(1 for listed in entries if listed.entry.status == "ok")
    return {"usable": usable, "problems": rows}, found


# --- optional dependencies ------------------------------------------------------------------------------------


def _users(module: str) -> list[tuple[str, Any, str]]:
    """``(name, requirement, usage)`` for each preset that needs ``module``."""
    users = []
    for name, preset in catalog.strategy_catalog().presets.items():
        for requirement in preset.requires:
            if requirement.module == module:
                kind = "trainer" if "trainer" in preset.strategy else "fabric"
                users.append((name, requirement, f"{constructor(kind)}(strategy='{name}')"))
    for name, plugin in catalog.precision_catalog().presets.items():
        for requirement in getattr(plugin, "requires", ()):
            if requirement.module == module:
                users.append((name, requirement, f"lightning_presets.precision('{name}')"))
    return users


def dependencies_section(*, import_optional: bool = False) -> tuple[dict[str, Any], list[Finding]]:
    info: dict[str, Any] = {}
    found = []
    for module in DEPENDENCIES:
        users = _users(module)
        row: dict[str, Any] = {"used_by": [name for name, _, _ in users]}
        if not import_optional:
            importable = is_importable(module)
            version = installed_version(DEPENDENCIES[module].distribution) if importable else None
            row.update(status="found" if importable else "missing", version=version)
        else:
            with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed logs to stdout at import: keep --json clean
                result = requirements.probe(module)
            row.update(status=result.status, version=result.version, detail=result.detail)
            if users and result.status in ("broken", "incompatible"):
                _, requirement, usage = users[0]
                each = requirements.finding(requirement, result, usage)
                if each is not None:
                    found.append(each)
        if row["status"] == "missing" and users:
            row["install"] = users[0][1].install_command
        info[module] = row
    return info, found


# --- cluster ------------------------------------------------------------------------------------------------


_KUBEFLOW_POD = {"KUBERNETES_PORT", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}
"""A PyTorchJob pod's variables (what KubeflowEnvironment reads, in a Kubernetes pod), which Lightning never detects
(``KubeflowEnvironment.detect`` raises)."""
_DOCTOR_NAMES = {"SLURMEnvironment": "slurm", "TorchElasticEnvironment": "torchelastic", "LSFEnvironment": "lsf",
                 "MPIEnvironment": "mpi", "LightningEnvironment": "none"}  # fmt: skip


def detected_cluster(env: Mapping[str, str]) -> str:
    """The cluster environment Lightning would pick with ``env``'s cluster variables: its connector's own detection
    and constructors (``tools.simulation.lightning.selected_environment``), with what a constructor refused."""
    from lightning_presets.tools.simulation import only_these_variables
    from lightning_presets.tools.simulation.lightning import selected_environment

    variables = {key: value for key, value in env.items() if is_cluster_variable(key)}
    try:
        with only_these_variables(variables):
            selected = selected_environment("trainer")
    except Exception as error:  # Lightning missing or broken: LP721/LP016 say so; the line says what is known
        return f"unknown (Lightning's cluster environments do not import: {type(error).__name__}: {error})"
    detected = _DOCTOR_NAMES.get(selected.environment, selected.environment)
    if selected.refusal is not None:
        return f"{detected} (Lightning refuses this job's variables: {selected.refusal})"
    if detected == "none" and "SLURM_NTASKS" in env:
        return "none (an interactive SLURM allocation: Lightning does not use SLURM)"
    if detected == "none" and set(env) >= _KUBEFLOW_POD:
        return "none (a Kubeflow pod: Lightning does not detect Kubeflow; pass plugins=[KubeflowEnvironment()])"
    return detected


def cluster_section(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    env = os.environ if env is None else env
    variables = {key: value for key, value in sorted(env.items())
                 if is_cluster_variable(key) or key == "CUDA_VISIBLE_DEVICES"}  # fmt: skip
    return {"detected": detected_cluster(env), "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
            "variables": variables}  # fmt: skip


def diagnose(*, import_optional: bool = False) -> Report:
    """Everything the doctor explains, in one report; never starts anything."""
    with warnings.catch_warnings():  # the catalog's warnings are findings of the report
        warnings.simplefilter("ignore", PresetWarning)
        return _diagnose(import_optional=import_optional)


def _diagnose(*, import_optional: bool) -> Report:
    report = Report()
    report.sections["python"] = python_section()
    report.sections["torch"] = torch_section()
    report.sections["gpus"] = gpus_section()
    info, found = machine_section()
    report.sections["machine"] = info
    report.findings.extend(found)
    for name, section in (("lightning", lightning_section), ("autoload", autoload_section),
                          ("registries", registries_section), ("catalog", catalog_section)):  # fmt: skip
        info, found = section()
        report.sections[name] = info
        report.findings.extend(found)
    report.sections["trust"] = trust_section()
    info, found = dependencies_section(import_optional=import_optional)
    report.sections["optional_dependencies"] = info
    report.findings.extend(found)
    report.sections["cluster"] = cluster_section()
    report.sections["variables"] = {"skipped_rules": sorted(skipped_rules())}
    report.findings.extend(variable_findings())
    if report.sections["torch"]["installed"]:
        report.sections["torch"]["cuda_initialized_at_end"] = cuda_initialized()
    return report
