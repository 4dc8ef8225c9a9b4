"""xla_fsdp_ckpt (Fabric): torch_xla cannot be installed beside torch 2.13 here.

What runs for real: the missing-torch_xla path, a torch_xla that fails to import (a fake package in a
subprocess) and the version-pair table. Construction guards run with a simulated torch_xla: mock modules in
``sys.modules`` and Lightning's availability flags set, the way Lightning's own tests simulate XLA.
"""

from __future__ import annotations

import importlib
import pickle
import sys
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from lightning.fabric import Fabric
from lightning.fabric.plugins.precision import HalfPrecision
from torch import nn

import lightning_presets
from helpers import run_python
from lightning_presets import PresetConfigError, PresetWarning
from lightning_presets.registry import requirements

_XLA_MODULES = (
    "torch_xla",
    "torch_xla.core",
    "torch_xla.core.xla_model",
    "torch_xla.distributed",
    "torch_xla.distributed.fsdp",
    "torch_xla.distributed.fsdp.wrap",
    "torch_xla.experimental",
    "torch_xla.runtime",
)
_LIGHTNING_XLA = (
    "lightning.fabric.accelerators.xla",
    "lightning.fabric.plugins.environments.xla",
    "lightning.fabric.plugins.io.xla",
    "lightning.fabric.plugins.precision.xla",
    "lightning.fabric.strategies.launchers.xla",
    "lightning.fabric.strategies.xla_fsdp",
)


@pytest.fixture
def fake_xla(monkeypatch: pytest.MonkeyPatch) -> mock.MagicMock:
    """A torch_xla stand-in and Lightning's XLA flags on; the XLA accelerator sees 8 devices."""
    for variable in ("XLA_USE_BF16", "XLA_USE_F16"):  # XLAPrecision sets them; restored after the test
        monkeypatch.delenv(variable, raising=False)
    torch_xla = mock.MagicMock(name="torch_xla")
    torch_xla.XlaFullyShardedDataParallel = FakeXLAFSDP
    for name in _XLA_MODULES:
        monkeypatch.setitem(sys.modules, name, torch_xla)
    for name in _LIGHTNING_XLA:
        module = importlib.import_module(name)
        for flag in ("_XLA_AVAILABLE", "_XLA_GREATER_EQUAL_2_1", "_XLA_GREATER_EQUAL_2_5"):
            if hasattr(module, flag):
                monkeypatch.setattr(module, flag, True)
    accelerator = importlib.import_module("lightning.fabric.accelerators.xla").XLAAccelerator
    monkeypatch.setattr(accelerator, "is_available", staticmethod(lambda: True))
    monkeypatch.setattr(accelerator, "auto_device_count", staticmethod(lambda: 8))
    return torch_xla


class FakeXLAFSDP(nn.Module):
    """Stands in for torch_xla's XlaFullyShardedDataParallel: records what it was built with."""

    def __init__(self, module: nn.Module, **kwargs: Any) -> None:
        super().__init__()
        self.module = module
        self.kwargs = kwargs


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(16, 2, 32) for _ in range(2))


def test_missing_torch_xla_is_an_install_hint() -> None:
    if requirements.is_importable("torch_xla"):
        pytest.skip("torch_xla is installed here")
    with pytest.raises(PresetConfigError) as excinfo:
        Fabric(strategy="xla_fsdp_ckpt", accelerator="cpu", devices=2)
    assert excinfo.value.codes == ("LP007",)
    assert excinfo.value.findings[0].hint == "install it with: pip install 'torch-xla>=2.1'"


def test_broken_torch_xla_reports_its_first_error_line(tmp_path: Path) -> None:
    package = tmp_path / "torch_xla"
    package.mkdir()
    (package / "__init__.py").write_text('raise ImportError("libtpu.so: cannot open shared object file\\nmore")\n')
    result = run_python(
        """
        import lightning_presets
        from lightning.fabric import Fabric
        try:
            Fabric(strategy="xla_fsdp_ckpt", accelerator="cpu", devices=2)
        except lightning_presets.PresetConfigError as error:
            print("CODES", error.codes)
            print("MESSAGE", error.findings[0].message)
        """,
        env={"PYTHONPATH": str(tmp_path)},
    )
    assert "CODES ('LP501',)" in result.stdout, result.stdout + result.stderr
    assert "fails to import: ImportError: libtpu.so: cannot open shared object file" in result.stdout


def test_torch_xla_for_another_torch_release_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    versions = {"torch_xla": "2.12.0", "torch": "2.13.0"}
    monkeypatch.setattr(requirements, "installed_version", lambda name: versions.get(name))
    monkeypatch.setattr(requirements, "is_importable", lambda name: True)
    with pytest.raises(PresetConfigError) as excinfo:
        Fabric(strategy="xla_fsdp_ckpt", accelerator="cpu", devices=2)
    assert excinfo.value.codes == ("LP502",)
    assert "torch 2.13.0 with torch_xla 2.12.0 is known not to work" in excinfo.value.findings[0].message


@pytest.mark.parametrize(("torch", "xla", "bad"), [("2.13.0", "2.12.0", True), ("2.5.1", "2.5.0", False)])
def test_torch_xla_pair_table(torch: str, xla: str, bad: bool) -> None:
    pair = requirements.known_bad_pair(requirements.DEPENDENCIES["torch_xla"], torch, xla)
    assert (pair is not None) is bad


def test_there_is_no_trainer_form() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("xla_fsdp_ckpt")
    assert excinfo.value.codes == ("LP008",)


def test_constructs_on_a_simulated_tpu_host(fake_xla: mock.MagicMock) -> None:
    built = Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8)
    context = built.strategy._lp_context
    assert (context.accelerator, context.world_size, context.precision_plugin) == ("xla", 8, "XLAPrecision")


def test_lp503_wrong_accelerator(fake_xla: mock.MagicMock) -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        Fabric(strategy="xla_fsdp_ckpt", accelerator="cpu", devices=2)
    assert excinfo.value.codes == ("LP503",)
    assert "accelerator='cpu', devices=2" in excinfo.value.findings[0].message


def test_lp504_single_device(fake_xla: mock.MagicMock) -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=1)
    assert excinfo.value.codes == ("LP504",)
    assert "one device per host (1 device(s) × 1 node(s))" in excinfo.value.findings[0].message
    Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices="auto")


def test_lp505_policy_must_be_a_set(fake_xla: mock.MagicMock) -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", activation_checkpointing_policy=[nn.Linear])
    assert excinfo.value.codes == ("LP505",)
    lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", activation_checkpointing_policy={nn.Linear})


def test_lp506_custom_auto_wrapper(fake_xla: mock.MagicMock) -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", auto_wrapper_callable=print)
    assert excinfo.value.codes == ("LP506",)


def test_a_plugin_xla_fsdp_refuses_is_lightnings_construction_error(fake_xla: mock.MagicMock) -> None:
    with pytest.raises(TypeError, match="XLAPrecision"):
        Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8, plugins=[HalfPrecision("bf16-true")])
    built = Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8, precision="bf16-true")
    assert built.strategy._lp_context.precision == "bf16-true"


def test_setup_module_checkpoints_the_repeated_blocks(fake_xla: mock.MagicMock) -> None:
    strategy: Any = Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8).strategy
    wrapped = strategy.setup_module(Blocks())
    assert strategy._activation_checkpointing_policy == {nn.TransformerEncoderLayer}
    assert strategy._auto_wrap_policy == {nn.TransformerEncoderLayer}
    assert isinstance(wrapped, FakeXLAFSDP)
    assert {"auto_wrap_policy", "auto_wrapper_callable"} <= set(wrapped.kwargs)


def test_lp508_no_repeated_block_warns(fake_xla: mock.MagicMock) -> None:
    strategy: Any = Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8).strategy
    with pytest.warns(PresetWarning, match=r"\[LP508\]"):
        wrapped = strategy.setup_module(nn.Linear(4, 4))
    assert strategy._activation_checkpointing_policy is None
    assert "auto_wrapper_callable" not in wrapped.kwargs


def test_the_strategy_survives_pickling_for_spawned_processes(fake_xla: mock.MagicMock) -> None:
    """XLA launches with spawn, which pickles the strategy; its class is made at run time."""
    strategy: Any = Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8, precision="bf16-true").strategy
    copy = pickle.loads(pickle.dumps(strategy))
    assert type(copy) is type(strategy)
    assert copy.precision.precision == "bf16-true"
    assert copy._lp_options == dict(strategy._lp_options)
    assert len(copy.parallel_devices) == 8
