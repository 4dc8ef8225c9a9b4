"""The GPUs' CUDA compute capability, memory and count, read without initialising CUDA in this process.

A Trainer built in the launching process must not create a CUDA context (forked workers would inherit it),
so what the guards know about the GPUs comes from an active simulation, from torch when CUDA is already
initialised, or from the driver's NVML library (``libnvidia-ml.so.1``), read through ``ctypes`` the way torch
counts devices: NVML never creates a CUDA context. Only where NVML is absent is the capability unknown
(``None``), and the guards say so.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import functools
import os
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

NVML_LIBRARY = "libnvidia-ml.so.1"
"""The NVML shared library every NVIDIA Linux driver installs (found through the dynamic loader's path)."""
_UUID_PREFIXES = ("GPU-", "MIG-")


@dataclass(frozen=True, slots=True)
class SimulatedGPU:
    """What the guards may know about the simulated GPUs."""

    count: int
    capability: tuple[int, int] | None = (9, 0)
    memory_bytes: int | None = None
    preloaded: frozenset[str] = frozenset()
    """Optional modules whose import was attempted before the simulation began: a failure of theirs is real."""


@dataclass(frozen=True, slots=True)
class GPUs:
    """The GPUs this process would use, as NVML reports them."""

    count: int
    capability: tuple[int, int] | None
    """The lowest compute capability among them; ``None`` without GPUs."""
    memory_bytes: int | None
    """The smallest total memory among them; ``None`` without GPUs."""
    names: tuple[str, ...] = ()
    """The driver's name of each, in CUDA's order (``NVIDIA H100 80GB HBM3``); empty where nothing names them."""
    capabilities: tuple[tuple[int, int], ...] = ()
    """The compute capability of each, in CUDA's order; empty where only the lowest is known."""
    mig: tuple[bool, ...] = ()
    """Whether each is a MIG instance (or a GPU in MIG mode), in CUDA's order; empty where unknown."""
    driver_cuda: tuple[int, int] | None = None
    """The newest CUDA version the driver supports (NVML's ``nvmlSystemGetCudaDriverVersion_v2``, as ``nvidia-smi``
    prints it); ``None`` where it could not be read."""


_active: list[SimulatedGPU] = []


def current() -> SimulatedGPU | None:
    """The innermost active simulation, or ``None`` on real hardware."""
    return _active[-1] if _active else None


@contextlib.contextmanager
def simulating(gpu: SimulatedGPU) -> Iterator[SimulatedGPU]:
    """Make ``gpu`` what :func:`current` reports while the block runs (the patching is the caller's)."""
    _active.append(gpu)
    try:
        yield gpu
    finally:
        _active.pop()


# --- CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER, as the CUDA runtime reads them ------------------------------


def _leading_number(text: str) -> int:
    """``strtoul``-like: the leading decimal number of ``text`` (``1gpu`` is 1), ``-1`` when there is none."""
    digits = len(text) - len(text.lstrip("0123456789"))
    return int(text[:digits]) if digits else -1


def visible_positions(raw: str | None, uuids: Sequence[str]) -> list[int]:
    """Which of the devices (in CUDA's order, identified by ``uuids``) ``CUDA_VISIBLE_DEVICES=raw`` selects.

    As the CUDA runtime reads it: unset selects every device; entries are indices or (prefixes of) UUIDs;
    the list stops at the first entry that is invalid, out of range or ambiguous; a repeated device selects none.
    """
    if raw is None:
        return list(range(len(uuids)))
    chosen: list[int] = []
    for entry in (part.strip() for part in raw.split(",")):
        if entry.startswith(_UUID_PREFIXES):
            matches = [position for position, uuid in enumerate(uuids) if uuid.startswith(entry)]
            position = matches[0] if len(matches) == 1 else -1
        else:
            position = _leading_number(entry)
        if position < 0 or position >= len(uuids):
            break
        if position in chosen:
            return []
        chosen.append(position)
    return chosen


# --- NVML through ctypes ----------------------------------------------------------------------------------------


class _PciInfo(ctypes.Structure):
    _fields_ = [  # nvmlPciInfo_t, as nvmlDeviceGetPciInfo_v3 fills it
        ("busIdLegacy", ctypes.c_char * 16),
        ("domain", ctypes.c_uint),
        ("bus", ctypes.c_uint),
        ("device", ctypes.c_uint),
        ("pciDeviceId", ctypes.c_uint),
        ("pciSubSystemId", ctypes.c_uint),
        ("busId", ctypes.c_char * 32),
    ]


class _Memory(ctypes.Structure):
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class NVMLError(RuntimeError):
    """An NVML call returned an error code."""


@dataclass(frozen=True, slots=True)
class _Device:
    uuid: str
    pci: tuple[int, int, int]
    capability: tuple[int, int]
    memory_bytes: int
    name: str = ""
    mig: bool = False


class _NVML:
    """The few NVML calls the guards need; every call checks its return code."""

    def __init__(self, library: Any) -> None:
        self._library = library

    def _call(self, name: str, *args: Any) -> None:
        status = getattr(self._library, name)(*args)
        if status != 0:
            raise NVMLError(f"{name} returned {status}")

    def driver_cuda(self) -> tuple[int, int] | None:
        """The driver's CUDA version (``12020``: 12.2); ``None`` where this NVML lacks the call or it fails."""
        version = ctypes.c_int()
        for name in ("nvmlSystemGetCudaDriverVersion_v2", "nvmlSystemGetCudaDriverVersion"):
            call = getattr(self._library, name, None)
            if call is not None and call(ctypes.byref(version)) == 0 and version.value > 0:
                return version.value // 1000, (version.value % 1000) // 10
        return None

    def devices(self) -> list[_Device]:
        count = ctypes.c_uint()
        self._call("nvmlDeviceGetCount_v2", ctypes.byref(count))
        return [self._device(index) for index in range(count.value)]

    def _device(self, index: int) -> _Device:
        handle = ctypes.c_void_p()
        self._call("nvmlDeviceGetHandleByIndex_v2", ctypes.c_uint(index), ctypes.byref(handle))
        uuid = ctypes.create_string_buffer(96)
        self._call("nvmlDeviceGetUUID", handle, uuid, ctypes.c_uint(96))
        pci = _PciInfo()
        self._call("nvmlDeviceGetPciInfo_v3", handle, ctypes.byref(pci))
        major, minor = ctypes.c_int(), ctypes.c_int()
        self._call("nvmlDeviceGetCudaComputeCapability", handle, ctypes.byref(major), ctypes.byref(minor))
        memory = _Memory()
        self._call("nvmlDeviceGetMemoryInfo", handle, ctypes.byref(memory))
        name = ctypes.create_string_buffer(96)
        get_name = getattr(self._library, "nvmlDeviceGetName", None)  # only doctor and plan read it: optional
        named = get_name is not None and get_name(handle, name, ctypes.c_uint(96)) == 0
        current, pending = ctypes.c_uint(), ctypes.c_uint()
        get_mig = getattr(self._library, "nvmlDeviceGetMigMode", None)  # absent before R450; not supported: no MIG
        mig = get_mig is not None and get_mig(handle, ctypes.byref(current), ctypes.byref(pending)) == 0
        return _Device(
            uuid=uuid.value.decode(errors="replace"),
            pci=(pci.domain, pci.bus, pci.device),
            capability=(major.value, minor.value),
            memory_bytes=memory.total,
            name=name.value.decode(errors="replace") if named else "",
            mig=mig and current.value == 1,
        )


def _load_nvml() -> Any:
    """The NVML library, or ``None`` where there is none (no NVIDIA driver, macOS, a container without it)."""
    try:
        return ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return None


def cuda_order(devices: Sequence[_Device], order: str | None) -> list[_Device]:
    """The devices in the order CUDA numbers them.

    ``CUDA_DEVICE_ORDER=PCI_BUS_ID``: by PCI bus id, as NVML and ``nvidia-smi`` number them. Otherwise CUDA's
    default ``FASTEST_FIRST``, approximated as the highest compute capability first, then by PCI bus id (the
    driver also weighs clocks and multiprocessor counts, which only matters on mixed nodes).
    """
    by_bus = sorted(devices, key=lambda device: device.pci)
    if order == "PCI_BUS_ID":
        return by_bus
    return sorted(by_bus, key=lambda device: (-device.capability[0], -device.capability[1]))


@functools.lru_cache(maxsize=8)
def _read_nvml(visible: str | None, order: str | None) -> GPUs | None:
    library = _load_nvml()
    if library is None:
        return None
    nvml = _NVML(library)
    try:
        nvml._call("nvmlInit_v2")
    except (NVMLError, AttributeError):  # no device, a driver without it, or an NVML too old
        return None
    try:
        devices = cuda_order(nvml.devices(), order)
        driver = nvml.driver_cuda()
    except (NVMLError, AttributeError):
        return None
    finally:
        with contextlib.suppress(NVMLError, AttributeError):
            nvml._call("nvmlShutdown")
    if visible is not None and visible.strip().startswith("MIG-"):
        # CUDA enumerates one MIG instance per process; NVML's devices are the GPUs it is carved from
        in_mig = [device for device in devices if device.mig] or devices
        lowest = min((device.capability for device in in_mig), default=None)
        chosen = [dataclasses.replace(in_mig[0], capability=lowest, mig=True)] if lowest is not None else []
    else:
        chosen = [devices[position] for position in visible_positions(visible, [device.uuid for device in devices])]
    if not chosen:
        return GPUs(count=0, capability=None, memory_bytes=None, driver_cuda=driver)
    return GPUs(
        count=len(chosen),
        capability=min(device.capability for device in chosen),
        memory_bytes=None if any(d.mig for d in chosen) else min(d.memory_bytes for d in chosen),  # a slice of it
        names=tuple(device.name for device in chosen) if all(device.name for device in chosen) else (),
        capabilities=tuple(device.capability for device in chosen),
        mig=tuple(device.mig for device in chosen),
        driver_cuda=driver,
    )


def nvml_gpus(environ: Mapping[str, str] | None = None) -> GPUs | None:
    """The GPUs ``CUDA_VISIBLE_DEVICES`` leaves this process, read from NVML; ``None`` where NVML is absent."""
    env = os.environ if environ is None else environ
    return _read_nvml(env.get("CUDA_VISIBLE_DEVICES"), env.get("CUDA_DEVICE_ORDER"))


def observed_gpus() -> GPUs | None:
    """What is known about the visible GPUs without creating a CUDA context; ``None`` when nothing is.

    An active simulation wins; then torch, when this process has already initialised CUDA; then NVML.
    """
    simulated = current()
    if simulated is not None:
        if simulated.count <= 0:
            return GPUs(count=0, capability=None, memory_bytes=None)
        return GPUs(count=simulated.count, capability=simulated.capability, memory_bytes=simulated.memory_bytes)
    torch: Any = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        count = torch.cuda.device_count()
        if not count:
            return GPUs(count=0, capability=None, memory_bytes=None)
        properties = [torch.cuda.get_device_properties(index) for index in range(count)]
        return GPUs(
            count=count,
            capability=min((int(p.major), int(p.minor)) for p in properties),
            memory_bytes=min(int(p.total_memory) for p in properties),
            names=tuple(str(p.name) for p in properties),
        )
    return nvml_gpus()


def observed_capability() -> tuple[int, int] | None:
    """Lowest compute capability among the visible GPUs, or ``None`` when it cannot be read safely."""
    gpus = observed_gpus()
    return gpus.capability if gpus is not None else None


def has_kernels_for(capability: tuple[int, int], arch_list: Sequence[str]) -> bool | None:
    """Whether a torch built for ``arch_list`` (``torch.cuda.get_arch_list()``: ``sm_80``, ``sm_90a``,
    ``compute_90``; read without a CUDA context) has kernels a GPU of ``capability`` runs: a cubin of its major and a
    minor not above its own (``sm_90a``, arch-specific, only on 9.0 itself), or PTX of a capability not above its own,
    which the driver compiles. ``None`` when the list is empty (a CPU build: nothing to compare)."""
    if not arch_list:
        return None
    for arch in arch_list:
        kind, _, digits = arch.partition("_")
        exact = digits.endswith("a")
        digits = digits.rstrip("af")
        if not digits.isdigit() or len(digits) < 2:
            continue
        built = (int(digits[:-1]), int(digits[-1]))
        if kind == "sm" and (built == capability or (not exact and built[0] == capability[0] and built <= capability)):
            return True
        if kind == "compute" and not exact and built <= capability:
            return True
    return False


def build_note(gpus: GPUs | None, arch_list: Sequence[str]) -> str | None:
    """What the doctor says of the GPUs against the installed torch's build, or ``None`` when nothing is off (or
    nothing is known): a fact of the build (its architecture list), not a run on the GPUs."""
    if gpus is None or not gpus.count or gpus.capability is None:
        return None
    if has_kernels_for(gpus.capability, arch_list) is False:
        major, minor = gpus.capability
        return (
            f"the installed torch has no kernel image for compute capability {major}.{minor} (its "
            f"torch.cuda.get_arch_list(): {' '.join(arch_list)}); install a torch build whose list covers it"
        )
    return None
