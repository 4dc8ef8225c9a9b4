"""The machine against the torch build: pure comparisons of what the driver reports (NVML, no CUDA context) and what
the scheduler assigned with what the installed torch was built for.

Nothing here reads the machine or imports torch: a :class:`Machine` and a :class:`Build` are passed in as data
(``inspection.machine`` reads them, ``check`` simulates them), and each comparison returns a :class:`Verdict` with the
fix. ``doctor`` prints every verdict, construction (``guards.machine``) and ``check`` report the ones that are off.

What each comparison knows and how:

- kernels: a GPU runs a torch build's kernels when the build has a cubin of its major and a minor not above its own
  (``sm_86`` runs on 8.9; ``sm_90a`` only on 9.0), or PTX (``compute_XY``) of a capability not above its own, which the
  driver compiles at the first start (``core.hardware.has_kernels_for``). torch's own rule
  (``torch.cuda._check_capability``, run at CUDA's initialisation) warns for a GPU without a cubin of its major; the
  tests run it under simulation against these verdicts.
- driver: NVIDIA's minor-version compatibility runs a CUDA 12.x runtime (torch's wheels bring theirs) on any driver
  of CUDA 12; a driver of an older major does not start it.
- NCCL: torch's ``init_process_group("nccl")`` raises ``RuntimeError: Distributed package doesn't have NCCL built in``
  on a build without NCCL (executed on this project's CPU-only torch).
- assignment: SLURM writes the GPUs it assigned a job or step in ``SLURM_STEP_GPUS``/``SLURM_JOB_GPUS`` (and
  ``GPU_DEVICE_ORDINAL``), their number in ``SLURM_GPUS_ON_NODE``, and sets ``CUDA_VISIBLE_DEVICES`` to them; CUDA
  enumerates one MIG instance per process, whatever ``CUDA_VISIBLE_DEVICES`` lists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal

from lightning_presets.core.hardware import has_kernels_for

Status = Literal["ok", "warning", "error", "unknown"]
WHEEL_INDEX = "https://download.pytorch.org/whl"
ASSIGNMENT_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "GPU_DEVICE_ORDINAL", "SLURM_GPUS_ON_NODE")
"""What a scheduler says it assigned this job on this node, in the order read: SLURM's lists of GPU indices (the
step's first), then the count."""
_EMPTY: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class GPU:
    """One GPU the process would use, as the driver describes it."""

    index: int
    """Its CUDA index in this process."""
    capability: tuple[int, int]
    name: str = ""
    mig: bool = False
    """Whether it is a MIG instance (or a GPU in MIG mode)."""


@dataclass(frozen=True, slots=True)
class Machine:
    """What the driver and the scheduler say of this node."""

    gpus: tuple[GPU, ...] | None
    """The GPUs this process would use (``CUDA_VISIBLE_DEVICES`` applied); ``None`` when nothing could be read."""
    driver_cuda: tuple[int, int] | None = None
    """The newest CUDA version the driver supports (``nvidia-smi``'s "CUDA Version"); ``None`` when unknown."""
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """``CUDA_VISIBLE_DEVICES`` and the scheduler's GPU variables (:data:`ASSIGNMENT_VARIABLES`)."""


@dataclass(frozen=True, slots=True)
class Build:
    """What the installed torch was built for, read from torch without a CUDA context."""

    version: str
    cuda: str | None
    """``torch.version.cuda`` (``"12.6"``); ``None`` for a CPU or ROCm build."""
    arch_list: tuple[str, ...] = ()
    """The architectures it carries code for (``sm_80``, ``sm_90a``, ``compute_90``)."""
    nccl: bool = False
    """``torch.distributed.is_nccl_available()``."""
    releases: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    """torch's own table of the CUDA builds of its release and the capabilities each is built for, on this host's
    architecture (``torch.cuda.PYTORCH_RELEASES_CODE_CC``; empty where torch has none): the fix names one of them."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """One comparison: what was compared, how it came out, why and the fix."""

    check: Literal["kernels", "driver", "nccl", "assignment"]
    status: Status
    subject: str
    """What it is about: ``GPU 0`` (or ``GPUs 0-7``), ``driver``, ``backend``, ``CUDA_VISIBLE_DEVICES``."""
    message: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"check": self.check, "status": self.status, "subject": self.subject, "message": self.message,
                "fix": self.fix}  # fmt: skip


def capability_text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]} (sm_{capability[0]}{capability[1]})"


def version_tuple(text: str | None) -> tuple[int, int] | None:
    """``"12.6"`` as ``(12, 6)``; ``None`` for what is not such a version."""
    if not text:
        return None
    parts = text.strip().split(".")
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except ValueError:
        return None


def nvcc_arch_list(config: str) -> list[str]:
    """The architectures of ``torch.__config__.show()``'s ``NVCC architecture flags``
    (``-gencode;arch=compute_90,code=sm_90;-gencode;arch=compute_90,code=compute_90``) as ``get_arch_list()`` names
    them (``sm_90``, ``compute_90``), in order, once each; empty without that line (a CPU build)."""
    found: list[str] = []
    for line in config.splitlines():
        if "NVCC architecture flags" not in line:
            continue
        for code in re.findall(r"code=\[?([\w,]+)\]?", line):
            found.extend(each for each in code.split(",") if each and each not in found)
    return found


def cubins(arch_list: Sequence[str]) -> list[str]:
    return [arch for arch in arch_list if arch.startswith("sm_")]


def kernels_for(capability: tuple[int, int], arch_list: Sequence[str]) -> Literal["cubin", "ptx", "none"] | None:
    """How a GPU of ``capability`` runs a build for ``arch_list``: its own ``cubin``, ``ptx`` the driver compiles at
    the first start, or ``none``; ``None`` when the list is empty (nothing to compare)."""
    if not arch_list:
        return None
    if has_kernels_for(capability, cubins(arch_list)):
        return "cubin"
    return "ptx" if has_kernels_for(capability, arch_list) else "none"


def _span(arch_list: Sequence[str]) -> str:
    built = cubins(arch_list) or list(arch_list)
    return built[0] if len(built) == 1 else f"{built[0]}..{built[-1]}"


def _subject(indices: Sequence[int]) -> str:
    if len(indices) == 1:
        return f"GPU {indices[0]}"
    contiguous = list(indices) == list(range(indices[0], indices[0] + len(indices)))
    return f"GPUs {indices[0]}-{indices[-1]}" if contiguous else f"GPUs {', '.join(map(str, indices))}"


def _build_name(build: Build) -> str:
    return f"this torch {build.version}" + (f" (CUDA {build.cuda})" if build.cuda and "+" not in build.version else "")


def builds_for(capability: tuple[int, int], build: Build) -> list[str]:
    """torch's CUDA builds of this release (its own table) with kernels for ``capability``, oldest CUDA first."""
    found = [
        cuda for cuda, codes in build.releases.items()
        if has_kernels_for(capability, [f"sm_{code}" for code in codes])
    ]  # fmt: skip
    return sorted(found, key=lambda cuda: version_tuple(cuda) or (0, 0))


def install_line(cuda: str, build: Build) -> str:
    base = build.version.split("+")[0]
    index = f"{WHEEL_INDEX}/nightly" if "dev" in base else WHEEL_INDEX
    return f"pip install torch=={base} --index-url {index}/cu{cuda.replace('.', '')}"


def _kernel_fix(capability: tuple[int, int], build: Build) -> str:
    builds = builds_for(capability, build)
    if builds:
        return f"install a build for CUDA {builds[0]} ({install_line(builds[0], build)})"
    return (
        f"install a torch build whose torch.cuda.get_arch_list() covers sm_{capability[0]}{capability[1]} (see "
        "https://pytorch.org/get-started/locally/), or build torch with TORCH_CUDA_ARCH_LIST including "
        f"{capability[0]}.{capability[1]}"
    )


def kernel_verdicts(machine: Machine, build: Build) -> list[Verdict]:
    """Each kind of GPU against the build's architectures: ``ok`` with a cubin, ``warning`` when only PTX runs (the
    driver compiles every kernel at the first start, and only a driver at least as new as the build's CUDA can) or
    when nothing runs (torch warns at CUDA's initialisation, and the first kernel fails)."""
    if not machine.gpus or build.cuda is None or not build.arch_list:
        return []
    by_capability: dict[tuple[int, int], list[GPU]] = {}
    for gpu in machine.gpus:
        by_capability.setdefault(gpu.capability, []).append(gpu)
    verdicts = []
    for capability, gpus in sorted(by_capability.items()):
        subject = _subject([gpu.index for gpu in gpus])
        named = f" ({gpus[0].name})" if gpus[0].name else ""
        kind = kernels_for(capability, build.arch_list)
        head = f"{subject}{named}: compute capability {capability_text(capability)}"
        if kind == "cubin":
            verdicts.append(Verdict("kernels", "ok", subject, f"{head}; {_build_name(build)} has its kernels"))
        elif kind == "ptx":
            ptx = [arch for arch in build.arch_list if arch.startswith("compute_")]
            verdicts.append(Verdict(
                "kernels", "warning", subject,
                f"{head}; {_build_name(build)} has kernels for {_span(build.arch_list)} and runs on it only through "
                f"its PTX ({', '.join(ptx)}), which the driver compiles for this GPU at the first start of every "
                "process (minutes, cached in ~/.nv/ComputeCache) and only when the driver is at least as new as "
                f"CUDA {build.cuda}",
                _kernel_fix(capability, build),
            ))  # fmt: skip
        else:
            verdicts.append(Verdict(
                "kernels", "warning", subject,
                f"{head}; {_build_name(build)} has kernels for {_span(build.arch_list)} and none this GPU runs: torch "
                "warns when CUDA starts, and the first CUDA kernel fails with 'no kernel image is available for "
                "execution on the device'",
                _kernel_fix(capability, build),
            ))  # fmt: skip
    return verdicts


def driver_verdict(machine: Machine, build: Build) -> Verdict | None:
    """The driver's CUDA version against the build's: a runtime of CUDA X.y starts on any driver of CUDA X
    (minor-version compatibility); ``None`` when there is nothing to compare."""
    built = version_tuple(build.cuda)
    driver = machine.driver_cuda
    if built is None or driver is None:
        return None
    driver_text, built_text = f"{driver[0]}.{driver[1]}", f"{built[0]}.{built[1]}"
    if driver >= built:
        return Verdict("driver", "ok", "driver", f"the driver supports CUDA {driver_text}; torch was built with "
                       f"CUDA {built_text}")  # fmt: skip
    if driver[0] == built[0]:
        return Verdict("driver", "ok", "driver", f"the driver supports CUDA {driver_text}; torch was built with CUDA "
                       f"{built_text}: the same major, which NVIDIA's minor-version compatibility runs (PTX of this "
                       "build cannot be compiled by this driver)")  # fmt: skip
    return Verdict(
        "driver", "warning", "driver",
        f"the driver supports CUDA {driver_text} and torch {build.version} was built with CUDA {built_text}: a CUDA "
        f"{built[0]} runtime needs a driver of CUDA {built[0]} or newer (NVIDIA's compatibility covers newer minors of "
        "one major only, or a datacenter GPU with the cuda-compat package); torch's CUDA initialisation refuses an "
        "older driver ('The NVIDIA driver on your system is too old')",
        f"upgrade the NVIDIA driver to one that supports CUDA {built_text}, or install a torch built for CUDA "
        f"{driver[0]}.x or older (https://pytorch.org/get-started/previous-versions/ lists the index of each)",
    )  # fmt: skip


def uses_nccl(backend: str | None) -> bool:
    """Whether a process-group backend (``nccl``, ``cpu:gloo,cuda:nccl``) asks for NCCL."""
    return backend is not None and any(part.rpartition(":")[2].strip().lower() == "nccl" for part in backend.split(","))


def nccl_verdict(backend: str | None, build: Build) -> Verdict | None:
    """An NCCL backend against a build without NCCL: torch's ``init_process_group`` raises."""
    if not uses_nccl(backend):
        return None
    if build.nccl:
        return Verdict("nccl", "ok", "backend", f"process group backend {backend!r}: this torch has NCCL")
    kind = f"CUDA {build.cuda} build" if build.cuda else "CPU-only build"
    return Verdict(
        "nccl", "error", "backend",
        f"process group backend {backend!r}, but torch {build.version} ({kind}) was built without NCCL "
        "(torch.distributed.is_nccl_available() is False): init_process_group raises RuntimeError \"Distributed "
        "package doesn't have NCCL built in\" on every rank",
        "install a Linux CUDA build of torch (its wheels ship NCCL), or use process_group_backend='gloo'",
    )  # fmt: skip


# --- what the scheduler assigned, what the process sees --------------------------------------------------------


def _indices(raw: str) -> list[str]:
    """SLURM's GPU list (``0,1,2``; ranges ``0-3`` as some versions write them) as its entries."""
    entries: list[str] = []
    for part in (each.strip() for each in raw.split(",")):
        first, dash, last = part.partition("-")
        if dash and first.isdigit() and last.isdigit() and int(first) <= int(last):
            entries.extend(str(number) for number in range(int(first), int(last) + 1))
        elif part:
            entries.append(part)
    return entries


def assigned(env: Mapping[str, str]) -> tuple[str, int] | None:
    """The scheduler's assignment of GPUs on this node: ``(variable, count)``, or ``None`` when none says.

    SLURM writes ``NoDevFiles`` (or nothing) when the job has no GPUs: that is an assignment of none."""
    for name in ASSIGNMENT_VARIABLES:
        raw = env.get(name)
        if raw is None:
            continue
        if name == "SLURM_GPUS_ON_NODE":
            try:
                return name, int(raw.strip())
            except ValueError:
                continue
        if raw.strip() in ("", "NoDevFiles"):
            return name, 0
        return name, len(_indices(raw))
    return None


def mig_instances(raw: str | None) -> list[str]:
    """The MIG instances ``CUDA_VISIBLE_DEVICES`` names (``MIG-<uuid>`` or ``MIG-GPU-<uuid>/gi/ci``)."""
    return [entry.strip() for entry in (raw or "").split(",") if entry.strip().startswith("MIG-")]


def assignment_verdict(machine: Machine, devices: int | None) -> Verdict | None:
    """The scheduler's assignment against the GPUs the process sees and the ``devices`` it asks for: a warning when
    the job uses GPUs the scheduler did not assign it (SLURM did not narrow ``CUDA_VISIBLE_DEVICES``, or something
    widened it): they may be another job's. ``None`` when no scheduler variable says anything."""
    found = assigned(machine.env)
    if found is None or machine.gpus is None:
        return None
    variable, count = found
    seen = len(machine.gpus)
    visible = machine.env.get("CUDA_VISIBLE_DEVICES")
    shown = "unset" if visible is None else repr(visible)
    using = devices if devices is not None else seen
    facts = (f"{variable}={machine.env[variable]!r} assigns {count} GPU(s) on this node; CUDA_VISIBLE_DEVICES={shown} "
             f"leaves this process {seen}")  # fmt: skip
    if using <= count:
        return Verdict("assignment", "ok", "CUDA_VISIBLE_DEVICES", f"{facts}; the job uses {using}")
    return Verdict(
        "assignment", "warning", "CUDA_VISIBLE_DEVICES",
        f"{facts}, and the job uses {using}: {using - count} of them were not assigned to this job and may be "
        "another job's (SLURM narrows CUDA_VISIBLE_DEVICES to the assigned GPUs when it constrains devices; here it "
        "did not, or the script changed it)",
        f"set devices={count}, or ask the scheduler for {using} GPU(s) per node (#SBATCH --gpus-per-node={using}) and "
        "leave CUDA_VISIBLE_DEVICES as SLURM sets it",
    )  # fmt: skip


def cpu_build_verdict(machine: Machine, build: Build, hip: bool = False) -> Verdict | None:
    """GPUs the driver lists beside a CPU-only build of torch, which cannot use them: ``accelerator='auto'`` trains on
    the CPU, ``accelerator='cuda'`` is refused by Lightning."""
    if not machine.gpus or build.cuda is not None or hip:
        return None
    return Verdict(
        "kernels", "warning", _subject([gpu.index for gpu in machine.gpus]),
        f"the driver lists {len(machine.gpus)} GPU(s), but torch {build.version} is a CPU-only build: it cannot use "
        "them (accelerator='auto' trains on the CPU)",
        _cuda_build_fix(machine, build),
    )  # fmt: skip


def _cuda_build_fix(machine: Machine, build: Build) -> str:
    """The newest of torch's CUDA builds of this release that the driver starts and that has kernels for every GPU."""
    fitting = [
        cuda for cuda in builds_for(min(gpu.capability for gpu in machine.gpus or ()), build)
        if all(cuda in builds_for(gpu.capability, build) for gpu in machine.gpus or ())
        and (machine.driver_cuda is None or (version_tuple(cuda) or (99, 0))[0] <= machine.driver_cuda[0])
    ]  # fmt: skip
    if fitting:
        return f"install a CUDA build of torch: {install_line(fitting[-1], build)}"
    return "install a CUDA build of torch for the CUDA version nvidia-smi reports or older (https://pytorch.org/get-started/locally/)"


def nccl_summary(build: Build) -> Verdict:
    """What the doctor says of NCCL without a job: present, absent from a CUDA build (a job on CUDA defaults to it),
    or a CPU-only build's gloo."""
    if build.nccl:
        return Verdict("nccl", "ok", "NCCL", f"torch {build.version} has NCCL (the default backend on CUDA)")
    if build.cuda is None:
        return Verdict("nccl", "ok", "NCCL", f"torch {build.version} is a CPU-only build: gloo only, no NCCL")
    return Verdict(
        "nccl", "warning", "NCCL",
        f"torch {build.version} (CUDA {build.cuda}) was built without NCCL: a job on CUDA uses NCCL by default and its "
        "init_process_group raises RuntimeError \"Distributed package doesn't have NCCL built in\"",
        "install a Linux CUDA build of torch (its wheels ship NCCL), or pass process_group_backend='gloo'",
    )  # fmt: skip


def compare(machine: Machine, build: Build, *, backend: str | None = None, devices: int | None = None) -> list[Verdict]:
    """Every verdict about this machine and build, in the doctor's order (NCCL: against ``backend`` when given, else
    what the build has)."""
    verdicts = kernel_verdicts(machine, build)
    nccl = nccl_verdict(backend, build) if backend is not None else nccl_summary(build)
    for each in (cpu_build_verdict(machine, build), driver_verdict(machine, build), nccl,
                 assignment_verdict(machine, devices)):  # fmt: skip
        if each is not None:
            verdicts.append(each)
    return verdicts
