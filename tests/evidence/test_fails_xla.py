"""XLA FSDP (xla_fsdp_ckpt). torch_xla is not installed here: each proof executes the Lightning code that fails and
needs no TPU (the availability check, ``setup_environment``, ``_activation_checkpointing_kwargs``) with the preset's
values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from proof import Proof
from torch import nn

import lightning_presets

XLA_FSDP = "xla_fsdp_ckpt"


def fresh_requirement(module: Any, attribute: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Lightning's own requirement check (same requirement string), evaluated afresh against ``sys.path`` now."""
    original = getattr(module, attribute)
    monkeypatch.setattr(module, attribute, type(original)(str(original.requirement)))


def broken_package(site: Path, name: str, version: str, error: str) -> None:
    """An installed package whose import raises ``error`` (a wheel built for another torch, a missing libtpu)."""
    (site / name).mkdir(parents=True)
    (site / name / "__init__.py").write_text(f"raise ImportError({error!r})\n")
    info = site / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


@pytest.mark.proves("LP501")
def test_lp501_lightning_cannot_build_xla_fsdp_on_a_broken_torch_xla(
    proof: Proof, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lightning.fabric.strategies import xla_fsdp

    broken_package(tmp_path, "torch_xla", torch.__version__.split("+")[0], "libtpu.so: cannot open shared object")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(__import__("sys").modules, "torch_xla", raising=False)
    fresh_requirement(xla_fsdp, "_XLA_AVAILABLE", monkeypatch)
    with proof.raises(ModuleNotFoundError, r"torch_xla", code="LP501"):
        xla_fsdp.XLAFSDPStrategy()


def _without_init() -> Any:
    """Lightning's XLAFSDPStrategy without its constructor (which needs torch_xla), for its torch_xla-free methods."""
    from lightning.fabric.strategies import XLAFSDPStrategy

    return XLAFSDPStrategy.__new__(XLAFSDPStrategy)


@pytest.mark.proves("LP504")
def test_lp504_xla_fsdp_refuses_a_single_device(proof: Proof) -> None:
    from lightning.fabric import Fabric

    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("torch_xla"):
        proof.refused("LP504", lambda: Fabric(strategy=XLA_FSDP, accelerator="tpu", devices=1))
    strategy = _without_init()
    strategy._parallel_devices = [torch.device("cpu")]  # what devices=1 leaves there
    with proof.raises(NotImplementedError, r"does not support running on a single device", code="LP504"):
        strategy.setup_environment()


@pytest.mark.proves("LP505", "LP506")
def test_lp505_lp506_lightning_refuses_the_checkpointing_arguments(proof: Proof) -> None:
    from lightning.fabric.strategies.xla_fsdp import _activation_checkpointing_kwargs

    from lightning_presets.tools.simulation.stand_ins import standing_in

    def my_wrapper(module: nn.Module, *args: Any, **kwargs: Any) -> nn.Module:
        return module

    with standing_in("torch_xla"):
        proof.refused("LP505", lambda: lightning_presets.strategy(
            XLA_FSDP, target="fabric", activation_checkpointing_policy=[nn.TransformerEncoderLayer]))  # fmt: skip
        proof.refused("LP506", lambda: lightning_presets.strategy(
            XLA_FSDP, target="fabric", auto_wrapper_callable=my_wrapper))  # fmt: skip
    with proof.raises(TypeError, r"`activation_checkpointing_policy` must be a set", code="LP505"):
        _activation_checkpointing_kwargs([nn.TransformerEncoderLayer], {})
    # LP506: the preset sets the policy to the blocks it found, and the user's wrapper is in the kwargs.
    with proof.raises(ValueError, r"cannot set both `auto_wrapper_callable` and", code="LP506"):
        _activation_checkpointing_kwargs({nn.TransformerEncoderLayer}, {"auto_wrapper_callable": my_wrapper})
