"""XLA FSDP (xla_fsdp_ckpt). torch_xla is not installed here: each proof executes the Lightning code that fails and
needs no TPU (the availability check, ``setup_environment``, ``_activation_checkpointing_kwargs``) with the preset's
values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from proof import Proof


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
