"""The facts the machine-against-build rules (``guards.machine``, LP120-LP124), ``doctor`` and ``check`` compare
(:func:`installed_build`, :func:`observed_machine`), read without a CUDA context: the GPUs and the driver's CUDA
version from NVML (``core.hardware``, read once per ``CUDA_VISIBLE_DEVICES`` and cached), the build from torch's
compiled-in facts (``torch.version.cuda``, the architecture flags, ``is_nccl_available``; cached). Under a simulation
(``check``, the documented examples) the GPUs are the simulated ones and the driver and build those
:func:`simulating_target` gives; without them nothing about the build is compared (a laptop's torch is not the
cluster's). No rule lives here.
"""

from __future__ import annotations

import contextlib
import functools
import os
import platform
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from lightning_presets.core import hardware
from lightning_presets.core.machine import ASSIGNMENT_VARIABLES, GPU, Build, Machine, nvcc_arch_list

__all__ = ["SimulatedTarget", "arch_list", "installed_build", "observed_machine", "simulating_target", "target_build"]


@dataclass(frozen=True, slots=True)
class SimulatedTarget:
    """The target's driver and torch build, as ``check``'s flags describe them (``None``: not said)."""

    driver_cuda: tuple[int, int] | None = None
    build: Build | None = None


_targets: list[SimulatedTarget] = []


@contextlib.contextmanager
def simulating_target(target: SimulatedTarget) -> Iterator[SimulatedTarget]:
    """Make ``target`` the driver and build the rules compare while the block runs (under a simulated machine)."""
    _targets.append(target)
    try:
        yield target
    finally:
        _targets.pop()


def arch_list(torch: Any) -> list[str]:
    """The architectures the installed torch was built for, without touching the driver: ``get_arch_list()`` where it
    only reads the build's flags; where it asks ``is_available()`` first (torch before 2.9: ``cudaGetDeviceCount``,
    which initialises the driver in this process), the NVCC flags of ``torch.__config__.show()``."""
    if torch.version.cuda is None:
        return []
    get = torch.cuda.get_arch_list
    if "is_available" in getattr(getattr(get, "__code__", None), "co_names", ("is_available",)):
        return nvcc_arch_list(torch.__config__.show())
    return list(get())


@functools.cache
def installed_build() -> Build:
    """The installed torch's build (cached: it cannot change in a process)."""
    import torch
    import torch.distributed as dist

    releases: Mapping[str, Any] = getattr(torch.cuda, "PYTORCH_RELEASES_CODE_CC", {})  # torch 2.13+
    host = "aarch64" if platform.machine().lower() == "aarch64" else "x86_64"  # as torch's _host_arch_key
    return Build(
        version=str(torch.__version__),
        cuda=torch.version.cuda,
        arch_list=tuple(arch_list(torch)),
        nccl=bool(dist.is_available() and dist.is_nccl_available()),
        releases=MappingProxyType({cuda: tuple(sorted(by.get(host, ()))) for cuda, by in releases.items()}),
    )


def _variables(env: Mapping[str, str]) -> Mapping[str, str]:
    names = (*ASSIGNMENT_VARIABLES, "CUDA_VISIBLE_DEVICES")
    return MappingProxyType({name: env[name] for name in names if name in env})


def observed_machine(env: Mapping[str, str] | None = None) -> Machine:
    """This node as the driver reports it (NVML, cached), or the simulated one."""
    env = os.environ if env is None else env
    simulated = hardware.current()
    if simulated is not None:
        target = _targets[-1] if _targets else None
        capability = simulated.capability
        gpus = tuple(GPU(index, capability) for index in range(simulated.count)) if capability else ()
        return Machine(gpus, target.driver_cuda if target else None, _variables(env))
    read = hardware.nvml_gpus(env)
    if read is None:
        return Machine(None, None, _variables(env))
    capabilities = read.capabilities or ((read.capability,) * read.count if read.capability else ())
    gpus = tuple(
        GPU(index, capability, read.names[index] if index < len(read.names) else "",
            read.mig[index] if index < len(read.mig) else False)
        for index, capability in enumerate(capabilities)
    )  # fmt: skip
    return Machine(gpus, read.driver_cuda, _variables(env))


def target_build() -> Build | None:
    """The build to compare: the simulated target's under a simulation (``None`` when not said), else the installed."""
    if hardware.current() is not None:
        return _targets[-1].build if _targets else None
    return installed_build()
