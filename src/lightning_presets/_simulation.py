"""Simulated hardware for construction: a Trainer/Fabric believes it sees N CUDA devices.

The same way Lightning's own tests do it: patch the device count and availability. Nothing here
initializes CUDA, starts a process or creates a process group. Used by ``lightning-presets check``
and by the test suite.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from unittest import mock

_CUDA_MODULES = (
    "lightning.fabric.accelerators.cuda",
    "lightning.pytorch.accelerators.cuda",
    "lightning_fabric.accelerators.cuda",
    "pytorch_lightning.accelerators.cuda",
)


@dataclass(frozen=True, slots=True)
class SimulatedGPU:
    """What the guards may know about the simulated GPUs."""

    count: int
    capability: tuple[int, int] = (9, 0)
    memory_bytes: int | None = None


_active: list[SimulatedGPU] = []


def current() -> SimulatedGPU | None:
    """The innermost active simulation, or ``None`` on real hardware."""
    return _active[-1] if _active else None


@contextlib.contextmanager
def simulated_cuda(
    count: int, capability: tuple[int, int] = (9, 0), memory_bytes: int | None = None
) -> Iterator[SimulatedGPU]:
    """Make Lightning see ``count`` CUDA devices of the given compute capability, without touching CUDA."""
    gpu = SimulatedGPU(count, capability, memory_bytes)
    with contextlib.ExitStack() as stack:
        for name in _CUDA_MODULES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            stack.enter_context(mock.patch.object(module, "num_cuda_devices", return_value=count))
        stack.enter_context(mock.patch("torch.cuda.is_available", return_value=count > 0))
        stack.enter_context(mock.patch("torch.cuda.device_count", return_value=count))
        stack.enter_context(mock.patch("torch.cuda.get_device_capability", return_value=capability))
        stack.enter_context(mock.patch("torch.cuda.is_bf16_supported", return_value=capability >= (8, 0)))
        _active.append(gpu)
        try:
            yield gpu
        finally:
            _active.pop()
