"""What ``check`` and the documented examples patch in Lightning: an interactive session, the external-callback
scan done once, and ``fit``/``setup`` that run only the guards."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any
from unittest import mock

_INTERACTIVE_FLAGS = ("lightning.pytorch.trainer.connectors.accelerator_connector", "lightning.fabric.connector")


@contextlib.contextmanager
def interactive_session() -> Iterator[None]:
    """Lightning believes it runs in a notebook or IPython (its launchers then refuse to re-run a script)."""
    with contextlib.ExitStack() as stack:
        for module in _INTERACTIVE_FLAGS:
            stack.enter_context(mock.patch(f"{module}._IS_INTERACTIVE", True))
        yield


_CALLBACK_LOADERS = ("lightning.pytorch.trainer.connectors.callback_connector", "lightning.fabric.fabric")


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
        for module_name in _CALLBACK_LOADERS:
            module = importlib.import_module(module_name)
            original = module._load_external_callbacks
            stack.enter_context(mock.patch.object(module, "_load_external_callbacks", new=_callbacks_loader(original)))
        yield


def _dry_fit(trainer: Any, model: Any, *args: Any, ckpt_path: Any = None, **kwargs: Any) -> None:
    """``Trainer.fit`` without training: the guards' trainer, model, setup and (given ``ckpt_path``) resume stages,
    in Lightning's order."""
    strategy = trainer.strategy
    if hasattr(strategy, "_lp_check_trainer"):
        strategy._lp_check_trainer(trainer)
        strategy._lp_check_model(model)
        strategy._lp_check_setup(model)
        if ckpt_path is not None:
            strategy._lp_check_resume(ckpt_path, how="fit(ckpt_path=...)", restores_optimizer=True)


def _dry_setup(fabric: Any, module: Any, *optimizers: Any, **kwargs: Any) -> Any:
    """``Fabric.setup``/``setup_module`` without wrapping: the guards' model and setup stages."""
    strategy = fabric.strategy
    if hasattr(strategy, "_lp_check_model"):
        strategy._lp_check_model(module)
        strategy._lp_check_setup(module)
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
