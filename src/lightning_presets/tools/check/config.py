"""Reading the ``trainer:`` section of a LightningCLI YAML file for ``check --config``.

A config file is input, not code. It is read up to :data:`MAX_BYTES`, as UTF-8, with PyYAML's safe loader (no
``!!python`` tag runs anything), and its ``trainer:`` section may expand to at most :data:`MAX_VALUES` values
(an alias bomb is refused, not expanded). A ``class_path`` is built only when it names a Lightning strategy,
precision plugin or cluster environment, or a class a registered preset declares: anything else is refused
before its module is imported.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import Any

from lightning_presets.core.findings import UsageError
from lightning_presets.core.namespaces import NAMESPACES, fabric_package
from lightning_presets.registry import catalog

MAX_BYTES = 2**20
"""The largest config file read (1 MiB; a LightningCLI config is a few kilobytes)."""
MAX_VALUES = 10_000
"""The most values (mappings, lists and scalars, aliases counted each time they are used) in ``trainer:``."""
MAX_DEPTH = 64
"""The deepest nesting accepted in ``trainer:``."""
LIGHTNING_PACKAGES = ("lightning", "pytorch_lightning", "lightning_fabric")
_SKIPPED = ("callbacks", "logger", "profiler")


def trainer_section(path: str) -> tuple[dict[str, Any], list[str]]:
    """The ``trainer:`` mapping of a LightningCLI config, and the keys the check leaves out (with why)."""
    data = _load(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UsageError(f"--config {path}: expected a mapping with a 'trainer:' section")
    section = data.get("trainer", {}) or {}
    if not isinstance(section, dict):
        raise UsageError(f"--config {path}: 'trainer:' must be a mapping, got {type(section).__name__}")
    _check_size(path, section)
    arguments: dict[str, Any] = {}
    notes = []
    for key, value in section.items():
        if key in _SKIPPED:
            notes.append(f"trainer.{key} is not built by the check (it does not change the strategy)")
        elif key == "strategy" and isinstance(value, dict):
            arguments[key] = _instantiate(path, "trainer.strategy", value, ("strategy",))
        elif key == "plugins":
            if value:
                notes.append("trainer.plugins is not built by the check; use --plugin NAME or --precision")
        else:
            arguments[key] = value
    return arguments, notes


def _read(path: str) -> str:
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except OSError as error:
        raise UsageError(f"--config {path}: {error.strerror or error}") from error
    except ValueError as error:  # a NUL character: no file can have that name
        raise UsageError(f"--config {path!r}: not a file name ({error})") from error
    if len(raw) > MAX_BYTES:
        raise UsageError(f"--config {path}: larger than {MAX_BYTES // 2**20} MiB; a LightningCLI config is a few KB")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise UsageError(
            f"--config {path}: not UTF-8 text (byte {error.start}: {raw[error.start : error.start + 1]!r}); "
            "save it as UTF-8, as LightningCLI reads it"
        ) from error


def _load(path: str) -> Any:
    try:
        import yaml  # type: ignore[import-untyped,unused-ignore]  # stubs are optional
    except ImportError as error:  # PyYAML comes with lightning[extra] / jsonargparse
        raise UsageError("--config needs PyYAML: pip install pyyaml") from error
    text = _read(path)
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml when built in: faster, same safe tags
    try:
        return yaml.load(text, Loader=loader)  # a safe loader: SafeLoader or its C twin
    except yaml.YAMLError as error:
        raise UsageError(f"--config {path}: not valid YAML: {error}") from error
    except RecursionError as error:
        raise UsageError(f"--config {path}: nested too deeply to be a LightningCLI config") from error


def _check_size(path: str, section: Any) -> None:
    """Refuse a section that expands to more than :data:`MAX_VALUES` values or nests deeper than :data:`MAX_DEPTH`."""
    count = 0
    stack: list[tuple[Any, int]] = [(section, 1)]
    while stack:
        value, depth = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise UsageError(f"--config {path}: 'trainer:' expands to more than {MAX_VALUES} values (YAML aliases "
                             "are counted each time they are used)")  # fmt: skip
        if depth > MAX_DEPTH:
            raise UsageError(f"--config {path}: 'trainer:' nests deeper than {MAX_DEPTH} levels")
        children: Iterable[Any] = ()
        if isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, list | tuple | set):
            children = value
        stack.extend((child, depth + 1) for child in children)


# What a class_path may be, by role; the base classes are looked up in every installed namespace.
_ROLES = {
    "strategy": "a Lightning strategy",
    "precision": "a Lightning precision plugin",
    "environment": "a Lightning cluster environment",
}


def _bases(roles: Iterable[str]) -> tuple[type, ...]:
    """The base classes of these roles in every Lightning namespace that is installed."""
    names = set()
    for namespace in NAMESPACES:
        for role in roles:
            if role == "strategy":
                names.add((namespace.strategies_module, "Strategy"))
            elif role == "precision":
                names.add((f"{namespace.package}.plugins.precision", "Precision"))
            else:
                names.add((f"{fabric_package(namespace)}.plugins.environments", "ClusterEnvironment"))
    bases = []
    for module_name, attr in sorted(names):
        try:
            bases.append(getattr(importlib.import_module(module_name), attr))
        except (ImportError, AttributeError):  # that namespace is not installed
            continue
    return tuple(bases)


def _preset_modules() -> set[str]:
    """The modules of the classes registered presets declare as ``module:Class``."""
    modules = set()
    for loaded in (catalog.strategy_catalog(), catalog.precision_catalog()):
        for preset in loaded.presets.values():
            for kind in preset.kinds:
                spec = preset.class_spec(kind) or ""
                if ":" in spec:
                    modules.add(spec.partition(":")[0])
    return modules


def _trusted(module_name: str) -> bool:
    return module_name.partition(".")[0] in LIGHTNING_PACKAGES or module_name in _preset_modules()


def _instantiate(path: str, where: str, spec: dict[str, Any], roles: tuple[str, ...]) -> _Deferred:
    """A ``{class_path: ..., init_args: ...}`` value, built the way LightningCLI builds it, if its class is allowed.

    The module is imported only when it is Lightning's or a registered preset's; the class must then subclass
    the Lightning class of its role. Nested ``class_path`` values in ``init_args`` may be precision plugins or
    cluster environments.
    """
    class_path = spec.get("class_path")
    allowed = " or ".join(_ROLES[role] for role in roles)
    if not isinstance(class_path, str) or "." not in class_path:
        raise UsageError(f"--config {path}: {where} needs a 'class_path' such as "
                         "lightning.pytorch.strategies.FSDPStrategy")  # fmt: skip
    module_name, _, name = class_path.rpartition(".")
    if not _trusted(module_name):
        raise UsageError(
            f"--config {path}: {where}.class_path {class_path!r} is refused: a check builds only {allowed} "
            f"(from {', '.join(LIGHTNING_PACKAGES)}) or a class a registered preset declares; nothing was imported"
        )
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise UsageError(f"--config {path}: cannot import {where}.class_path {class_path!r}: {error}") from error
    if not (isinstance(cls, type) and issubclass(cls, _bases(roles))):
        raise UsageError(f"--config {path}: {where}.class_path {class_path!r} is not {allowed}; it is not built")
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise UsageError(f"--config {path}: {where}.init_args must be a mapping")
    nested = {
        key: _instantiate(path, f"{where}.init_args.{key}", value, ("precision", "environment"))
        if isinstance(value, dict) and "class_path" in value
        else value
        for key, value in init_args.items()
    }
    return _Deferred(cls, nested)


class _Deferred:
    """An allowed class and its arguments, instantiated inside the simulation (never at parse time)."""

    def __init__(self, cls: type, init_args: dict[str, Any]) -> None:
        self.cls = cls
        self.init_args = init_args

    def __repr__(self) -> str:
        args = ", ".join(f"{key}={value!r}" for key, value in self.init_args.items())
        return f"{self.cls.__name__}({args})"

    def build(self) -> Any:
        arguments = {
            key: value.build() if isinstance(value, _Deferred) else value for key, value in self.init_args.items()
        }
        return self.cls(**arguments)
