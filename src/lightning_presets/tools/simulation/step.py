"""The training step Lightning's automatic optimization runs, as the trace runs it.

Lightning (``loops/optimization/automatic.py``) runs, per batch: the module's ``training_step`` inside the
precision plugin's forward context, then ``zero_grad`` (so the previous step's gradients are alive during the
forward), then backward, then the optimizer step; the gradients stay alive until the next ``zero_grad``.
The forward context is the plugin's: ``MixedPrecision`` (DDP, ``ModelParallelStrategy``) autocasts with
``cache_enabled=False``, ``FSDPPrecision`` with autocast's default cache, ``DeepSpeedPrecision`` converts the
module instead. A module without a ``training_step`` (a plain ``nn.Module``) is stepped on the sum of its
outputs, and the plan says so.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, cast

import torch
from torch import nn
from torch.utils._pytree import tree_flatten

from lightning_presets.registry import private
from lightning_presets.tools.simulation import user_model
from lightning_presets.tools.simulation.user_model import Batch

_DTYPES = {"bf16": torch.bfloat16, "16": torch.float16, "32": torch.float32, "64": torch.float64}


def precision_dtypes(precision: str, compute: str) -> tuple[torch.dtype | None, torch.dtype | None]:
    """(dtype the module is converted to, autocast dtype) for a Lightning precision and a layout's compute."""
    dtype = _DTYPES[precision.split("-")[0]]
    if compute == "autocast":
        return None, dtype
    if compute == "half_weights":
        return dtype, dtype
    return (None if dtype == torch.float32 else dtype), None


def forward_context(precision: str, compute: str) -> tuple[contextlib.AbstractContextManager[Any], str]:
    """The precision plugin's forward context on the trace's (CPU) device, and what it is, in words."""
    _, autocast = precision_dtypes(precision, compute)
    if autocast is None:
        return contextlib.nullcontext(), f"precision: {precision}, the module and the batch in that dtype"
    if compute == "autocast":
        from lightning.pytorch.plugins.precision import MixedPrecision

        plugin = MixedPrecision(precision, device="cpu")
        return plugin.forward_context(), (f"precision: {precision}, the forward under Lightning's MixedPrecision "
                                          f"autocast ({str(autocast).removeprefix('torch.')}, cache_enabled=False); "
                                          "the cast lists are the CPU's")  # fmt: skip
    name = str(autocast).removeprefix("torch.")
    return torch.autocast("cpu", dtype=autocast), (f"precision: {precision}, FSDP1 ({name} weights, "
                                                   "FSDPPrecision's autocast with its default cast cache)")  # fmt: skip


def lightning_step(model: nn.Module) -> bool:
    """Whether Lightning would run the module's own ``training_step`` with automatic optimization."""
    from lightning.pytorch import LightningModule

    return (isinstance(model, LightningModule) and type(model).training_step is not LightningModule.training_step
            and bool(model.automatic_optimization))  # fmt: skip


def why_not_lightning_step(model: nn.Module) -> str:
    from lightning.pytorch import LightningModule

    if not isinstance(model, LightningModule):
        return f"{type(model).__name__} is not a LightningModule"
    if type(model).training_step is LightningModule.training_step:
        return f"{type(model).__name__} defines no training_step"
    return f"{type(model).__name__} uses manual optimization, which is not traced"


def loss(model: nn.Module, batch: Batch, *, through_root: bool, spec: str) -> torch.Tensor:
    """The loss of one step: ``training_step(batch, 0)`` as Lightning reads its output, or the sum of the outputs.

    ``through_root``: the step goes through the root module's ``__call__`` (the FSDP2 presets route it so,
    so that FSDP2's root hooks run), with Lightning's own redirection.
    """
    if not lightning_step(model):
        args, kwargs = user_model.as_arguments(batch.value)
        return scalar_loss(model(*args, **kwargs))
    from lightning.pytorch.loops.optimization.automatic import ClosureResult

    if through_root:
        output = private.forward_redirection()(model, model, "training_step", batch.value, 0)
    else:
        output = cast(Any, model).training_step(batch.value, 0)
    try:
        closure = ClosureResult.from_training_step_output(output)
    except Exception as error:  # Lightning's MisconfigurationException: the step's output is not a loss
        raise user_model.ModelError(f"{spec}: training_step({batch.source}, 0): {error}") from None
    if closure.closure_loss is None:
        raise user_model.ModelError(f"{spec}: training_step({batch.source}, 0) returned None, so Lightning would skip "
                                    "the optimizer step: there is no step to plan; give a batch it trains on "
                                    "(--batch MODULE:FUNCTION)")  # fmt: skip
    value: torch.Tensor = closure.closure_loss
    return value


def scalar_loss(output: Any) -> torch.Tensor:
    """The sum of every floating-point tensor in the output: a loss with no buffers of its own."""
    leaves = [leaf for leaf in tree_flatten(output)[0] if isinstance(leaf, torch.Tensor) and leaf.is_floating_point()]
    if not leaves:
        raise user_model.ModelError("the forward returned no floating-point tensor to take a loss of")
    total = leaves[0].float().sum()
    for leaf in leaves[1:]:
        total = total + leaf.float().sum()
    return total


def describe_step(model: nn.Module, batch: Batch) -> str:
    if lightning_step(model):
        return (f"step: {type(model).__name__}.training_step({batch.source}, 0), then zero_grad, backward and the "
                "optimizer step, as Lightning's automatic optimization runs them (the previous step's gradients "
                "alive until zero_grad)")  # fmt: skip
    return (f"step: the forward of {batch.source} and a loss that is the sum of the outputs ("
            f"{why_not_lightning_step(model)}); backward and the optimizer step")  # fmt: skip


def describe_optimizers(optimizers: list[torch.optim.Optimizer], source: str) -> str:
    """``optimizer: AdamW(lr=0.0003, foreach=True) from configure_optimizers``."""
    shown = ("lr", "momentum", "betas", "weight_decay", "foreach", "fused")
    parts = []
    for optimizer in optimizers:
        settings = optimizer.param_groups[0] if optimizer.param_groups else {}
        text = ", ".join(f"{key}={settings[key]!r}" for key in shown if settings.get(key) is not None)
        parts.append(f"{type(optimizer).__name__}({text})")
    return f"optimizer: {', '.join(parts)} from {source}"


# --------------------------------------------------------------------------------------------- torch.compile


def compiled_modules(model: nn.Module) -> int:
    """How many modules of ``model`` run compiled (``torch.compile(module)`` or ``module.compile()``)."""
    from torch._dynamo.eval_frame import OptimizedModule

    return sum(isinstance(each, OptimizedModule) or getattr(each, "_compiled_call_impl", None) is not None
               for each in model.modules())  # fmt: skip


def uncompiled(model: nn.Module) -> tuple[nn.Module, bool]:
    """The module inside a ``torch.compile`` wrapper, as ``Trainer.fit`` unwraps it (and recompiles it later)."""
    from torch._dynamo.eval_frame import OptimizedModule

    if isinstance(model, OptimizedModule):
        inner: nn.Module = model._orig_mod
        return inner, True
    return model, False


@contextlib.contextmanager
def eager() -> Iterator[None]:
    """Compiled modules run their Python code eagerly (dynamo off): fake tensors are not compiled."""
    import torch._dynamo

    with torch._dynamo.config.patch(disable=True):
        yield


EAGER_ESTIMATE = ("eager estimate: {count} torch.compile'd module(s) traced eagerly; compiled code fuses operations "
                  "and usually keeps fewer activations than this")  # fmt: skip
