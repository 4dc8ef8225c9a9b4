"""What differs between the supported Lightning releases (2.5, 2.6), and what must not: one test per item of
``lightning_presets.registry.compat``. CI runs this file on every Lightning release it installs (``.ci/run``)."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from unittest import mock

import lightning
import pytest
import torch
from packaging.version import Version
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import lightning_presets
from harness import run_job
from helpers import QUIET, SCRIPTS
from lightning_presets.registry import compat
from lightning_presets.tools.simulation import SimulatedGPU

LIGHTNING = Version(lightning.__version__)

# --- Fabric's setup_module_and_optimizers: (module, optimizers) in 2.5, a scheduler too in 2.6 -------------------


def _without_scheduler(module: Any, optimizers: list[Any]) -> tuple[Any, list[Any]]:
    return module, optimizers


def _with_scheduler(module: Any, optimizers: list[Any], scheduler: Any = None) -> tuple[Any, list[Any], Any]:
    return module, optimizers, scheduler


def test_setup_module_and_optimizers_passes_only_what_the_method_takes() -> None:
    assert compat.setup_module_and_optimizers(_without_scheduler, "m", ["o"], None) == ("m", ["o"])
    assert compat.setup_module_and_optimizers(_with_scheduler, "m", ["o"], "s") == ("m", ["o"], "s")
    assert not compat.takes_scheduler(_without_scheduler)
    assert compat.takes_scheduler(_with_scheduler)


def test_the_installed_fabric_strategy_signature_is_the_one_compat_expects() -> None:
    from lightning.fabric.strategies import Strategy

    takes = compat.takes_scheduler(Strategy.setup_module_and_optimizers)
    assert takes is (Version("2.6") <= LIGHTNING), "a new Lightning changed setup_module_and_optimizers again"


def test_deepspeed_fabric_hook_calls_lightning_with_the_arguments_it_takes(cuda8: SimulatedGPU) -> None:
    """The preset's Fabric hook forwards to Lightning's own method; that method's real signature must bind."""
    pytest.importorskip("deepspeed")
    from lightning.fabric.strategies import DeepSpeedStrategy

    signature = inspect.signature(DeepSpeedStrategy.setup_module_and_optimizers)
    calls = []

    def lightning_method(self: Any, *args: Any) -> Any:
        calls.append(signature.bind(self, *args).arguments)  # TypeError if the hook passes what it does not take
        return "engine", args[1]

    lightning_method.__signature__ = signature  # type: ignore[attr-defined]  # what compat reads, as Lightning's
    strategy = lightning_presets.strategy("deepspeed_zero2_offload", target="fabric")
    model = nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with mock.patch.object(DeepSpeedStrategy, "setup_module_and_optimizers", lightning_method):
        assert strategy.setup_module_and_optimizers(model, [optimizer]) == ("engine", [optimizer])
    (arguments,) = calls
    assert arguments["module"] is model
    assert ("scheduler" in arguments) is ("scheduler" in signature.parameters)


# --- FSDP precision: modules created in fp32 under bf16-fp32-reduce on every release ---------------------------


def test_bf16_fp32_reduce_creates_modules_in_fp32(cuda8: SimulatedGPU) -> None:
    """Lightning 2.5 would create them in the plugin's bf16 parameter dtype: bf16 master weights under FSDP."""
    plugin = lightning_presets.precision("bf16-fp32-reduce", target="fabric")
    assert plugin.mixed_precision_config.param_dtype == torch.bfloat16
    with plugin.module_init_context():
        layer = nn.Linear(2, 2)
    assert layer.weight.dtype == torch.float32
    with plugin.tensor_init_context():
        assert torch.empty(1).dtype == torch.float32


# --- DDP static graph under manual optimization: Lightning 2.5 never all-reduces ---------------------------------


def _ddp_stand_in(*, static_graph: bool) -> Any:
    """A DistributedDataParallel instance without a process group: only what the flush reads."""
    model: Any = DistributedDataParallel.__new__(DistributedDataParallel)
    object.__setattr__(model, "static_graph", static_graph)
    object.__setattr__(model, "reducer", mock.Mock())
    return model


def _strategy(model: Any, *, automatic: bool = False, lightning_flag: bool = False) -> Any:
    strategy = SimpleNamespace(model=model, lightning_module=SimpleNamespace(automatic_optimization=automatic))
    if lightning_flag:
        strategy._pl_static_graph_delay_done = False
    return strategy


def test_flush_runs_once_after_the_first_manual_backward() -> None:
    model = _ddp_stand_in(static_graph=True)
    strategy = _strategy(model)
    assert compat.flush_static_graph_first_backward(strategy) is True
    assert compat.flush_static_graph_first_backward(strategy) is False
    model.reducer._delay_all_reduce.assert_called_once_with()


@pytest.mark.parametrize(
    ("static_graph", "automatic", "lightning_flag"),
    [(False, False, False), (True, True, False), (True, False, True)],
    ids=["no-static-graph", "automatic-optimization", "lightning-flushes-itself"],
)
def test_flush_leaves_other_cases_alone(static_graph: bool, automatic: bool, lightning_flag: bool) -> None:
    model = _ddp_stand_in(static_graph=static_graph)
    assert not compat.flush_static_graph_first_backward(
        _strategy(model, automatic=automatic, lightning_flag=lightning_flag)
    )
    model.reducer._delay_all_reduce.assert_not_called()


def test_lightning_flushes_itself_from_2_6() -> None:
    from lightning.pytorch.strategies import DDPStrategy

    assert compat.lightning_flushes_static_graph(DDPStrategy()) is (Version("2.6") <= LIGHTNING)


@pytest.mark.distributed
def test_manual_optimization_with_ddp_static_graph_syncs_gradients(tmp_path: Path) -> None:
    """Runtime, 2 CPU processes: without the flush, Lightning 2.5 leaves every rank with its own gradients."""
    process = run_job(SCRIPTS / "ddp_manual_static.py", cwd=tmp_path, timeout=180)
    assert process.returncode == 0, process.describe()
    steps = [json.loads(line) for line in re.findall(r"^RESULT (.*)$", process.stdout, re.MULTILINE)]
    assert steps == [{"step": 0, "synced": True}, {"step": 1, "synced": True}]


# --- connector order: registration happens at import, before any connector runs ---------------------------------


def test_the_trainer_connector_registers_no_strategy_of_its_own() -> None:
    """2.5.0–2.5.5 register lightning-habana's names inside ``Trainer()``; 2.5.6 and 2.6 do not."""
    from lightning.pytorch import Trainer
    from lightning.pytorch.strategies import StrategyRegistry

    assert compat.connector_registers_strategies() is (Version("2.5.6") > LIGHTNING)
    before = set(StrategyRegistry)
    Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, **QUIET)
    assert set(StrategyRegistry) == before
    assert "ddp_static_graph" in before  # registered when the strategies module was imported


def test_connector_registration_is_read_from_lightning(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.pytorch.trainer.connectors import accelerator_connector

    monkeypatch.setattr(accelerator_connector, "_register_external_accelerators_and_strategies", lambda: None,
                        raising=False)  # fmt: skip
    assert compat.connector_registers_strategies() is True
    assert compat.HABANA_STRATEGY_NAMES == ("hpu_parallel", "hpu_single")


# --- the same on both: registry shape, the _configure_launcher hook, ModelParallelStrategy's arguments -----------


@pytest.mark.parametrize(
    ("module", "attribute"),
    [("lightning.pytorch.strategies", "StrategyRegistry"), ("lightning.fabric.strategies", "STRATEGY_REGISTRY"),
     ("pytorch_lightning.strategies", "StrategyRegistry"), ("lightning_fabric.strategies", "STRATEGY_REGISTRY")],
)  # fmt: skip
def test_registry_shape(module: str, attribute: str) -> None:
    import importlib

    registry = getattr(importlib.import_module(module), attribute)
    assert isinstance(registry, dict)
    assert list(inspect.signature(registry.register).parameters) == [
        "name", "strategy", "description", "override", "init_params"
    ]  # fmt: skip
    entry = registry["fsdp2"]
    assert set(entry) == {"description", "init_params", "strategy", "strategy_name"}
    assert entry["init_params"] == {}  # a factory, never a shared instance
    assert getattr(entry["strategy"], "__lightning_presets__", None) == "fsdp2"


@pytest.mark.parametrize("caller", ["Trainer", "Fabric"])
def test_configure_launcher_runs_once_as_the_last_step_of_construction(caller: str) -> None:
    from lightning.fabric import Fabric
    from lightning.pytorch import Trainer

    from lightning_presets.guards.strategy import Guarded

    seen: list[dict[str, Any]] = []
    original = Guarded._configure_launcher

    def recording(self: Any) -> None:
        precision = self.precision_plugin if caller == "Trainer" else self.precision
        seen.append({"accelerator": type(self.accelerator).__name__, "devices": len(self.parallel_devices),
                     "num_nodes": self.num_nodes, "precision": precision.precision,
                     "environment": type(self.cluster_environment).__name__})  # fmt: skip
        original(self)

    arguments = {"strategy": "ddp_static_graph", "accelerator": "cpu", "devices": 2, "precision": "bf16-mixed"}
    with mock.patch.object(Guarded, "_configure_launcher", recording):
        built = Trainer(**arguments, **QUIET) if caller == "Trainer" else Fabric(**arguments)
    assert seen == [{"accelerator": "CPUAccelerator", "devices": 2, "num_nodes": 1, "precision": "bf16-mixed",
                     "environment": "LightningEnvironment"}]  # fmt: skip
    assert built.strategy._lp_context is not None
    assert built.strategy._launcher is not None  # Lightning's own _configure_launcher ran after the guards


def test_model_parallel_arguments() -> None:
    from lightning.fabric.strategies import ModelParallelStrategy as FabricModelParallel
    from lightning.pytorch.strategies import ModelParallelStrategy

    trainer = list(inspect.signature(ModelParallelStrategy).parameters)
    fabric = list(inspect.signature(FabricModelParallel).parameters)
    assert trainer[:2] == ["data_parallel_size", "tensor_parallel_size"]
    assert fabric[:3] == ["parallelize_fn", "data_parallel_size", "tensor_parallel_size"]
    strategy = lightning_presets.strategy("tp2d_hybrid", data_parallel_size=1, tensor_parallel_size=2)
    assert (strategy._data_parallel_size, strategy._tensor_parallel_size) == (1, 2)
