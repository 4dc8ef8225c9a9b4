"""The keyword arguments a strategy takes: one reading for ``lightning_presets.strategy(...)``, registered names and
``lightning-presets check``.

A strategy takes its constructor's named parameters. Lightning's ``FSDPStrategy`` and ``DDPStrategy`` (and XLA's FSDP)
also take ``**kwargs`` and hand them to torch's wrapper when the model is wrapped; those are read off the wrapper's
own signature, less what Lightning passes to it itself (a second ``device_id`` is a ``TypeError`` at wrapping time).
"""

from __future__ import annotations

import difflib
import functools
import importlib
import inspect
from collections.abc import Callable, Iterable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class _Forward:
    """Where a Lightning strategy class forwards its ``**kwargs``."""

    module: str
    wrapper: str
    passed: frozenset[str]
    """The wrapper's parameters Lightning sets itself."""


FORWARDED: dict[str, _Forward] = {
    "FSDPStrategy": _Forward("torch.distributed.fsdp", "FullyShardedDataParallel", frozenset({"module", "device_id"})),
    "DDPStrategy": _Forward("torch.nn.parallel", "DistributedDataParallel", frozenset({"module", "device_ids"})),
    "XLAFSDPStrategy": _Forward(
        "torch_xla.distributed.fsdp", "XlaFullyShardedDataParallel", frozenset({"module", "auto_wrap_policy"})
    ),
}
"""Lightning's strategy classes (by name, in any namespace) whose ``**kwargs`` go to a torch wrapper (the wrapping
call in ``lightning/{pytorch,fabric}/strategies/{fsdp,ddp,xla_fsdp}.py``, lightning 2.6.6)."""


@dataclass(frozen=True, slots=True)
class Accepted:
    """The keywords a strategy class takes."""

    keys: frozenset[str]
    open: bool = False
    """Whether it takes ``**kwargs`` that go where they cannot be read here (any further key is taken as given)."""

    def unknown(self, given: Iterable[str]) -> list[tuple[str, str | None]]:
        """Each given key it does not take, with the closest key it does take (or ``None``)."""
        if self.open:
            return []
        valid = sorted(self.keys)
        return [
            (key, next(iter(difflib.get_close_matches(key, valid, n=1)), None))
            for key in sorted(set(given) - self.keys)
        ]


def _named(function: Callable[..., object], leave_out: Iterable[str] = ()) -> tuple[frozenset[str], bool]:
    """A callable's named parameters, and whether it takes ``**kwargs``."""
    named, takes_kwargs = _signature(function)
    return named - {"self", *leave_out}, takes_kwargs


@functools.cache
def _signature(function: Callable[..., object]) -> tuple[frozenset[str], bool]:
    """A callable's named parameters and whether it takes ``**kwargs``, read once per callable: ``inspect.signature``
    is most of what a preset adds to a ``Trainer``'s construction when it runs on every one."""
    parameters = list(inspect.signature(function).parameters.values())
    named = {p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return frozenset(named), any(p.kind is p.VAR_KEYWORD for p in parameters)


@functools.cache
def _forward(strategy_class: type) -> _Forward | None:
    """Where a strategy class forwards its ``**kwargs``, read from its MRO once per class."""
    return next(
        (FORWARDED[k.__name__] for k in getattr(strategy_class, "__mro__", ()) if k.__name__ in FORWARDED), None
    )


def accepted(strategy_class: type, declared: Iterable[str] = ()) -> Accepted:
    """The keywords ``strategy_class`` takes; ``declared``: forwarded keys a preset names for a wrapper that cannot be
    read here (torch_xla not installed), which then close the set."""
    keys, takes_kwargs = _named(strategy_class)
    if not takes_kwargs:
        return Accepted(keys)
    forward = _forward(strategy_class)
    if forward is not None:
        try:
            wrapper = getattr(importlib.import_module(forward.module), forward.wrapper)
        except (ImportError, AttributeError):
            pass
        else:
            forwarded, open_ended = _named(wrapper, forward.passed)
            return Accepted(keys | forwarded, open=open_ended)
    declared = frozenset(declared)
    return Accepted(keys | declared, open=not declared)
