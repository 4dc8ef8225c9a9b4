"""Precision presets: a catalog of named precision plugins for ``plugins=[...]``, with their guards.

Lightning has no precision registry and refuses strings in ``plugins=``, so a precision preset is
resolved by :func:`precision` into a plugin instance. Presets come from the entry-point group
``lightning_presets.precision``. Guards run three times: on the arguments and the visible hardware when
the plugin is built, at ``Trainer``/``Fabric`` construction across the strategy preset (when the strategy
is a preset), and on the model when the plugin converts it.
"""

from __future__ import annotations

import copy
import difflib
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lightning_presets import _catalog
from lightning_presets._context import Context
from lightning_presets._errors import Finding, PresetConfigError, report
from lightning_presets._namespaces import NAMESPACES, Kind, Namespace, namespace_for_target, resolve_class
from lightning_presets._preset import Requirement
from lightning_presets._rules import Problem, Rule, rule, run_rules

_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True, kw_only=True)
class PrecisionPreset:
    """A named precision plugin configuration, published through ``lightning_presets.precision``."""

    name: str
    """Lower-case name passed to :func:`lightning_presets.precision`."""
    description: str
    """One or two lines: what it is for."""
    plugin: Mapping[str, str]
    """Kind (``trainer``/``fabric``) to a class name in ``<namespace>.plugins.precision``, or ``module:attr``."""
    mixin: type | None = None
    """A plain class placed before the Lightning plugin class (new behaviour, e.g. a ``convert_module``)."""
    init_params: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Default arguments; the keys are also the overrides users may pass."""
    prepare: Callable[[Kind, dict[str, Any]], dict[str, Any]] | None = None
    """Turns the options into the plugin constructor's arguments (e.g. dtype names into ``torch.dtype``)."""
    rules: tuple[Rule, ...] = ()
    """Guards: stage ``options`` on a :class:`PrecisionContext`, stage ``setup`` on it and the model."""
    requires: tuple[Requirement, ...] = ()
    needs_cuda: bool = True
    """Whether it only works on CUDA devices."""
    min_capability: tuple[int, int] | None = None
    """Lowest CUDA compute capability it works on, e.g. ``(8, 9)`` for FP8."""
    capability_reason: str = ""
    """Why, for the message."""
    incompatible: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Strategy family (or preset name) to the reason the combination is known not to work."""
    tested_with: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """Versions its tests ran on and the evidence level reached."""
    distribution: str | None = None
    version: str | None = None

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(kind for kind in ("trainer", "fabric") if kind in self.plugin)

    @property
    def targets(self) -> tuple[str, ...]:
        return tuple(namespace.target for namespace in NAMESPACES if namespace.kind in self.plugin)

    def incompatibility(self, family: str | None, strategy_preset: str, caller: str = "") -> str | None:
        """Why it does not work with a strategy preset: looked up by preset name, ``family:trainer`` (or
        ``family:fabric``), then family."""
        keys = (strategy_preset, f"{family}:{caller.lower()}" if family else None, family)
        return next((self.incompatible[key] for key in keys if key and key in self.incompatible), None)


@dataclass(frozen=True, slots=True, kw_only=True)
class PrecisionContext:
    """What a precision guard sees: the preset's arguments and the visible hardware (never probed by a guard)."""

    preset: str
    target: str
    values: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    """Every argument, defaults included."""
    cuda_devices: int = 0
    """CUDA devices visible to this process (fork-safe count, or the simulation's)."""
    capability: tuple[int, int] | None = None
    """Lowest compute capability among them; ``None`` when unknown."""
    when: str = "built"
    """``built`` (by :func:`precision`) or ``converting`` (the model, in the training process)."""
    requirement: PrecisionPreset | None = None

    def call(self, *keys: str) -> str:
        parts = [repr(self.preset), *(f"{key}={self.values.get(key)!r}" for key in keys)]
        if self.target != "trainer":
            parts.append(f"target={self.target!r}")
        return f"`lightning_presets.precision({', '.join(parts)})`"


def _capability_text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


@rule(
    "LP603", "error", "options", "a CUDA-only precision preset without a CUDA device",
    fails='lightning_presets.precision("fp8-te")   # on a machine without a CUDA GPU',
    fixed='lightning_presets.precision("fp8-te")   # on a machine with an H100',
)  # fmt: skip
def needs_cuda_device(ctx: PrecisionContext) -> Problem | None:
    preset = ctx.requirement
    if preset is None or not preset.needs_cuda or ctx.cuda_devices > 0:
        return None
    return Problem(
        f"{ctx.call()}: the {ctx.preset!r} precision needs a CUDA GPU and this process sees none "
        f"(when the plugin is {ctx.when})",
        "run on a machine with a CUDA GPU; `lightning-presets check` simulates one for validating a "
        "configuration on a laptop",
    )


@rule(
    "LP604", "error", "options", "a GPU whose compute capability is below what the precision needs",
    fails='lightning_presets.precision("fp8-te")   # on an A100 (capability 8.0)',
    fixed='lightning_presets.precision("bf16-fp32-reduce")   # on an A100; FP8 needs an H100/L4/RTX 4090 (8.9+)',
)  # fmt: skip
def capability_sufficient(ctx: PrecisionContext) -> Problem | None:
    preset = ctx.requirement
    if preset is None or preset.min_capability is None or ctx.capability is None or ctx.cuda_devices == 0:
        return None
    if ctx.capability >= preset.min_capability:
        return None
    return Problem(
        f"{ctx.call()}: the GPU has compute capability {_capability_text(ctx.capability)}, and {ctx.preset!r} "
        f"needs {_capability_text(preset.min_capability)} or newer ({preset.capability_reason}); it is refused "
        "rather than silently falling back to 16-bit",
        "use precision='bf16-mixed' (capability 8.0+) or precision='16-mixed' on this GPU, or run on a GPU of "
        f"capability {_capability_text(preset.min_capability)}+",
    )


@rule(
    "LP605", "warning", "options", "the GPU's compute capability could not be read without initialising CUDA",
    fails='lightning_presets.precision("fp8-te")   # CUDA GPU visible, no pynvml, CUDA not initialised',
    fixed="pip install nvidia-ml-py   # then the capability is read through NVML",
)  # fmt: skip
def capability_known(ctx: PrecisionContext) -> Problem | None:
    preset = ctx.requirement
    if preset is None or preset.min_capability is None or ctx.capability is not None or ctx.cuda_devices == 0:
        return None
    return Problem(
        f"{ctx.call()}: the GPU's compute capability is unknown here (reading it would initialise CUDA in this "
        f"process); {ctx.preset!r} needs {_capability_text(preset.min_capability)}+, which is checked again when "
        "the plugin converts the model",
        "install nvidia-ml-py so that the capability is read through NVML, or ignore this warning if the GPUs "
        f"are of capability {_capability_text(preset.min_capability)}+",
    )


HARDWARE_RULES: tuple[Rule, ...] = (needs_cuda_device, capability_sufficient, capability_known)
"""Run for every precision preset, built-in or not; built-in presets also list them so that docs show them."""


def with_hardware_rules(preset: PrecisionPreset) -> tuple[Rule, ...]:
    return (*HARDWARE_RULES, *(each for each in preset.rules if each not in HARDWARE_RULES))


@rule(
    "LP606", "error", "construction", "a CUDA-only precision preset with another accelerator",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cpu", plugins=[lightning_presets.precision('
    '"fp8-torchao")])',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", plugins=[lightning_presets.precision('
    '"fp8-torchao")])',
)  # fmt: skip
def precision_preset_on_cuda(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    if preset is None or not preset.needs_cuda or ctx.accelerator == "cuda":
        return None
    return Problem(
        f"`{ctx.caller}(strategy={ctx.preset!r}, accelerator={ctx.accelerator!r}, plugins=[lightning_presets."
        f"precision({preset.name!r})])`: the {preset.name!r} precision works only on CUDA devices",
        f"use accelerator='cuda', or drop the plugin and pass a precision= that {ctx.accelerator!r} supports",
    )


@rule(
    "LP607", "error", "construction", "a precision preset known not to work with the strategy preset",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", plugins=[lightning_presets.precision('
    '"bf16-fp32-reduce")])',
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", plugins=[lightning_presets.precision('
    '"bf16-fp32-reduce")])',
)  # fmt: skip
def precision_preset_fits_strategy(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    reason = preset.incompatibility(ctx.family, ctx.preset, ctx.caller) if preset is not None else None
    if preset is None or reason is None:
        return None
    return Problem(
        f"`{ctx.caller}(strategy={ctx.preset!r}, plugins=[lightning_presets.precision({preset.name!r})])`: "
        f"this combination is known not to work: {reason}",
        f"use {preset.name!r} with another strategy, or keep strategy={ctx.preset!r} with a precision= it supports",
    )


@rule(
    "LP608", "error", "construction", "a precision preset's GPU capability too low for the Trainer/Fabric",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", plugins=[lightning_presets.precision('
    '"fp8-te")])   # on A100s',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", precision="bf16-mixed")   # on A100s',
)  # fmt: skip
def precision_preset_capability(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    if preset is None or preset.min_capability is None or ctx.gpu_capability is None:
        return None
    if ctx.accelerator != "cuda" or ctx.gpu_capability >= preset.min_capability:
        return None
    return Problem(
        f"`{ctx.caller}(strategy={ctx.preset!r}, plugins=[lightning_presets.precision({preset.name!r})])`: the "
        f"GPUs have compute capability {_capability_text(ctx.gpu_capability)}, {preset.name!r} needs "
        f"{_capability_text(preset.min_capability)}+ ({preset.capability_reason})",
        "pass precision='bf16-mixed' instead of the plugin on these GPUs",
    )


PRECISION_CROSS_RULES: tuple[Rule, ...] = (
    precision_preset_on_cuda,
    precision_preset_fits_strategy,
    precision_preset_capability,
)
"""Construction guards across a strategy preset and a precision preset; a strategy preset includes them in its
rules (they do nothing when the plugin does not come from :func:`precision`)."""


def precision_catalog() -> _catalog.Catalog[PrecisionPreset]:
    """The precision presets of every trusted distribution, loaded once per process."""
    return _catalog.cached(
        _catalog.PRECISION_GROUP, lambda: _catalog.load(_catalog.PRECISION_GROUP, PrecisionPreset, "precision")
    )


def get_precision_preset(name: str) -> PrecisionPreset:
    """The precision preset called ``name``; an unknown or unusable name raises :class:`PresetConfigError`."""
    from lightning_presets._api import _unknown_name

    catalog = precision_catalog()
    if name in catalog.presets:
        return catalog.presets[name]
    entry = catalog.entry(name)
    if entry is not None and entry.findings:
        raise PresetConfigError(list(entry.findings))
    raise _unknown_name(name, sorted(catalog.presets), "precision", "precision")


_lock = threading.RLock()
_classes: dict[tuple[str, str], tuple[PrecisionPreset, type]] = {}


def _base_class(preset: PrecisionPreset, namespace: Namespace) -> type:
    owner = f"precision preset {preset.name!r} ({namespace.kind} plugin class)"
    return resolve_class(preset.plugin[namespace.kind], f"{namespace.package}.plugins.precision", "Precision", owner)


def plugin_class(preset: PrecisionPreset, namespace: Namespace) -> type:
    """The preset's plugin class for a namespace: preset behaviour, the preset's mixin, then Lightning's class."""
    from lightning_presets.plugins._base import PresetPrecision

    key = (preset.name, namespace.target)
    with _lock:
        if key not in _classes or _classes[key][0] != preset:
            base = _base_class(preset, namespace)
            bases = (PresetPrecision, preset.mixin, base) if preset.mixin else (PresetPrecision, base)
            name = preset.mixin.__name__ if preset.mixin else base.__name__
            attributes = {
                "__module__": "lightning_presets",
                "__qualname__": name,
                "__doc__": f"{base.__name__} configured by the {preset.name!r} precision preset.",
            }
            _classes[key] = (preset, type(name, bases, attributes))
        return _classes[key][1]


def valid_override_keys(preset: PrecisionPreset) -> frozenset[str]:
    """A precision preset takes exactly the keys of its defaults."""
    return frozenset(preset.init_params)


def _unknown_keys(preset: PrecisionPreset, target: str, overrides: Mapping[str, Any]) -> list[Finding]:
    valid = sorted(valid_override_keys(preset))
    findings = []
    for key in sorted(set(overrides) - set(valid)):
        close = difflib.get_close_matches(key, valid, n=1)
        maybe = f"did you mean {close[0]!r}? " if close else ""
        findings.append(
            Finding(
                code="LP006",
                severity="error",
                message=f"`lightning_presets.precision({preset.name!r}, {key}=...)`: {key!r} is not an argument "
                f"of the {preset.name!r} precision preset for target={target!r}",
                hint=f"{maybe}valid keys: {', '.join(valid) or 'none'}",
            )
        )
    return findings


def _no_form(preset: PrecisionPreset, namespace: Namespace) -> PresetConfigError:
    return PresetConfigError(
        [
            Finding(
                code="LP008",
                severity="error",
                message=f"precision preset {preset.name!r} has no {namespace.caller} form "
                f"(target={namespace.target!r})",
                hint=f"use it with one of: {', '.join(preset.kinds)}",
            )
        ]
    )


def hardware_context(preset: PrecisionPreset, target: str, values: Mapping[str, Any], when: str) -> PrecisionContext:
    """The snapshot precision guards read: arguments plus visible CUDA devices and their capability."""
    from lightning_presets.plugins._capability import observed_capability, runtime_capability, visible_cuda_devices

    devices = visible_cuda_devices()
    capability = None
    if devices:
        capability = observed_capability() if when == "built" else runtime_capability()
    return PrecisionContext(
        preset=preset.name,
        target=target,
        values=MappingProxyType(dict(values)),
        cuda_devices=devices,
        capability=capability,
        when=when,
        requirement=preset,
    )


def build_plugin(preset: PrecisionPreset, namespace: Namespace, overrides: Mapping[str, Any]) -> Any:
    """Check dependencies, arguments and hardware, then build a fresh plugin instance."""
    from lightning_presets import _requirements

    if namespace.kind not in preset.plugin:
        raise _no_form(preset, namespace)
    usage = f"lightning_presets.precision({preset.name!r})"
    report(_requirements.findings(preset.requires, usage) + _unknown_keys(preset, namespace.target, overrides))
    values = {**copy.deepcopy(dict(preset.init_params)), **overrides}
    context = hardware_context(preset, namespace.target, values, "built")
    report(run_rules(with_hardware_rules(preset), "options", context))
    kwargs = preset.prepare(namespace.kind, dict(values)) if preset.prepare else dict(values)
    cls = plugin_class(preset, namespace)
    instance = cls(**kwargs)
    instance._lp_precision_preset = preset
    instance._lp_precision_context = context
    return instance


def precision(name: str, *, target: str = "trainer", **overrides: Any) -> Any:
    """A precision plugin instance of preset ``name`` for ``target``, for ``Trainer(plugins=[...])``.

    ``target`` is ``"trainer"``, ``"fabric"``, ``"pytorch_lightning"`` or ``"lightning_fabric"``. Raises
    :class:`PresetConfigError` for a missing dependency, an unknown argument, or hardware the preset cannot
    use; combined with a strategy preset, the guards across both run again while the Trainer is built.
    """
    namespace = namespace_for_target(target)
    return build_plugin(get_precision_preset(name), namespace, overrides)
