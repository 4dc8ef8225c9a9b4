"""Composing a preset's class for one Lightning namespace: a guard head, the preset's mixin, Lightning's class.

The registry does not know the guards: the caller passes the head class (the guards layer owns them). Every
composed class carries the rebuild function pickling needs, so a head never looks the registry up itself.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from lightning_presets.core.namespaces import Namespace, namespace_for_target
from lightning_presets.core.preset import AnyPreset, PrecisionPreset, Preset
from lightning_presets.registry import catalog

_lock = threading.RLock()
_classes: dict[tuple[str, str, str, type], tuple[AnyPreset, type]] = {}


def resolve_class(spec: str, module_name: str, base_name: str, owner: str) -> type:
    """A class named ``spec`` in ``module_name`` (or ``pkg.module:Class``) that subclasses ``module_name.base_name``.

    ``owner`` names who asked, for the error (e.g. "preset 'x' (trainer strategy class)").
    """
    module = importlib.import_module(module_name)
    if ":" in spec:
        other_module, _, attr = spec.partition(":")
        cls = getattr(importlib.import_module(other_module), attr)
    else:
        cls = getattr(module, spec)
    base = getattr(module, base_name)
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise TypeError(f"{owner} names {spec!r}, which is not a {module_name}.{base_name} subclass")
    return cls


def lightning_class(preset: AnyPreset, namespace: Namespace) -> type:
    """The Lightning class a preset builds on in a namespace (``FSDPStrategy``, ``MixedPrecision``, ...)."""
    kind = preset.TYPE
    spec = preset.class_spec(namespace.kind)
    owner = f"{kind.label} {preset.name!r} ({namespace.kind} {kind.noun} class)"
    if spec is None:
        raise TypeError(f"{owner}: the preset has no {namespace.caller} form")
    return resolve_class(spec, f"{namespace.package}.{kind.module}", kind.base, owner)


def compose(preset: AnyPreset, namespace: Namespace, head: type) -> type:
    """The preset's class for a namespace: ``head``, then the preset's mixin, then Lightning's class.

    One class per (type, name, target, head) while the preset stays equal, so an instance pickled for a
    spawned process comes back as the same class even after the catalog was loaded again.
    """
    key = (preset.TYPE.noun, preset.name, namespace.target, head)
    with _lock:
        if key not in _classes or _classes[key][0] != preset:
            base = lightning_class(preset, namespace)
            mixin = preset.mixin_for(namespace.kind)
            bases = (head, mixin, base) if mixin else (head, base)
            name = mixin.__name__ if mixin and preset.TYPE.named_after_mixin else base.__name__
            attributes = {
                "__module__": "lightning_presets",
                "__qualname__": name,
                "__doc__": f"{base.__name__} with the guards of the {preset.name!r} {preset.TYPE.label}.",
                "_lp_preset": preset,
                "_lp_namespace": namespace,
                "_lp_rebuild": staticmethod(rebuild),
                "_lp_rebuild_args": (type(preset), preset.name, namespace.target, head),
            }
            _classes[key] = (preset, type(name, bases, attributes))
        return _classes[key][1]


def rebuild(kind: type[Preset] | type[PrecisionPreset], name: str, target: str, head: type) -> Any:
    """Unpickling: an empty instance of the preset's class, found again through the catalog; pickle restores its
    state next."""
    preset: AnyPreset = catalog.get(kind, name)
    cls: Any = compose(preset, namespace_for_target(target), head)
    return cls.__new__(cls)
