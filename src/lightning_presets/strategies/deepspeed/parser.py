"""Lightning's and DeepSpeed's own code, run early on a copy of a DeepSpeed preset's config.

- :func:`formatted_by_lightning`: Lightning's ``_format_config`` on a copy of the strategy's config (the precision
  sections it adds; Fabric's micro-batch default), at construction instead of when ``fit`` starts.
- :func:`parse`: DeepSpeed's ``DeepSpeedConfig`` on a config, for the job's world size, as ``deepspeed.initialize``
  will parse it when ``fit`` creates the engine (Lightning passes no ``mpu``).

``DeepSpeedConfig.__init__`` asks ``deepspeed.comm`` (the name ``dist`` in ``deepspeed.runtime.config``) for the rank
and the world size, and takes a world size of 1 when no process group exists. :func:`parse` runs that constructor's
own code with ``dist`` bound, for this call only, to :class:`JobCommunicator`, which answers for the job: rank 0 of
its world, the data-parallel group of the mesh ``deepspeed.initialize`` would build. Everything else, the
``sequence_parallel_size`` division of the world size included, is DeepSpeed's. Nothing here needs CUDA or a
process group, and nothing global is patched. The rebinding and Lightning's ``_format_config`` are reached through
``registry.private`` (the one door to Lightning's and DeepSpeed's internals).
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.registry import private


def formatted_by_lightning(strategy: Any) -> dict[str, Any] | None:
    """The strategy's config after Lightning's own ``_format_config``, run on a copy (the strategy is untouched).

    The Trainer's ``_format_config`` skips its batch part until a model is connected, so only the precision sections
    are added; Fabric's also sets the micro-batch default. ``None`` when the strategy holds no config dict.
    """
    config = getattr(strategy, "config", None)
    if not isinstance(config, dict):
        return None
    scratch = object.__new__(type(strategy))
    scratch.__dict__.update(vars(strategy))
    scratch.config = copy.deepcopy(config)
    with _quiet():
        private.format_deepspeed_config(strategy, scratch)
    formatted: dict[str, Any] = scratch.config
    return formatted


@dataclass(frozen=True, slots=True)
class Parsed:
    """What DeepSpeed's config parser made of a config."""

    refusal: str | None
    """DeepSpeed's error, in one line; ``None`` when it accepts the config."""
    warnings: tuple[str, ...]
    """What it logged while parsing: deprecated keys it rewrites, settings it ignores."""
    world_size: float | None
    """The world size its batch arithmetic divides by (``DeepSpeedConfig.world_size``: the job's, divided by
    ``sequence_parallel_size``; a float when DeepSpeed divides); ``None`` when it stopped before computing it, or
    the parser's code could not be given the job's world size (nothing was parsed then)."""


class _Group:
    """A process group of the stand-in mesh: only its size is asked."""

    def __init__(self, size: int) -> None:
        self.size = size


class JobMesh:
    """The ``(data_parallel, sequence_parallel)`` device mesh ``deepspeed.initialize`` builds when the config names
    both ``data_parallel_size`` and ``sequence_parallel_size``; ``DeepSpeedConfig`` asks it for the data-parallel
    group only."""

    def __init__(self, data_parallel: int, sequence_parallel: int) -> None:
        self.sizes = {
            "data_parallel": data_parallel,
            "sequence_parallel": sequence_parallel,
        }

    def get_group(self, mesh_dim: str) -> _Group:
        return _Group(self.sizes[mesh_dim])

    def __repr__(self) -> str:
        return f"JobMesh({self.sizes})"


class JobCommunicator:
    """``deepspeed.comm`` as ``DeepSpeedConfig.__init__`` asks it, answered for a job of ``world_size`` processes
    (seen from rank 0) without a process group."""

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size

    def get_rank(self, group: Any = None) -> int:
        return 0

    def get_world_size(self, group: Any = None) -> int:
        return self.world_size if group is None else int(group.size)


def _mesh(config: Mapping[str, Any], world_size: int) -> JobMesh | None:
    """The mesh ``deepspeed.initialize`` builds from the config, when it can build one for this world size."""
    data, sequence = (config.get("data_parallel_size"), config.get("sequence_parallel_size"))
    if type(data) is int and type(sequence) is int and data > 0 and sequence > 0 and data * sequence == world_size:
        return JobMesh(data, sequence)
    return None  # none named, or one torch cannot build (left to deepspeed.initialize)


def _constructor(world_size: int) -> Callable[..., None] | None:
    """``DeepSpeedConfig.__init__`` with its ``dist`` answering for the job; ``None`` when the installed DeepSpeed's
    constructor does not read the world size through ``dist`` (it would parse for one process: nothing is judged)."""
    return private.deepspeed_config_init(JobCommunicator(world_size))


def parse(config: Mapping[str, Any], world_size: int) -> Parsed:
    """DeepSpeed's ``DeepSpeedConfig`` parse of ``config`` for a job of ``world_size`` processes."""
    from deepspeed.runtime.config import DeepSpeedConfig

    constructor = _constructor(world_size)
    if constructor is None:
        return Parsed(None, (), None)
    parsed: Any = object.__new__(DeepSpeedConfig)
    param_dict = copy.deepcopy(dict(config))
    with _recorded("DeepSpeed") as logged:
        try:
            constructor(parsed, param_dict, mpu=None, mesh_device=_mesh(param_dict, world_size))
        except Exception as error:  # DeepSpeed refuses with asserts, pydantic, TypeError, its own errors
            return Parsed(_one_line(error), tuple(dict.fromkeys(logged)), getattr(parsed, "world_size", None))
    return Parsed(None, tuple(dict.fromkeys(logged)), parsed.world_size)


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
    keep, propagate, disabled = (_Keep(logging.WARNING), logger.propagate, logging.root.manager.disable)
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
