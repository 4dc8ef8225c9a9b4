"""Presets under Ray Train's documented Lightning recipe (``pip install 'lightning-presets[ray]'``).

Ray's ``ray.train.lightning.prepare_trainer`` accepts only subclasses of ``RayDDPStrategy``, ``RayFSDPStrategy`` and
``RayDeepSpeedStrategy``. :func:`strategy` returns the preset's guarded strategy built on Ray's class of the same
family; the presets on Lightning's ``ModelParallelStrategy`` (``fsdp2``, ``fsdp2_offload_ckpt``, ``tp2d_hybrid``),
which no Ray class covers, get :class:`RayModelParallel` (Ray's two changes: the device Ray gave the worker, and the
mesh and sampler laid out on the world Ray made). :func:`prepare_trainer` is Ray's ``prepare_trainer`` for every
preset: it hands Ray's classes to Ray's own and checks the others the same way::

    from ray.train.lightning import RayLightningEnvironment, RayTrainReportCallback
    import lightning_presets.ray

    def train_func():
        trainer = Trainer(devices="auto", accelerator="auto", strategy=lightning_presets.ray.strategy("fsdp2"),
                          plugins=[RayLightningEnvironment()], callbacks=[RayTrainReportCallback()])
        trainer = lightning_presets.ray.prepare_trainer(trainer)
        trainer.fit(model, datamodule=dm)

The guards read the layout Ray made (its world and its workers per node), not ``devices × num_nodes``. A refusal
raises :class:`RayPresetError`, whose last line holds the code, the message and the fix in a few hundred characters:
Ray shows the driver only the head and the tail of a worker's error.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import Any

from lightning_presets.core.context import Context
from lightning_presets.core.findings import Finding, PresetConfigError
from lightning_presets.core.namespaces import namespace_for_target
from lightning_presets.core.preset import Preset
from lightning_presets.guards import strategy as strategy_guards
from lightning_presets.registry import catalog, private
from lightning_presets.registry.build import build
from lightning_presets.registry.classes import lightning_class

__all__ = ["RAY_STRATEGIES", "RayModelParallel", "RayPresetError", "prepare_trainer", "strategy"]

RAY_STRATEGIES = {"DDPStrategy": "RayDDPStrategy", "FSDPStrategy": "RayFSDPStrategy",
                  "DeepSpeedStrategy": "RayDeepSpeedStrategy", "ModelParallelStrategy": "RayModelParallel"}  # fmt: skip
"""Lightning's strategy class and the Ray class a preset of it is built on (Ray's own subclass, or this module's
:class:`RayModelParallel` for ``ModelParallelStrategy``, which Ray does not cover)."""
SUMMARY_LIMIT = 400
"""The most characters of the last line of a :class:`RayPresetError`: Ray's driver keeps the last 500 of a worker's
error (``ray.train.v2``: ``ERR_CHAR_LIMIT // 2``)."""
_heads: dict[str, type] = {}
_GUARDED = ("_lp_before_launcher", "setup_environment", "connect", "setup", "setup_optimizers", "load_checkpoint")
"""The head's methods in which the guards raise: the construction rules, the start-up handshake, the model, setup,
optimizer and resume rules."""


def _shortened(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class RayPresetError(PresetConfigError):
    """A preset's refusal inside a Ray worker: the findings, then one last line with the first error's code, message
    and fix, and every code, within :data:`SUMMARY_LIMIT` characters."""

    def __str__(self) -> str:
        return f"{super().__str__()}\n{self.summary}"

    @property
    def summary(self) -> str:
        first: Finding = self.findings[0]
        codes = ", ".join(dict.fromkeys(finding.code for finding in self.findings))
        head = f"lightning-presets refused the job ({codes}; `lightning-presets explain CODE`): [{first.code}] "
        room = SUMMARY_LIMIT - len(head) - len(" | fix: ")
        message = _shortened(first.message, max(room * 3 // 5, room - len(first.hint)))
        return f"{head}{message} | fix: {_shortened(first.hint, room - len(message))}"


def _ray_lightning() -> Any:
    try:
        return importlib.import_module("ray.train.lightning")
    except ImportError as error:
        raise ImportError(
            f"lightning_presets.ray needs Ray Train ({error}): pip install 'lightning-presets[ray]'"
        ) from error


class RayModelParallel:
    """Ray's changes to a strategy, for Lightning's ``ModelParallelStrategy`` (which no Ray class covers): the mixin a
    ``fsdp2``/``tp2d_hybrid`` preset is built with under Ray.

    - ``root_device`` is the device Ray gave the worker (``ray.train.torch.get_device()``): with ``devices="auto"``
      Lightning sees one device per worker and would index it by the worker's local rank.
    - The device mesh is laid out on the world Ray made: a size left to ``'auto'`` is resolved from Ray's layout
      (workers per node, nodes) as the preset's mesh says, not from ``devices × num_nodes``. The distributed sampler
      follows that mesh's data-parallel dimension (Lightning's own ``distributed_sampler_kwargs``): with the default
      ``fsdp2`` mesh that is Ray's world size and world rank; the ranks of one tensor-parallel group read the same
      batch, as tensor parallelism needs.
    """

    @property
    def root_device(self) -> Any:
        return importlib.import_module("ray.train.torch").get_device()


def ray_layout(context: Context, environment: Any) -> Context:
    """``context`` with the layout Ray made (its workers per node and nodes, and its world as the launcher's, which
    messages name) when the job runs in Ray's environment inside a Ray Train worker; as it is otherwise (Lightning then
    lays the processes out itself)."""
    if not isinstance(environment, _ray_lightning().RayLightningEnvironment):
        return context
    try:
        train_context = importlib.import_module("ray.train").get_context()
        world, local = int(train_context.get_world_size()), int(train_context.get_local_world_size())
    except Exception:  # not inside a Ray Train worker: nothing launched yet
        return context
    if world < 1 or local < 1 or world % local:  # workers spread unevenly over the nodes: the world alone
        return context
    return dataclasses.replace(context, devices_per_node=local, num_nodes=world // local, launched_world=world)


def _said_for_ray(head: type, name: str) -> Callable[..., Any]:
    """``head``'s method ``name`` (its own, else the next class's) with a guard's refusal raised as
    :class:`RayPresetError` (its summary in the tail Ray keeps)."""
    own = vars(head).get(name)

    def guarded(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if own is not None:
                return own(self, *args, **kwargs)
            return getattr(super(head, self), name)(*args, **kwargs)
        except RayPresetError:
            raise
        except PresetConfigError as error:
            raise RayPresetError(error.findings) from None

    guarded.__name__ = guarded.__qualname__ = name
    return guarded


def _resolve_sizes(strategy: Any) -> None:
    """A ``ModelParallelStrategy`` size still ``'auto'`` after the preset's hooks, resolved as the preset's mesh says on
    the layout the guards read (Ray's): Lightning would resolve it from ``devices × num_nodes`` at setup."""
    sizes = private.parallel_sizes_of(strategy)
    mesh, context = strategy._lp_preset.mesh, strategy._lp_context
    if mesh is None or context is None or "auto" not in sizes:
        return
    resolved = mesh.sizes({}, context.devices_per_node, context.num_nodes) or sizes
    data, tensor = (value if size == "auto" else size for size, value in zip(sizes, resolved, strict=True))
    private.set_parallel_sizes(strategy, data, tensor)


def _head(ray_class: type) -> type:
    """The guarded Trainer head on Ray's class: one per Ray class, importable from this module (pickle finds it)."""
    name = f"Guarded{ray_class.__name__}"
    if name not in _heads:
        base: Any = strategy_guards.HEADS["trainer"]

        def _lp_snapshot(self: Any) -> Context:
            return ray_layout(base._lp_snapshot(self), getattr(self, "cluster_environment", None))

        def _lp_before_launcher(self: Any) -> None:
            base._lp_before_launcher(self)
            if isinstance(self, RayModelParallel):
                _resolve_sizes(self)

        attributes = {"__module__": __name__, "__qualname__": name, "_lp_snapshot": _lp_snapshot,
                      "_lp_before_launcher": _lp_before_launcher}  # fmt: skip
        head = type(name, (base, ray_class), attributes)
        for method in _GUARDED:
            setattr(head, method, _said_for_ray(head, method))
        _heads[name] = globals()[name] = head
    return _heads[name]


def _ray_class(name: str) -> type:
    return RayModelParallel if name == "RayModelParallel" else getattr(_ray_lightning(), name)


def strategy(name: str, **overrides: Any) -> Any:
    """The guarded strategy of preset ``name`` for a Trainer under Ray Train: built on Ray's strategy class of the
    preset's family (``RayDDPStrategy``, ``RayFSDPStrategy``, ``RayDeepSpeedStrategy``) or, for a preset on
    ``ModelParallelStrategy``, on :class:`RayModelParallel`, with the preset's settings and guards. Pass the Trainer
    to :func:`prepare_trainer`. A preset of another family (XLA) has no form under Ray: ``ValueError``."""
    _ray_lightning()
    preset: Preset = catalog.get(Preset, name)
    namespace = namespace_for_target("trainer")
    base = lightning_class(preset, namespace)
    ray_name = next((RAY_STRATEGIES[cls.__name__] for cls in base.__mro__ if cls.__name__ in RAY_STRATEGIES), None)
    if ray_name is None:
        raise ValueError(f"preset {name!r} is a {base.__name__}, which Ray Train does not run (Ray's Lightning recipe "
                         f"takes DDP, FSDP and DeepSpeed strategies, and this package adds ModelParallelStrategy); "
                         "launch it with its own launcher instead")  # fmt: skip
    heads: Any = {"trainer": _head(_ray_class(ray_name))}
    try:
        return build(preset, namespace, overrides, heads)
    except RayPresetError:
        raise
    except PresetConfigError as error:
        raise RayPresetError(error.findings) from None


def prepare_trainer(trainer: Any) -> Any:
    """Ray's ``prepare_trainer`` for every preset's strategy: a strategy on Ray's own classes goes to Ray's (which
    accepts only those); one on :class:`RayModelParallel` is checked the same way here (it must run in Ray's
    ``RayLightningEnvironment``, which gives Lightning Ray's ranks and world)."""
    ray_lightning = _ray_lightning()
    if not isinstance(trainer.strategy, RayModelParallel):
        return ray_lightning.prepare_trainer(trainer)
    environment = getattr(trainer.strategy, "cluster_environment", None)
    if environment is not None and not isinstance(environment, ray_lightning.RayLightningEnvironment):
        raise RuntimeError(f"{type(trainer.strategy).__name__} runs under Ray Train in Ray's environment, but the "
                           f"Trainer has {type(environment).__name__}: pass "
                           "plugins=[ray.train.lightning.RayLightningEnvironment()] to the Trainer")  # fmt: skip
    return trainer


def __getattr__(name: str) -> type:
    """``Guarded<RayClass>`` heads for unpickling in a worker that has not built one yet."""
    if name.startswith("Guarded") and name[len("Guarded") :] in RAY_STRATEGIES.values():
        return _head(_ray_class(name[len("Guarded") :]))
    raise AttributeError(name)
