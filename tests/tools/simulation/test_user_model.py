"""``tools/simulation/user_model.py``: the user's factory built under fake tensors."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

from lightning_presets.tools.simulation.user_model import ModelError, build


class TruncNormal(nn.Module):
    """Initialised as ViT, Swin and DeiT are: ``trunc_normal_`` tests ``mask.any()``, a value fake tensors lack."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16, dtype=torch.bfloat16)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, 16))
        nn.init.trunc_normal_(self.linear.weight, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)


KEPT_AT_IMPORT = {"trunc_normal_": nn.init.trunc_normal_}  # as transformers keeps torch's initialisers


class KeptAtImport(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16)
        KEPT_AT_IMPORT["trunc_normal_"](self.linear.weight, std=0.02)


class ReadsAValue(nn.Module):
    """A factory that itself branches on a weight's value: no initialiser to skip, so it stays untraceable."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 16)
        if bool(self.linear.weight.sum() > 1e9):
            self.extra = nn.Linear(16, 16)


def test_a_value_reading_initialiser_builds_under_fake_tensors_with_the_real_shapes() -> None:
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build(TruncNormal, "models:TruncNormal")
    real = TruncNormal()
    assert [(n, p.shape, p.dtype) for n, p in model.named_parameters()] == [
        (n, p.shape, p.dtype) for n, p in real.named_parameters()
    ]
    assert nn.init.trunc_normal_.__name__ == "trunc_normal_"  # restored after the build
    assert bool(torch.isfinite(real.linear.weight).all())  # outside the build, the initialiser runs


def test_an_initialiser_a_library_kept_at_import_builds_under_fake_tensors() -> None:
    with FakeTensorMode(allow_non_fake_inputs=True):
        model = build(KeptAtImport, "models:KeptAtImport")
    assert model.linear.weight.shape == (16, 8)


def test_a_factory_that_reads_a_value_itself_is_still_said_untraceable() -> None:
    with FakeTensorMode(allow_non_fake_inputs=True), pytest.raises(ModelError, match="cannot run under fake tensors"):
        build(ReadsAValue, "models:ReadsAValue")
