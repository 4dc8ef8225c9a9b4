"""Stand-ins for what cannot exist on a CPU machine: torch_xla (a TPU host), Transformer Engine, Apple MPS; and a
CPU-only torch build where a CUDA build is installed.

Each is just enough for Lightning to construct a ``Trainer``/``Fabric`` with it, the way Lightning's own tests
simulate them; nothing runs on them. The examples engine (``tools.examples``) applies them when a rule's
:class:`~lightning_presets.core.codes.Setting` names them.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any
from unittest import mock

from lightning_presets.registry import private

XLA_DEVICES = 8
_XLA_MODULES = (
    "torch_xla", "torch_xla.core", "torch_xla.core.xla_model", "torch_xla.distributed", "torch_xla.distributed.fsdp",
    "torch_xla.distributed.fsdp.wrap", "torch_xla.experimental", "torch_xla.runtime",
)  # fmt: skip
_LIGHTNING_XLA = (
    "lightning.fabric.accelerators.xla", "lightning.fabric.plugins.environments.xla", "lightning.fabric.plugins.io.xla",
    "lightning.fabric.plugins.precision.xla", "lightning.fabric.strategies.launchers.xla",
    "lightning.fabric.strategies.xla_fsdp",
)  # fmt: skip
_MPS_MODULES = ("lightning.fabric.accelerators.mps", "lightning.pytorch.accelerators.mps")


@contextlib.contextmanager
def replaced_modules(modules: dict[str, Any]) -> Iterator[None]:
    """``sys.modules[name] = module`` for each entry, restoring exactly those entries afterwards.

    (``mock.patch.dict(sys.modules)`` would also drop every module imported meanwhile, and a later import would
    then create a second copy of its classes.)
    """
    saved = {name: sys.modules.get(name, _ABSENT) for name in modules}
    sys.modules.update(modules)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is _ABSENT:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


_ABSENT: Any = object()


def _returning(value: object) -> Callable[..., object]:
    def probe(*args: object, **kwargs: object) -> object:
        return value

    return probe


@contextlib.contextmanager
def _torch_xla() -> Iterator[None]:
    """A TPU host of :data:`XLA_DEVICES` devices: a torch_xla module stand-in and Lightning's XLA flags on."""
    torch_xla = mock.MagicMock(name="torch_xla")
    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.dict(os.environ))  # XLAPrecision sets XLA_USE_BF16 / XLA_USE_F16
        stack.enter_context(replaced_modules(dict.fromkeys(_XLA_MODULES, torch_xla)))
        for name in _LIGHTNING_XLA:
            module = importlib.import_module(name)
            for flag in private.XLA_FLAGS:
                if hasattr(module, flag):
                    stack.enter_context(mock.patch.object(module, flag, True))
        accelerator: Any = importlib.import_module("lightning.fabric.accelerators.xla").XLAAccelerator
        stack.enter_context(mock.patch.object(accelerator, "is_available", staticmethod(_returning(True))))
        stack.enter_context(mock.patch.object(accelerator, "auto_device_count", staticmethod(_returning(XLA_DEVICES))))
        yield


class _DelayedScaling:
    """Stands in for ``transformer_engine.common.recipe.DelayedScaling``."""

    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


@contextlib.contextmanager
def _transformer_engine() -> Iterator[None]:
    """Transformer Engine's modules, enough for Lightning's ``TransformerEnginePrecision`` constructor."""
    recipe = types.ModuleType("transformer_engine.common.recipe")
    recipe.DelayedScaling = _DelayedScaling  # type: ignore[attr-defined]  # a module attribute set at run time
    modules = {
        "transformer_engine": types.ModuleType("transformer_engine"),
        "transformer_engine.common": types.ModuleType("transformer_engine.common"),
        "transformer_engine.common.recipe": recipe,
        "transformer_engine.pytorch": types.ModuleType("transformer_engine.pytorch"),
    }
    with contextlib.ExitStack() as stack:
        stack.enter_context(replaced_modules(modules))
        module = importlib.import_module("lightning.fabric.plugins.precision.transformer_engine")
        stack.enter_context(mock.patch.object(module, private.TRANSFORMER_ENGINE_FLAG, True))
        yield


@contextlib.contextmanager
def _mps() -> Iterator[None]:
    """An Apple MPS device Lightning believes in (one; nothing ever runs on it)."""
    with contextlib.ExitStack() as stack:
        for name in _MPS_MODULES:
            accelerator: Any = importlib.import_module(name).MPSAccelerator
            stack.enter_context(mock.patch.object(accelerator, "is_available", staticmethod(_returning(True))))
        yield


@contextlib.contextmanager
def _cpu_only_torch() -> Iterator[None]:
    """The installed torch reads as a CPU-only build (no CUDA, no NCCL), whatever it was built with."""
    import torch
    import torch.distributed as dist

    with (
        mock.patch.object(torch.version, "cuda", None),
        mock.patch.object(torch.version, "hip", None),
        mock.patch.object(dist, "is_nccl_available", _returning(False)),
    ):
        yield


STAND_INS: dict[str, Callable[[], contextlib.AbstractContextManager[None]]] = {
    "cpu_only_torch": _cpu_only_torch,
    "torch_xla": _torch_xla,
    "transformer_engine": _transformer_engine,
    "mps": _mps,
}
"""What can be simulated, by the name a :class:`~lightning_presets.core.codes.Setting` uses."""


@contextlib.contextmanager
def standing_in(*names: str) -> Iterator[None]:
    """Every named stand-in active for the duration of the block; ``KeyError`` for a name there is none for."""
    with contextlib.ExitStack() as stack:
        for name in names:
            stack.enter_context(STAND_INS[name]())
        yield
