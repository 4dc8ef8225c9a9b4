"""Composing a preset's class for one Lightning namespace: a guard head, the preset's mixin, Lightning's class.

The registry does not know the guards: the caller passes the head class (the guards layer owns them). Every
composed class carries the rebuild function pickling needs, so a head never looks the registry up itself.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

from lightning_presets.core.findings import Finding, PresetConfigError
from lightning_presets.core.namespaces import Namespace, namespace_for_target
from lightning_presets.core.preset import AnyPreset, PrecisionPreset, Preset
from lightning_presets.registry import catalog, codes

_lock = threading.RLock()
_classes: dict[tuple[str, str, str, type], tuple[AnyPreset, type]] = {}


def resolve_class(spec: str, module_name: str, base_name: str, owner: str, distribution: str | None = None) -> type:
    """A class named ``spec`` in ``module_name`` (or ``pkg.module:Class``) that subclasses ``module_name.base_name``.

    ``owner`` names who asked, for the error (e.g. "preset 'x' from acme-presets 1.0 (trainer strategy class)").
    A spec that does not resolve raises :class:`PresetConfigError` (LP011) blaming the preset's distribution;
    Lightning's own module failing to import is Lightning's error and propagates as it is.
    """
    module = importlib.import_module(module_name)
    base = getattr(module, base_name)
    try:
        if ":" in spec:
            other_module, _, attr = spec.partition(":")
            cls = getattr(importlib.import_module(other_module), attr)
        else:
            cls = getattr(module, spec)
    except KeyboardInterrupt:
        raise
    except BaseException as error:  # the preset's own module may raise anything: the preset is broken, no more
        raise _unresolved(owner, spec, f"does not resolve: {type(error).__name__}: {error}", distribution) from None
    if not (isinstance(cls, type) and issubclass(cls, base)):
        raise _unresolved(owner, spec, f"which is not a {module_name}.{base_name} subclass", distribution)
    return cls


def _unresolved(owner: str, spec: str, why: str, distribution: str | None) -> PresetConfigError:
    skip = f"; skip it meanwhile with LIGHTNING_PRESETS_DENY={distribution}" if distribution else ""
    message = f"{owner} names {spec!r}, {why}" if why.startswith("which") else f"{owner}: {spec!r} {why}"
    return PresetConfigError(
        [
            codes.MALFORMED_PRESET.finding(
                message, f"name a Lightning class (or 'package.module:Class') in the preset's declaration{skip}"
            )
        ]
    )


def lightning_class(preset: AnyPreset, namespace: Namespace) -> type:
    """The Lightning class a preset builds on in a namespace (``FSDPStrategy``, ``MixedPrecision``, ...)."""
    kind = preset.TYPE
    spec = preset.class_spec(namespace.kind)
    source = f" from {preset.distribution} {preset.version}" if preset.distribution else ""
    owner = f"{kind.label} {preset.name!r}{source} ({namespace.kind} {kind.noun} class)"
    if spec is None:
        raise TypeError(f"{owner}: the preset has no {namespace.constructor} form")
    return resolve_class(spec, f"{namespace.package}.{kind.module}", kind.base, owner, preset.distribution)


def unresolved(preset: AnyPreset, namespace: Namespace) -> Finding | None:
    """LP011 when the preset has a form for the namespace's kind whose class does not resolve there."""
    if preset.class_spec(namespace.kind) is None:
        return None
    try:
        lightning_class(preset, namespace)
    except PresetConfigError as error:
        return error.findings[0]
    return None


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
