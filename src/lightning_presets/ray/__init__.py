"""Presets under Ray Train's documented Lightning recipe (``pip install 'lightning-presets[ray]'``).

Ray's ``ray.train.lightning.prepare_trainer`` accepts only subclasses of ``RayDDPStrategy``, ``RayFSDPStrategy`` and
``RayDeepSpeedStrategy``. :func:`strategy` returns the preset's guarded strategy built on Ray's class of the same
family, for the recipe as Ray documents it::

    from ray.train.lightning import RayLightningEnvironment, RayTrainReportCallback, prepare_trainer
    import lightning_presets.ray

    def train_func():
        trainer = Trainer(devices="auto", accelerator="auto",
                          strategy=lightning_presets.ray.strategy("ddp_static_graph"),
                          plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()])
        trainer = prepare_trainer(trainer)
        trainer.fit(model, datamodule=dm)

The guards read the world Ray made (``RayLightningEnvironment.world_size()``), not ``devices × num_nodes``. A refusal
raises :class:`RayPresetError`, whose last line names the codes: Ray prints the head and the tail of a worker's
error, and the codes stay in the tail.
"""

from __future__ import annotations

import importlib
from typing import Any

from lightning_presets.core.findings import PresetConfigError
from lightning_presets.core.namespaces import namespace_for_target
from lightning_presets.core.preset import Preset
from lightning_presets.guards import strategy as strategy_guards
from lightning_presets.registry import catalog
from lightning_presets.registry.build import build
from lightning_presets.registry.classes import lightning_class

__all__ = ["RAY_STRATEGIES", "RayPresetError", "strategy"]

RAY_STRATEGIES = {"DDPStrategy": "RayDDPStrategy", "FSDPStrategy": "RayFSDPStrategy",
                  "DeepSpeedStrategy": "RayDeepSpeedStrategy"}  # fmt: skip
"""Lightning's strategy class and Ray's subclass of it that ``prepare_trainer`` accepts."""
_heads: dict[str, type] = {}


class RayPresetError(PresetConfigError):
    """A preset's refusal inside a Ray worker: the findings, then one last line with their codes."""

    def __str__(self) -> str:
        codes = ", ".join(dict.fromkeys(finding.code for finding in self.findings))
        return f"{super().__str__()}\nlightning-presets refused the job: {codes} (`lightning-presets explain CODE`)"


def _ray_lightning() -> Any:
    try:
        return importlib.import_module("ray.train.lightning")
    except ImportError as error:
        raise ImportError(
            f"lightning_presets.ray needs Ray Train ({error}): pip install 'lightning-presets[ray]'"
        ) from error


def _head(ray_class: type) -> type:
    """The guarded Trainer head on Ray's class: one per Ray class, importable from this module (pickle finds it)."""
    name = f"Guarded{ray_class.__name__}"
    if name not in _heads:
        base: Any = strategy_guards.HEADS["trainer"]

        def _lp_before_launcher(self: Any) -> None:  # the construction guards, their refusal said for Ray
            try:
                base._lp_before_launcher(self)
            except RayPresetError:
                raise
            except PresetConfigError as error:
                raise RayPresetError(error.findings) from None

        attributes = {"__module__": __name__, "__qualname__": name, "_lp_before_launcher": _lp_before_launcher}
        _heads[name] = globals()[name] = type(name, (base, ray_class), attributes)
    return _heads[name]


def strategy(name: str, **overrides: Any) -> Any:
    """The guarded strategy of preset ``name`` for a Trainer under Ray Train: an instance of Ray's strategy class of
    the preset's family (``RayDDPStrategy``, ``RayFSDPStrategy``, ``RayDeepSpeedStrategy``) with the preset's
    settings and guards. A preset of another family (FSDP2, tensor parallel) has no Ray class: ``ValueError``."""
    ray_lightning = _ray_lightning()
    preset: Preset = catalog.get(Preset, name)
    namespace = namespace_for_target("trainer")
    base = lightning_class(preset, namespace)
    ray_name = next((RAY_STRATEGIES[cls.__name__] for cls in base.__mro__ if cls.__name__ in RAY_STRATEGIES), None)
    if ray_name is None:
        accepted = ", ".join(RAY_STRATEGIES.values())
        raise ValueError(f"preset {name!r} is a {base.__name__}, which Ray's prepare_trainer refuses (it accepts "
                         f"only {accepted} and their subclasses); use a DDP, FSDP or DeepSpeed preset under Ray, "
                         "or run this one under torchrun")  # fmt: skip
    heads: Any = {"trainer": _head(getattr(ray_lightning, ray_name))}
    try:
        return build(preset, namespace, overrides, heads)
    except RayPresetError:
        raise
    except PresetConfigError as error:
        raise RayPresetError(error.findings) from None


def __getattr__(name: str) -> type:
    """``Guarded<RayClass>`` heads for unpickling in a worker that has not built one yet."""
    if name.startswith("GuardedRay") and name[len("Guarded") :] in RAY_STRATEGIES.values():
        return _head(getattr(_ray_lightning(), name[len("Guarded") :]))
    raise AttributeError(name)
