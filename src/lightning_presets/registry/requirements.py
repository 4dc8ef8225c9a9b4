"""Probing optional dependencies: missing, installed but failing to import, or a version pair known not to work.

Nothing here runs when the package is imported or presets are listed: a probe runs only when a strategy
or precision plugin that needs the dependency is built, right before Lightning would import it anyway.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from importlib import metadata
from typing import Literal

from packaging.version import InvalidVersion, Version

from lightning_presets.core import hardware
from lightning_presets.core.codes import Code
from lightning_presets.core.findings import Finding
from lightning_presets.core.preset import Requirement
from lightning_presets.registry import codes

Status = Literal["ok", "missing", "broken", "incompatible"]


@dataclass(frozen=True, slots=True, kw_only=True)
class KnownBadPair:
    """A torch / dependency version combination known not to work, and why."""

    applies: Callable[[Version, Version], bool]
    """``applies(torch_version, dependency_version)``: whether the pair is bad."""
    reason: str
    fix: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Dependency:
    """What the probe knows about one optional dependency."""

    module: str
    """Import name."""
    distribution: str
    """Name on the package index, for ``importlib.metadata``."""
    broken: Code
    """Reported when it is installed but fails to import."""
    pair: Code
    """Reported when its version does not work with the installed torch."""
    pairs: tuple[KnownBadPair, ...] = ()


def _release(version: Version) -> tuple[int, int]:
    return (version.major, version.minor)


def _dependency(name: str, broken: Code, pair: Code, *pairs: KnownBadPair) -> Dependency:
    """A dependency imported and published under one name."""
    return Dependency(module=name, distribution=name, broken=broken, pair=pair, pairs=pairs)


def _precision_dependency(name: str, *pairs: KnownBadPair) -> Dependency:
    """A precision plugin's dependency: its findings are the precision presets' LP601 and LP602."""
    return _dependency(name, codes.PRECISION_DEPENDENCY_BROKEN, codes.PRECISION_DEPENDENCY_VERSION, *pairs)


DEPENDENCIES: dict[str, Dependency] = {
    each.module: each
    for each in (
        # Lightning 2.6 raises ImportError for this pair in DeepSpeedStrategy.__init__: torch 2.6 made
        # torch.load default to weights_only=True, which DeepSpeed checkpoints support from 0.16.0 on.
        _dependency("deepspeed", codes.DEEPSPEED_BROKEN, codes.DEEPSPEED_TORCH_PAIR, KnownBadPair(
            applies=lambda torch, dep: _release(torch) >= (2, 6) and dep < Version("0.16.0"),
            reason="torch 2.6 made `torch.load` default to weights_only=True, which DeepSpeed's checkpoint "
            "loading supports only from 0.16.0 on (Lightning refuses this pair too)",
            fix="pip install -U 'deepspeed>=0.16'",
        )),
        # torch_xla wheels are built against one torch release and pin it (torch_xla 2.5 needs torch 2.5).
        _dependency("torch_xla", codes.TORCH_XLA_BROKEN, codes.TORCH_XLA_TORCH_PAIR, KnownBadPair(
            applies=lambda torch, dep: _release(torch) != _release(dep),
            reason="each torch_xla release is built against the torch release of the same major.minor "
            "version, and its C extension fails against any other",
            fix="install the matching pair, e.g. pip install 'torch~=2.X.0' 'torch_xla[tpu]~=2.X.0'",
        )),
        # Lightning's TransformerEnginePrecision requires transformer_engine>=0.11.0.
        _precision_dependency("transformer_engine", KnownBadPair(
            applies=lambda torch, dep: dep < Version("0.11.0"),
            reason="Lightning's TransformerEnginePrecision needs transformer_engine>=0.11.0",
            fix="pip install -U 'transformer_engine[pytorch]>=0.11'",
        )),
        _precision_dependency("torchao"),
        _precision_dependency("bitsandbytes"),
    )
}  # fmt: skip


@dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    """The state of one optional dependency."""

    module: str
    status: Status
    version: str | None = None
    """Installed distribution version, when the metadata has it."""
    detail: str = ""
    """For ``broken``: the exception and its first line; for ``incompatible``: the reason."""
    fix: str = ""
    simulated: bool = False
    """Whether it was first imported while CUDA was simulated: a failure may then be the simulation's, not the
    installation's (``simulated_cuda(preload=...)`` imports it before, for real)."""


def is_importable(module: str) -> bool:
    """Whether ``import module`` can find it, without importing it (``sys.modules[name] = None`` blocks it)."""
    if module in sys.modules:
        return sys.modules[module] is not None
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def installed_version(distribution: str) -> str | None:
    """The installed distribution's version from its metadata; never imports it."""
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def first_error_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def known_bad_pair(dependency: Dependency, torch_version: str, dependency_version: str) -> KnownBadPair | None:
    """The first encoded pair that matches, or ``None`` (unparsable versions never match)."""
    try:
        torch, dep = Version(torch_version), Version(dependency_version)
    except InvalidVersion:
        return None
    return next((pair for pair in dependency.pairs if pair.applies(torch, dep)), None)


def probe(module: str) -> Probe:
    """Find, version-check, then import ``module``. Importing only happens for a dependency about to be used."""
    if not is_importable(module):
        return Probe(module=module, status="missing")
    dependency = DEPENDENCIES.get(module)
    version = installed_version(dependency.distribution if dependency else module)
    torch_version = installed_version("torch")
    if dependency is not None and version is not None and torch_version is not None:
        pair = known_bad_pair(dependency, torch_version, version)
        if pair is not None:
            return Probe(module=module, status="incompatible", version=version, detail=pair.reason, fix=pair.fix)
    if dependency is None:
        return Probe(module=module, status="ok", version=version)
    try:
        importlib.import_module(module)
    except Exception as exc:  # any failure of the dependency's own import is reported, not raised
        simulation = hardware.current()
        simulated = simulation is not None and module not in simulation.preloaded
        return Probe(module=module, status="broken", version=version, detail=first_error_line(exc), simulated=simulated)
    return Probe(module=module, status="ok", version=version)


def finding(requirement: Requirement, result: Probe, usage: str) -> Finding | None:
    """The finding for one probed requirement; ``usage`` is the user's call, e.g. ``Trainer(strategy='x')``."""
    if result.status == "ok":
        return None
    if result.status == "missing":
        return codes.MISSING_DEPENDENCY.finding(
            f"`{usage}` needs the optional dependency {requirement.module!r}, which is not installed",
            f"install it with: {requirement.install_command}",
        )
    dependency = DEPENDENCIES[requirement.module]
    version = f" {result.version}" if result.version else ""
    if result.status == "broken":
        if result.simulated:  # never blame the installation for what the simulation may have caused
            what = "whose import failed while CUDA was simulated"
            cause = "; the simulation, not the installation, may be the cause"
            fix = (f"import {requirement.module} before simulating CUDA (lightning_presets.tools.simulation."
                   f"simulated_cuda(..., preload=[{requirement.module!r}])), then check again")  # fmt: skip
        else:
            what, cause = "which is installed but fails to import", ""
            fix = (f"reinstall it (pip install --force-reinstall {dependency.distribution}) or fix the error above; "
                   f"`python -c 'import {requirement.module}'` shows the whole traceback")  # fmt: skip
        return dependency.broken.finding(
            f"`{usage}` needs {requirement.module}{version}, {what}: {result.detail}{cause}", fix
        )
    torch_version = installed_version("torch") or "unknown"
    return dependency.pair.finding(
        f"`{usage}`: torch {torch_version} with {requirement.module}{version} is known not to work: {result.detail}",
        result.fix,
    )


def findings(requirements: Iterable[Requirement], usage: str) -> list[Finding]:
    """One finding per requirement that is missing, broken or paired with a torch it does not work with."""
    found = []
    for requirement in requirements:
        each = finding(requirement, probe(requirement.module), usage)
        if each is not None:
            found.append(each)
    return found
