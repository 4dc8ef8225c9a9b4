"""The user's arguments as Lightning reads them: the accelerator through Lightning's own registry and auto/gpu choice,
the precision through its conversion, and every argument of the ``Trainer(...)``/``Fabric(...)`` call being built.

``lightning-presets check`` uses it before anything is built: ``"gpu"`` and ``"tpu"`` mean what Lightning makes of
them, never what a copy of its tables says, and :func:`requested_devices` counts ``devices=`` as written, for the node
check simulates (once a strategy exists, the guards read what Lightning resolved: ``Context.devices_per_node`` and
``Context.device_indices``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
import sys
import warnings
from collections.abc import Callable
from types import CodeType
from typing import Any

from lightning_presets.core.context import accelerator_name
from lightning_presets.core.namespaces import constructor
from lightning_presets.registry import private

_FABRIC = "lightning.fabric"
_CONSTRUCTOR_MODULES: dict[str, tuple[str, ...]] = {
    "trainer": ("lightning.pytorch.trainer.trainer", "pytorch_lightning.trainer.trainer"),
    "fabric": ("lightning.fabric.fabric", "lightning_fabric.fabric"),
}
"""Where each namespace of a kind defines ``Trainer``/``Fabric`` (only the modules already imported are looked at)."""


def accelerator_class(value: Any) -> type | None:
    """Lightning's accelerator class for ``accelerator=value`` (``"auto"`` and ``"gpu"`` as Lightning chooses them on
    this machine, or under the simulation); ``None`` for a name Lightning does not know."""
    if not isinstance(value, str):
        return type(value)
    name = value.lower()
    try:
        if name == "auto":
            name = private.choose_auto_accelerator()
        elif name == "gpu":
            name = private.choose_gpu_accelerator_backend()
    except RuntimeError:  # "No supported gpu backend found!"
        return None
    registry = importlib.import_module(f"{_FABRIC}.accelerators").ACCELERATOR_REGISTRY
    entry = registry[name]["accelerator"] if name in registry else None  # its `get` would instantiate it
    return entry if isinstance(entry, type) else None


def accelerator(value: Any) -> str:
    """``cpu``, ``cuda``, ``mps`` or ``xla`` (or the lower-cased name, if Lightning has no accelerator by that name)."""
    found = accelerator_class(value)
    return str(value).lower() if found is None else accelerator_name(found)


def precision(value: Any) -> str:
    """``precision=value`` as Lightning's connector converts it: ``16`` -> ``16-mixed``, ``"bf16"`` -> ``bf16-mixed``,
    ``None`` -> ``32-true``; a value Lightning refuses comes back as given (as text)."""
    if value is None:
        return "32-true"
    with warnings.catch_warnings():  # Lightning warns that 16 and "bf16" are legacy spellings; the caller reports it
        warnings.simplefilter("ignore")
        try:
            return str(private.unified_precision(value))
        except ValueError:
            return str(value)


def requested_devices(value: Any, accelerator_name: str, visible: int) -> int | None:
    """How many devices per node ``devices=value`` asks for (``"auto"`` and ``-1``: every visible one on CUDA, one
    process on CPU), counted as written, whether or not the node has them; ``None`` for what is not a device count.

    Raises ``ValueError`` for a number with more digits than any device count (``int()`` would refuse it).
    """
    if isinstance(value, str):
        value = value.strip()
        if re.fullmatch(r"-?[0-9]+", value):
            if len(value) > 18:
                raise ValueError(f"devices={value[:12]}... ({len(value)} digits) is not a device count")
            value = int(value)
        elif "," in value:
            return len([part for part in value.split(",") if part.strip()])
    if isinstance(value, (list, tuple)):
        return len(value)
    if value in ("auto", -1):
        return visible if accelerator_name == "cuda" else 1
    return value if type(value) is int and value > 0 else None


def _initializers(kind: str) -> dict[CodeType, Callable[..., Any]]:
    """The ``__init__`` functions (unwrapped from Lightning's ``PL_TRAINER_*`` defaults decorator) of the ``Trainer``
    (kind ``trainer``) or ``Fabric`` (``fabric``) in the Lightning namespaces imported so far, by their code objects."""
    found: dict[CodeType, Callable[..., Any]] = {}
    for module_name in _CONSTRUCTOR_MODULES.get(kind, ()):
        cls = getattr(sys.modules.get(module_name), constructor(kind), None)
        if isinstance(cls, type):
            init = _unwrapped(vars(cls)["__init__"])
            found[init.__code__] = init
    return found


@functools.cache
def _unwrapped(function: Callable[..., Any]) -> Callable[..., Any]:
    """``inspect.unwrap`` of a constructor's ``__init__``, once per function object (a patched ``__init__`` is
    another object, unwrapped afresh)."""
    unwrapped: Callable[..., Any] = inspect.unwrap(function)
    return unwrapped


def call_arguments(kind: str) -> dict[str, Any]:
    """Every argument of the ``Trainer(...)``/``Fabric(...)`` call now being constructed, defaults included, named as
    the installed Lightning's ``__init__`` names them (``PL_TRAINER_*`` defaults applied); read from that call's frame.

    Empty when no such call is on the stack (a strategy built on its own).
    """
    initializers = _initializers(kind)
    frame = sys._getframe(1)
    while frame is not None:
        init = initializers.get(frame.f_code)
        if init is not None:
            values = frame.f_locals
            return {name: values[name] for name in _parameter_names(init) if name in values}
        frame = frame.f_back  # type: ignore[assignment]  # typeshed: f_back is FrameType | None
    return {}


@functools.cache
def _parameter_names(init: Callable[..., Any]) -> tuple[str, ...]:
    """``init``'s parameter names less ``self``, read once per function (``inspect.signature`` on every Trainer was most
    of what the guards added to its construction)."""
    return tuple(name for name in inspect.signature(init).parameters if name != "self")
