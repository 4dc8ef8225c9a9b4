"""The DeepSpeed config a DeepSpeed preset's strategy will hand DeepSpeed, and what DeepSpeed's own parser says of it.

Both run Lightning's and DeepSpeed's own code on a copy: Lightning's ``_format_config`` adds its precision sections
(and, for Fabric, the micro-batch size), and DeepSpeed's ``DeepSpeedConfig`` parses the result for the job's world
size, as the engine will when ``fit`` starts. Nothing here needs CUDA or a process group.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.guards.arguments import call_arguments

FORCE_DS_CPU_OPTIMIZER = "zero_force_ds_cpu_optimizer"
"""DeepSpeed refuses a client optimizer other than its own CPU Adam/Lion with ZeRO-Offload unless this is false."""


def lightning_config(strategy: Any, caller: str) -> dict[str, Any] | None:
    """The config dict Lightning will pass to ``deepspeed.initialize``, as far as construction knows it.

    Lightning's ``_format_config`` runs on a copy of the strategy's config (its precision sections; Fabric's micro-batch
    default). For the Trainer, the accumulation and clipping Lightning takes from ``Trainer(...)`` are added the way its
    ``_format_batch_size_and_grad_accum_config`` adds them when ``fit`` starts; the micro-batch size it takes from the
    dataloader is unknown before ``fit`` and stays as the config has it.
    """
    config = getattr(strategy, "config", None)
    if not isinstance(config, dict):
        return None
    scratch = object.__new__(type(strategy))
    scratch.__dict__.update(vars(strategy))
    scratch.config = copy.deepcopy(config)
    with _quiet():
        type(strategy)._format_config(scratch)  # Lightning's own (the Trainer's skips the batch part: no module yet)
    resolved: dict[str, Any] = scratch.config
    if caller == "Trainer":
        arguments = call_arguments("Trainer")
        accumulation = arguments.get("accumulate_grad_batches", 1)
        if "gradient_accumulation_steps" not in resolved and type(accumulation) is int:
            resolved["gradient_accumulation_steps"] = accumulation
        resolved.setdefault("gradient_clipping", arguments.get("gradient_clip_val") or 0.0)
    return resolved


@dataclass(frozen=True, slots=True)
class Parsed:
    """What DeepSpeed's config parser made of a config."""

    refusal: str | None
    """DeepSpeed's error, in one line; ``None`` when it accepts the config."""
    warnings: tuple[str, ...]
    """What it logged while parsing: deprecated keys it rewrites, settings it ignores."""


def parse(config: Mapping[str, Any], world_size: int) -> Parsed:
    """DeepSpeed's ``DeepSpeedConfig`` parse of ``config`` for a job of ``world_size`` processes.

    ``DeepSpeedConfig.__init__`` reads the world size from a process group; without one it would parse for a single
    process. Its steps run here in its order on an instance whose world size is the job's.
    """
    from deepspeed.runtime import config as deepspeed_config

    parsed: Any = object.__new__(deepspeed_config.DeepSpeedConfig)
    param_dict = copy.deepcopy(dict(config))
    parsed._param_dict, parsed.global_rank, parsed.world_size = param_dict, 0, world_size
    with _recorded("DeepSpeed") as logged:
        try:
            reject_removed = getattr(deepspeed_config, "_reject_removed_config_keys", None)
            if reject_removed is not None:
                reject_removed(param_dict)
            parsed._initialize_params(copy.copy(param_dict))
            parsed._configure_train_batch_size()
            parsed._do_sanity_check()
        except Exception as error:  # DeepSpeed refuses with asserts, pydantic, TypeError, its own errors
            return Parsed(_one_line(error), tuple(dict.fromkeys(logged)))
    return Parsed(None, tuple(dict.fromkeys(logged)))


def _one_line(error: Exception) -> str:
    details = getattr(error, "errors", None)
    if callable(details):  # pydantic: the field and its complaint, not "1 validation error for ..."
        with contextlib.suppress(Exception):
            return "; ".join(
                ": ".join(part for part in (".".join(map(str, each["loc"])), str(each["msg"])) if part)
                for each in details()
            )
    text = (str(error).strip().splitlines() or [""])[0]
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


@contextlib.contextmanager
def _recorded(name: str) -> Iterator[list[str]]:
    """The warnings the logger ``name`` logs while the block runs, kept instead of printed."""
    records: list[str] = []

    class _Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger(name)
    keep, propagate, disabled = _Keep(logging.WARNING), logger.propagate, logging.root.manager.disable
    logger.addHandler(keep)
    logger.propagate = False
    logging.disable(logging.NOTSET)
    try:
        yield records
    finally:
        logger.removeHandler(keep)
        logger.propagate = propagate
        logging.disable(disabled)


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """Lightning's info lines ("Enabling DeepSpeed BF16") are for the real run, not for the guards' copy."""
    disabled = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(disabled)
