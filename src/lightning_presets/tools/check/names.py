"""Syntax-level checks of ``check``: strategy, precision, accelerator and precision-preset names."""

from __future__ import annotations

import difflib
import importlib
from collections.abc import Iterable
from typing import Any, get_args

from lightning_presets.core.codes import Code
from lightning_presets.core.findings import Finding
from lightning_presets.registry import catalog, private
from lightning_presets.tools.check.request import COMMAND as CHECK

AUTO = "auto"


def lightning_refuses(code: str, title: str, fails: str, fixed: str, evidence: str) -> Code:
    """A code of ``check`` for a value Lightning itself refuses: an error, shown as ``check`` command lines (``fails``
    and ``fixed`` are the flags) with Lightning's own exception as the evidence."""
    return Code(
        code=code, severity="error", stage="check", title=title, fails=f"{CHECK} {fails}", fixed=f"{CHECK} {fixed}",
        evidence=f"runtime: {evidence}",
    )  # fmt: skip


# A row a code: code, title, the failing flags, the fixed flags, what Lightning does with the failing ones.
UNKNOWN_STRATEGY = lightning_refuses("LP701", "an unknown strategy name", "--strategy fsdp_ofload_ckpt",
    "--strategy fsdp_offload_ckpt", "the Trainer raises ValueError 'invalid strategy name'")  # fmt: skip
UNKNOWN_PRECISION = lightning_refuses("LP702", "an unknown precision value", "--precision bf16-mix",
    "--precision bf16-mixed", "the Trainer raises ValueError for the precision")  # fmt: skip
UNKNOWN_ACCELERATOR = lightning_refuses("LP703", "an unknown accelerator name", "--accelerator cdua",
    "--accelerator cuda --gpus 8", "the Trainer raises ValueError 'invalid accelerator name'")  # fmt: skip
UNKNOWN_PRECISION_PRESET = lightning_refuses("LP704", "an unknown precision preset", "--plugin fp8_everything",
    "--precision bf16-mixed", "the Trainer refuses the name as a plugin")  # fmt: skip

CODES: tuple[Code, ...] = (UNKNOWN_STRATEGY, UNKNOWN_PRECISION, UNKNOWN_ACCELERATOR, UNKNOWN_PRECISION_PRESET)


def _maybe(name: str, choices: Iterable[str], n: int = 3) -> str:
    close = difflib.get_close_matches(name, sorted(choices), n=n, cutoff=0.6)
    return f"did you mean {', '.join(map(repr, close))}? " if close else ""


def _literal_values(annotation: Any) -> list[str]:
    values: list[str] = []
    for arg in get_args(annotation):
        values.extend(_literal_values(arg) if get_args(arg) else [str(arg)])
    return values


def precision_values() -> tuple[str, ...]:
    """Every value ``precision=`` accepts, as Lightning spells them (aliases and integers included)."""
    return tuple(dict.fromkeys(_literal_values(private.precision_input())))


def strategy_registry(package: str) -> Any:
    """Lightning's strategy registry of ``lightning.pytorch`` or ``lightning.fabric``."""
    module = importlib.import_module(f"{package}.strategies")
    return getattr(module, "StrategyRegistry" if package.endswith("pytorch") else "STRATEGY_REGISTRY")


def registered_strategies(package: str) -> list[str]:
    return list(strategy_registry(package).available_strategies())


def accelerator_names(package: str) -> list[str]:
    accelerators = importlib.import_module(f"{package}.accelerators")
    registry = getattr(accelerators, "AcceleratorRegistry" if package.endswith("pytorch") else "ACCELERATOR_REGISTRY")
    return sorted({*registry.available_accelerators(), AUTO, "gpu"})


def check_strategy(name: str, package: str, constructor: str) -> list[Finding]:
    """LP701 for a name neither Lightning nor a trusted preset registered (with the catalog's reason)."""
    registered = registered_strategies(package)
    if name == AUTO or name in registered:
        return []
    entry = catalog.strategy_catalog().entry(name)
    if entry is not None and entry.status != "ok":
        reason = f"the preset {name!r} from {entry.distribution} {entry.version} is {entry.status}"
        hint = (
            catalog.denied(entry, "strategy").hint  # says which variable leaves it out, and how to let it in
            if entry.status == "denied"
            else "see the findings above; `lightning-presets list` shows every preset and its status"
        )
        return [
            *entry.findings,
            _unknown(UNKNOWN_STRATEGY, constructor, "strategy", name, f"{reason}, so it is not registered", hint),
        ]
    return [
        _unknown(
            UNKNOWN_STRATEGY, constructor, "strategy", name,
            "it is neither a Lightning strategy nor a registered preset",
            (_maybe(name, registered) or "Lightning's own include 'ddp', 'fsdp' and 'deepspeed'; ")
            + "`lightning-presets list` shows the presets",
        )
    ]  # fmt: skip


def check_precision(value: str, constructor: str) -> list[Finding]:
    allowed = precision_values()
    if value in allowed:
        return []
    return [
        _unknown(
            UNKNOWN_PRECISION, constructor, "precision", value, "Lightning does not accept it",
            f"{_maybe(value, allowed)}valid values: {', '.join(allowed)}",
        )
    ]  # fmt: skip


def check_accelerator(value: str, package: str, constructor: str) -> list[Finding]:
    names = accelerator_names(package)
    if value.lower() in names:
        return []
    return [
        _unknown(
            UNKNOWN_ACCELERATOR, constructor, "accelerator", value, "Lightning has no accelerator of that name",
            f"{_maybe(value.lower(), names)}valid names: {', '.join(names)}",
        )
    ]  # fmt: skip


def _unknown(code: Code, constructor: str, argument: str, value: str, why: str, hint: str) -> Finding:
    shown = f"[lightning_presets.precision({value!r})]" if argument == "plugins" else repr(value)
    return code.finding(f"`{constructor}({argument}={shown})`: {why}", hint)


def precision_preset_names() -> list[str]:
    return sorted(catalog.precision_catalog().presets)


def check_plugin(name: str, constructor: str) -> list[Finding]:
    names = precision_preset_names()
    if name in names:
        return []
    return [
        _unknown(
            UNKNOWN_PRECISION_PRESET, constructor, "plugins", name, "no precision preset has that name",
            f"{_maybe(name, names)}available precision presets: {', '.join(names) or 'none installed'}; "
            "or pass a Lightning precision with --precision",
        )
    ]  # fmt: skip
