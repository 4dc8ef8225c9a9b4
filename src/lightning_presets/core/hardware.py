"""The GPUs' CUDA compute capability and count, read without initialising CUDA in this process.

A Trainer built in the launching process must not create a CUDA context (forked workers would inherit
it), so the capability comes from an active simulation, from torch when CUDA is already initialised, or
from NVML (``pynvml``) when it is installed; otherwise it is unknown (``None``) and the guards say so.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any


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
def simulating(gpu: SimulatedGPU) -> Iterator[SimulatedGPU]:
    """Make ``gpu`` what :func:`current` reports while the block runs (the patching is the caller's)."""
    _active.append(gpu)
    try:
        yield gpu
    finally:
        _active.pop()


def _visible_indices() -> list[int] | None:
    """Physical indices from ``CUDA_VISIBLE_DEVICES``; ``None`` when unset, ``[]`` when UUIDs are used."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    parts = [part.strip() for part in raw.split(",") if part.strip()]
    return [int(part) for part in parts] if all(part.isdigit() for part in parts) else []


def _nvml_capability() -> tuple[int, int] | None:
    try:
        if sys.modules.get("pynvml") is None and importlib.util.find_spec("pynvml") is None:
            return None
        pynvml: Any = importlib.import_module("pynvml")
        pynvml.nvmlInit()
        try:
            indices = _visible_indices()
            if indices is None:
                indices = list(range(pynvml.nvmlDeviceGetCount()))
            capabilities = [
                tuple(pynvml.nvmlDeviceGetCudaComputeCapability(pynvml.nvmlDeviceGetHandleByIndex(index)))
                for index in indices
            ]
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no driver, no device, or an old NVML: the capability stays unknown
        return None
    return min(capabilities) if capabilities else None


def observed_capability() -> tuple[int, int] | None:
    """Lowest compute capability among the visible GPUs, or ``None`` when it cannot be read safely."""
    simulated = current()
    if simulated is not None:
        return simulated.capability if simulated.count > 0 else None
    torch: Any = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        count = torch.cuda.device_count()
        return min(tuple(torch.cuda.get_device_capability(index)) for index in range(count)) if count else None
    return _nvml_capability()
