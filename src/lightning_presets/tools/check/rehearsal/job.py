"""The job the strategy's set-up rehearsal runs (:mod:`.setup`): its strategy as ``check`` built it
(:class:`SetupJob`, handed to the rehearsal's child in :data:`JOB_VARIABLE`), the strategy object rebuilt from it,
the job's first batch, and the first line of an exception as the rehearsal's records quote it."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

JOB_VARIABLE = "LIGHTNING_PRESETS_REHEARSAL_JOB"
"""Where ``check`` puts the job's strategy for the rehearsal's child (a forked child or a fresh interpreter reads
it): JSON of :class:`SetupJob`."""


@dataclass(frozen=True, slots=True)
class SetupJob:
    """The job's strategy, as ``check`` built it: the preset (or Lightning strategy) name, the ``--set`` overrides,
    the devices per node and the nodes."""

    strategy: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    devices: int = 1
    num_nodes: int = 1

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes

    def as_json(self) -> str:
        return json.dumps({"strategy": self.strategy, "overrides": _jsonable(dict(self.overrides)),
                           "devices": self.devices, "num_nodes": self.num_nodes})  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> SetupJob:
        data = json.loads(text)
        return cls(strategy=str(data["strategy"]), overrides=dict(data.get("overrides", {})),
                   devices=int(data.get("devices", 1)), num_nodes=int(data.get("num_nodes", 1)))  # fmt: skip


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(each) for key, each in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(each) for each in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def job_of(strategy: Any, arguments: Mapping[str, Any], overrides: Mapping[str, Any]) -> SetupJob | None:
    """The :class:`SetupJob` of the strategy ``check`` constructed (``None`` when it has no name to rebuild it by)."""
    name = arguments.get("strategy")
    preset = getattr(getattr(strategy, "_lp_preset", None), "name", None)
    name = preset or (name if isinstance(name, str) else None)
    if not name:
        return None
    devices = getattr(strategy, "num_processes", None)
    nodes = getattr(strategy, "num_nodes", None)
    return SetupJob(strategy=name, overrides=dict(overrides), devices=devices if isinstance(devices, int) else 1,
                    num_nodes=nodes if isinstance(nodes, int) else 1)  # fmt: skip


@contextlib.contextmanager
def announced(job: SetupJob | None) -> Iterator[None]:
    """``job`` in :data:`JOB_VARIABLE` while the rehearsal runs (its child, forked or fresh, inherits it)."""
    if job is None:
        yield
        return
    previous = os.environ.get(JOB_VARIABLE)
    os.environ[JOB_VARIABLE] = job.as_json()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(JOB_VARIABLE, None)
        else:
            os.environ[JOB_VARIABLE] = previous


def _strategy(job: SetupJob) -> Any:
    import lightning_presets
    from lightning_presets.registry import catalog

    if job.strategy in catalog.strategy_catalog().presets:
        return lightning_presets.strategy(job.strategy, **dict(job.overrides))
    return job.strategy


def _train_loader(model: Any) -> tuple[Any, str]:
    from lightning.pytorch import LightningModule
    from torch.utils.data import DataLoader

    if getattr(type(model), "train_dataloader", None) is not LightningModule.train_dataloader:
        return None, f"{type(model).__name__}.train_dataloader()"
    return DataLoader(cast(Any, [model.example_input_array]), batch_size=None), "example_input_array"


def _first_batch(model: Any, datamodule: Any = None) -> Any:
    """The first batch of ``datamodule``'s training loader (after its ``setup("fit")``), else of the model's own
    ``train_dataloader()``, else its ``example_input_array``."""
    if datamodule is not None:
        datamodule.setup("fit")
        return next(iter(datamodule.train_dataloader()))
    loader, _ = _train_loader(model)
    if loader is None:
        loader = model.train_dataloader()
    return next(iter(loader))


def _first(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__
