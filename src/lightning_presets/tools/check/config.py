"""Reading the ``trainer:`` section of a LightningCLI YAML file for ``check --config``.

A config file is input, not code. It is read up to :data:`MAX_BYTES`, as UTF-8, with PyYAML's safe loader (no
``!!python`` tag runs anything), and its ``trainer:`` section may expand to at most :data:`MAX_VALUES` values
(an alias bomb is refused, not expanded). A ``class_path`` is looked up, never imported by its path: it must name a
class that Lightning's strategies, precision-plugin or cluster-environment modules export, or a class a registered
preset declares; anything else is refused, and the module it names is never imported.
"""

from __future__ import annotations

import functools
import importlib
import sys
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
MAX_INTEGER_BITS = 1024
"""The largest integer accepted (about 308 digits): far above any setting, far below what Python cannot print."""
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
    check_values(f"--config {path}: 'trainer:'", section)
    arguments: dict[str, Any] = {}
    notes = []
    for key, value in section.items():
        if key in _SKIPPED:
            notes.append(f"trainer.{key} is not built by the check (it does not change the strategy)")
        elif key == "strategy" and isinstance(value, dict):
            arguments[key] = _instantiate(path, "trainer.strategy", value, ("strategy",))
        elif key == "plugins":  # cluster environments and precision plugins as class_path values, built as the rest
            plugins = value if isinstance(value, list) else [value] if value else []
            if any(isinstance(each, dict) and "class_path" in each for each in plugins):
                arguments[key] = [
                    _instantiate(path, f"trainer.plugins[{index}]", each, ("environment", "precision"))
                    if isinstance(each, dict)
                    else each
                    for index, each in enumerate(plugins)
                ]
            elif plugins:
                notes.append("trainer.plugins is built only from class_path values; use --plugin NAME or --precision")
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
    try:
        return yaml.load(text, Loader=_loader(yaml))  # a safe loader: SafeLoader or its C twin
    except yaml.YAMLError as error:
        raise UsageError(f"--config {path}: not valid YAML: {error}") from error
    except RecursionError as error:
        raise UsageError(f"--config {path}: nested too deeply to be a LightningCLI config") from error


class LargeInteger(str):
    """A YAML integer of more digits than Python converts (``sys.get_int_max_str_digits()``, 4300 by default): kept
    as its text, so that :func:`check_values` refuses it with its key instead of PyYAML raising ``ValueError``."""

    __slots__ = ()


_MAX_DECIMAL_DIGITS = 400
"""Longer decimal integers are not converted (above :data:`MAX_INTEGER_BITS`, below Python's conversion limit)."""


@functools.cache
def _loader(yaml: Any) -> Any:
    """PyYAML's safe loader (libyaml's when built in: faster, the same safe tags), whose integers of more than
    :data:`_MAX_DECIMAL_DIGITS` decimal digits are :class:`LargeInteger` texts (hexadecimal, octal and binary
    integers convert at any length: their base is a power of two)."""
    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[misc,valid-type]
        pass

    def integer(loader: Any, node: Any) -> Any:
        text = str(node.value).replace("_", "").lstrip("+-")
        if len(text) > _MAX_DECIMAL_DIGITS and text.isdigit():
            return LargeInteger(node.value)
        return base.construct_yaml_int(loader, node)

    Loader.add_constructor("tag:yaml.org,2002:int", integer)
    return Loader


def check_values(where: str, values: Any) -> None:
    """Refuse input that expands to more than :data:`MAX_VALUES` values, nests deeper than :data:`MAX_DEPTH` or holds
    an integer of more than :data:`MAX_INTEGER_BITS` bits (a 5,000-digit hex number cannot even be printed); the
    message names the key that holds the integer."""
    count = 0
    stack: list[tuple[Any, int, str]] = [(values, 1, "")]
    while stack:
        value, depth, key = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise UsageError(f"{where} expands to more than {MAX_VALUES} values (YAML aliases are counted each time "
                             "they are used)")  # fmt: skip
        if depth > MAX_DEPTH:
            raise UsageError(f"{where} nests deeper than {MAX_DEPTH} levels")
        at = f" at {key}," if key else ""
        if isinstance(value, LargeInteger):
            digits = len(value.replace("_", "").lstrip("+-"))
            raise UsageError(f"{where}{at} holds an integer of {digits} digits; no setting is larger than "
                             f"{MAX_INTEGER_BITS} bits")  # fmt: skip
        if isinstance(value, int) and value.bit_length() > MAX_INTEGER_BITS:
            raise UsageError(f"{where}{at} holds an integer of {value.bit_length()} bits; no setting is larger than "
                             f"{MAX_INTEGER_BITS} bits")  # fmt: skip
        children: Iterable[tuple[Any, str]] = ()
        if isinstance(value, dict):
            children = [
                *((child, key) for child in value),
                *((child, f"{key}.{_shown(name)}" if key else _shown(name)) for name, child in value.items()),
            ]
        elif isinstance(value, list | tuple | set):
            children = ((child, f"{key}[{index}]") for index, child in enumerate(value))
        stack.extend((child, depth + 1, path) for child, path in children)


def _shown(key: Any) -> str:
    """A mapping key in a message (a long or odd one shortened, never printed whole)."""
    text = key if isinstance(key, str) else repr(key) if not isinstance(key, int) or key.bit_length() < 64 else "<int>"
    return text if len(text) <= 60 else f"{text[:57]}..."


# What a class_path may be, by role: the base class, and the package module (per namespace) that exports the role.
_ROLES = {
    "strategy": ("a Lightning strategy", "Strategy"),
    "precision": ("a Lightning precision plugin", "Precision"),
    "environment": ("a Lightning cluster environment", "ClusterEnvironment"),
}


def _role_modules(role: str) -> list[str]:
    """The Lightning modules that export the classes of a role, in every namespace (installed or not)."""
    names = []
    for namespace in NAMESPACES:
        if role == "strategy":
            names.append(namespace.strategies_module)
        elif role == "precision":
            names.append(f"{namespace.package}.plugins.precision")
        else:
            names += [f"{namespace.package}.plugins.environments", f"{fabric_package(namespace)}.plugins.environments"]
    return list(dict.fromkeys(names))


def _lightning_class(class_path: str, role: str) -> type | None:
    """The class of a role that ``class_path`` names, looked up among what Lightning's modules of that role export
    (by that module's path or the defining module's, e.g. ``lightning.pytorch.strategies.ddp.DDPStrategy``).

    Only those modules are imported, and only in the Lightning package ``class_path`` starts with; the module the
    path names is never imported itself (``lightning.__setup__`` runs code from the working directory).
    """
    top = class_path.partition(".")[0]
    _, base_name = _ROLES[role]
    for module_name in _role_modules(role):
        if module_name.partition(".")[0] != top:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:  # that namespace is not installed
            continue
        base = getattr(module, base_name, None)
        for name, value in vars(module).items():
            if not (isinstance(value, type) and isinstance(base, type) and issubclass(value, base)):
                continue
            if class_path in (f"{module_name}.{name}", f"{value.__module__}.{value.__qualname__}"):
                return value
    return None


def _preset_class(class_path: str, roles: tuple[str, ...]) -> type | None:
    """The class a registered preset declares as ``module:Class`` when ``class_path`` is ``module.Class``."""
    for loaded in (catalog.strategy_catalog(), catalog.precision_catalog()):
        for preset in loaded.presets.values():
            for kind in preset.kinds:
                module_name, colon, attr = (preset.class_spec(kind) or "").partition(":")
                if colon and f"{module_name}.{attr}" == class_path:
                    try:
                        cls = getattr(importlib.import_module(module_name), attr)
                    except Exception:  # the preset is broken: `list` says why
                        return None
                    return cls if isinstance(cls, type) and _is_role(cls, roles) else None
    return None


def _is_role(cls: type, roles: tuple[str, ...]) -> bool:
    return any(issubclass(cls, base) for role in roles for base in _bases(role))


def _bases(role: str) -> list[type]:
    """The base class of a role in every Lightning namespace already imported (a preset's class imported its own)."""
    _, base_name = _ROLES[role]
    found = (getattr(sys.modules.get(name), base_name, None) for name in _role_modules(role))
    return [base for base in found if isinstance(base, type)]


def _instantiate(path: str, where: str, spec: dict[str, Any], roles: tuple[str, ...]) -> _Deferred:
    """A ``{class_path: ..., init_args: ...}`` value, built the way LightningCLI builds it, if its class is allowed.

    The class is looked up, never imported by its path: among the classes Lightning's modules of the role export,
    then among the classes registered presets declare. Nested ``class_path`` values in ``init_args`` may be
    precision plugins or cluster environments.
    """
    class_path = spec.get("class_path")
    allowed = " or ".join(_ROLES[role][0] for role in roles)
    if not isinstance(class_path, str) or "." not in class_path:
        raise UsageError(f"--config {path}: {where} needs a 'class_path' such as "
                         "lightning.pytorch.strategies.FSDPStrategy")  # fmt: skip
    found = next((cls for role in roles if (cls := _lightning_class(class_path, role)) is not None), None)
    if found is None:
        found = _preset_class(class_path, roles)
    if found is None:
        exporters = ", ".join(module for role in roles for module in _role_modules(role)[:2])
        raise UsageError(
            f"--config {path}: {where}.class_path {class_path!r} is refused: it is not {allowed} (a class {exporters} "
            "export, by that path or its own module's) nor a class a registered preset declares; nothing was imported"
        )
    init_args = spec.get("init_args") or {}
    if not isinstance(init_args, dict):
        raise UsageError(f"--config {path}: {where}.init_args must be a mapping")
    nested = {
        key: _instantiate(path, f"{where}.init_args.{key}", value, ("precision", "environment"))
        if isinstance(value, dict) and "class_path" in value
        else value
        for key, value in init_args.items()
    }
    return _Deferred(found, nested)


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
