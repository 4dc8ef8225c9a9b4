"""What ``check`` and the documented examples patch in Lightning: an interactive session, the external-callback
scan done once, and ``fit``/``setup`` that run only the guards; and the cluster environment Lightning selects in the
simulated variables."""

from __future__ import annotations

import contextlib
import importlib
import warnings
from collections.abc import Iterator
from typing import Any, NamedTuple
from unittest import mock

from lightning_presets.registry import private


class Selected(NamedTuple):
    """The cluster environment Lightning's connector selects, and what its constructor raised (``None``: nothing)."""

    environment: str
    """Its class name."""
    refusal: str | None


def selected_environment(kind: str) -> Selected:
    """The cluster environment the ``kind`` (``trainer``/``fabric``) connector selects in this process's variables, run
    as on a connector given no environment (Lightning's own detection order and constructors). An environment whose
    constructor refuses the variables (SLURM's without ``SLURM_NTASKS_PER_NODE``) is named with the refusal; one that
    raises before any environment is made is ``LightningEnvironment``, with the refusal."""
    from lightning.fabric.plugins.environments import ClusterEnvironment

    with warnings.catch_warnings():  # SLURM's environment warns about srun; the check reports through its rules
        warnings.simplefilter("ignore")
        try:
            chosen = private.choose_cluster_environment(private.connector_class(kind))
        except Exception as error:  # the cluster rules say why
            text = str(error).strip() or type(error).__name__
            traceback, refused = error.__traceback__, "LightningEnvironment"
            while traceback is not None:  # the environment whose __init__ raised, if one did
                candidate = traceback.tb_frame.f_locals.get("self")
                if traceback.tb_frame.f_code.co_name == "__init__" and isinstance(candidate, ClusterEnvironment):
                    refused = type(candidate).__name__
                traceback = traceback.tb_next
            return Selected(refused, text)
    return Selected(type(chosen).__name__, None)


@contextlib.contextmanager
def interactive_session() -> Iterator[None]:
    """Lightning believes it runs in a notebook or IPython (its launchers then refuse to re-run a script)."""
    with contextlib.ExitStack() as stack:
        for flag in private.INTERACTIVE_FLAGS:
            stack.enter_context(mock.patch(flag, True))
        yield


def _callbacks_loader(original: Any) -> Any:
    """Lightning's external-callback loader with the entry-point scan done once per session.

    Lightning scans every installed distribution's metadata in each ``Trainer()``/``Fabric()`` (about 6 ms);
    the factories themselves are still loaded and called every time, as Lightning does.
    """
    from importlib.metadata import entry_points

    groups: dict[str, Any] = {}

    def load(group: str) -> list[Any]:
        if group not in groups:
            groups[group] = tuple(entry_points(group=group))
        if not groups[group]:
            return []
        return list(original(group))

    return load


@contextlib.contextmanager
def entry_points_scanned_once() -> Iterator[None]:
    """Lightning's external-callback loaders scan the installed distributions once while this lasts."""
    with contextlib.ExitStack() as stack:
        for module_name, loader in private.EXTERNAL_CALLBACK_LOADERS:
            module = importlib.import_module(module_name)
            original = getattr(module, loader)
            stack.enter_context(mock.patch.object(module, loader, new=_callbacks_loader(original)))
        yield


def _dry_fit(trainer: Any, model: Any, *args: Any, ckpt_path: Any = None, **kwargs: Any) -> None:
    """``Trainer.fit`` without training: the guards' trainer, model, setup and (given ``ckpt_path``) resume stages,
    in Lightning's order."""
    strategy = trainer.strategy
    if hasattr(strategy, "_lp_check_trainer"):
        strategy._lp_check_trainer(trainer)
        strategy._lp_check_model(model)
        with _model_configured(strategy, model):
            strategy._lp_check_setup(model)
        if ckpt_path is not None:
            strategy._lp_check_resume(ckpt_path, how="fit(ckpt_path=...)", restores_optimizer=True)


@contextlib.contextmanager
def _model_configured(strategy: Any, model: Any) -> Iterator[None]:
    """What ModelParallelStrategy's setup does before the setup stage, for a model that overrides ``configure_model``:
    the (data, tensor) mesh, set on the model, then ``configure_model()``. It runs in a fake process group on CPU (the
    world's ranks exist and nothing is sent), so a model that applies tensor parallelism or ``fully_shard`` itself
    reaches the setup rules with its DTensor parameters."""
    from lightning.pytorch import LightningModule
    from lightning.pytorch.utilities.model_helpers import is_overridden

    data, tensor = private.parallel_sizes_of(strategy)
    configures = isinstance(model, LightningModule) and is_overridden("configure_model", model)
    if data is None or tensor is None or not configures:
        yield
        return
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    data = int(strategy.num_nodes if data == "auto" else data)  # Lightning's own meaning of "auto" here
    tensor = int(strategy.num_processes if tensor == "auto" else tensor)
    if dist.is_initialized() or data * tensor != strategy.num_nodes * strategy.num_processes:
        yield
        return
    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=data * tensor)
    try:
        names = ("data_parallel", "tensor_parallel")
        private.set_device_mesh(model, init_device_mesh("cpu", (data, tensor), mesh_dim_names=names))
        model.configure_model()
        yield
    finally:
        dist.destroy_process_group()


def _dry_setup(fabric: Any, module: Any, *optimizers: Any, **kwargs: Any) -> Any:
    """``Fabric.setup``/``setup_module`` without wrapping: the guards' model, setup and optimizers stages."""
    strategy = fabric.strategy
    if hasattr(strategy, "_lp_check_model"):
        strategy._lp_check_model(module)
        strategy._lp_check_setup(module)
        strategy._lp_check_optimizers(module, optimizers)
    return (module, *optimizers) if optimizers else module


@contextlib.contextmanager
def dry_runs() -> Iterator[None]:
    """``Trainer.fit`` and ``Fabric.setup``/``setup_module`` run only the guards' stages: nothing trains."""
    from lightning.fabric import Fabric
    from lightning.pytorch import Trainer

    with (
        mock.patch.object(Trainer, "fit", _dry_fit),
        mock.patch.object(Fabric, "setup", _dry_setup),
        mock.patch.object(Fabric, "setup_module", _dry_setup),
    ):
        yield
