"""``check``'s side of the machine against the build: the target's driver and torch build from its flags
(:func:`target_from`, compared by construction's LP120-LP123 under the simulation), and the check-only rules on the
GPUs the scheduler will assign (LP735, LP736), which a laptop's simulation cannot see at construction: SLURM sets
``CUDA_VISIBLE_DEVICES`` only when the job starts."""

from __future__ import annotations

import dataclasses
from types import MappingProxyType

from lightning_presets.core.findings import Finding, UsageError
from lightning_presets.core.machine import Build, assigned, mig_instances, version_tuple
from lightning_presets.core.rules import Problem, Rule, rule, run_rules
from lightning_presets.inspection.machine import SimulatedTarget, installed_build
from lightning_presets.tools.check.request import COMMAND as CHECK
from lightning_presets.tools.check.target import Target


def _releases() -> dict[str, tuple[int, ...]]:
    """torch's own table of its release's CUDA builds and their capabilities on this host (torch 2.13+; else empty)."""
    return dict(installed_build().releases)


def target_from(
    driver_cuda: str | None = None,
    torch_cuda: str | None = None,
    arch_list: str | None = None,
    without_nccl: bool = False,
) -> SimulatedTarget:
    """The target's driver and torch build as ``check``'s flags give them (``--driver-cuda``, ``--torch-cuda``,
    ``--torch-arch-list``, ``--torch-without-nccl``). Without ``--torch-cuda`` or ``--torch-arch-list``, the build is
    the installed torch's when it is a CUDA build (a cluster's login node), else none is compared."""
    driver = version_tuple(driver_cuda)
    if driver_cuda is not None and driver is None:
        raise UsageError(f"--driver-cuda {driver_cuda!r} is not a CUDA version such as 12.2")
    installed = installed_build()
    if torch_cuda is None and arch_list is None:
        if installed.cuda is None:
            return SimulatedTarget(driver, None)
        build = dataclasses.replace(installed, nccl=False) if without_nccl else installed
        return SimulatedTarget(driver, build)
    cuda = torch_cuda or installed.cuda
    if cuda is None or version_tuple(cuda) is None:
        raise UsageError("--torch-arch-list needs --torch-cuda X.Y (the CUDA version of the target's torch build)")
    if arch_list is not None:
        arches = tuple(each.strip() for each in arch_list.split(",") if each.strip())
    else:
        codes = _releases().get(cuda)
        if codes is None:
            known = ", ".join(sorted(_releases())) or "none in this torch"
            raise UsageError(
                f"--torch-cuda {cuda}: torch {installed.version} lists no such CUDA build of its release (it lists "
                f"{known}); give the build's architectures with --torch-arch-list sm_80,sm_90,..."
            )
        arches = tuple(f"sm_{code}" for code in codes)
    base = installed.version.split("+")[0]
    build = Build(version=f"{base}+cu{cuda.replace('.', '')}", cuda=cuda, arch_list=arches, nccl=not without_nccl,
                  releases=MappingProxyType(_releases()))  # fmt: skip
    return SimulatedTarget(driver, build)


_EVERY_VISIBLE = (None, "auto", -1, "-1")
"""``devices=`` values by which Lightning takes every visible GPU (not given: Trainer's and Fabric's ``"auto"``)."""


def _on_cuda(t: Target) -> bool:
    return t.accelerator in ("cuda", "gpu")


@rule(
    "LP735", "error", "check", "SLURM assigns fewer GPUs than devices",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --cluster slurm --env SLURM_STEP_GPUS=0,1",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 2 --cluster slurm --env SLURM_STEP_GPUS=0,1",
    evidence="runtime: Lightning raises MisconfigurationException when devices exceed the GPUs CUDA_VISIBLE_DEVICES "
    "leaves",
)  # fmt: skip
def slurm_assigns_the_devices(t: Target) -> Problem | None:
    """The job's ``CUDA_VISIBLE_DEVICES`` is SLURM's to set (to the GPUs it assigned), unless ``--env`` gives it;
    ``devices='auto'`` (``-1``, or none given) then takes every GPU SLURM left visible, whatever the simulated node's
    count."""
    if not _on_cuda(t) or "CUDA_VISIBLE_DEVICES" in t.env or t.devices_argument in _EVERY_VISIBLE:
        return None
    found = assigned(t.env)
    if found is None or t.devices is None:  # devices given and resolved to a count: never None here
        return None
    variable, count = found
    if t.devices <= count:
        return None
    return Problem(
        f"{t.call(t.devices_part)}: {variable}={t.env[variable]!r} assigns {count} GPU(s) on each node, and SLURM sets "
        f"CUDA_VISIBLE_DEVICES to them, so {t.devices} devices are more than the job's processes see: Lightning "
        "raises MisconfigurationException ('You requested gpu: ... But your machine only has: ...') when it builds "
        "the Trainer",
        f"set devices={count}, or ask SLURM for {t.devices} GPU(s) per node (#SBATCH --gpus-per-node={t.devices}, "
        "not --gpus-per-task=1 with several tasks a node)",
    )


@rule(
    "LP736", "warning", "check", "several MIG instances listed for one process",
    fails=f"{CHECK} --accelerator cuda --gpus 2 --devices 2 --env CUDA_VISIBLE_DEVICES=MIG-1a2b,MIG-3c4d",
    fixed=f"{CHECK} --accelerator cuda --gpus 1 --devices 1 --env CUDA_VISIBLE_DEVICES=MIG-1a2b",
)  # fmt: skip
def one_mig_instance(t: Target) -> Problem | None:
    """NVIDIA's MIG guide ("CUDA device enumeration"): a CUDA process enumerates one MIG device, whatever
    ``CUDA_VISIBLE_DEVICES`` lists; no GPU here shows it run, so a warning."""
    listed = mig_instances(t.env.get("CUDA_VISIBLE_DEVICES"))
    if not _on_cuda(t) or len(listed) < 2 or t.devices is None or t.devices < 2:
        return None
    return Problem(
        f"{t.call(t.devices_part)}: CUDA_VISIBLE_DEVICES lists {len(listed)} MIG instances, and a CUDA process "
        "enumerates only the first of them (NVIDIA's MIG user guide, CUDA device enumeration): torch sees 1 device, "
        f"so {t.devices} devices are refused by Lightning on the node",
        "give each process one MIG instance: devices=1 and one process per instance (launch them with torchrun or "
        "SLURM tasks, each with its own CUDA_VISIBLE_DEVICES=MIG-...), or use whole GPUs",
    )


MACHINE_CHECK_RULES: tuple[Rule, ...] = (slurm_assigns_the_devices, one_mig_instance)


def machine_findings(target: Target) -> list[Finding]:
    return run_rules(MACHINE_CHECK_RULES, "check", target)


__all__ = ["MACHINE_CHECK_RULES", "machine_findings", "target_from"]
