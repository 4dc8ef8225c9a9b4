"""``check --model`` for the DDP presets: the parameters one training step leaves without a gradient (LP732).

DDP without ``find_unused_parameters`` (and without a static graph, which records the unused ones in its first step)
expects a gradient for every parameter that requires one; a parameter the loss never reached makes every rank raise
in the next step ("Expected to have finished reduction in the prior iteration"; Lightning rewrites it as "It looks
like your LightningModule has parameters that were not used in producing the loss"). Whether a parameter is used is
only known by running a step, which the guards never do inside a real run: ``check --model`` runs one here, on the
model it has built under fake tensors (shapes, no memory), with the module's ``example_input_array``.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from lightning_presets.core.codes import Code
from lightning_presets.core.context import Context
from lightning_presets.core.findings import Finding
from lightning_presets.core.rules import condition
from lightning_presets.tools.check.request import COMMAND as CHECK

_MODEL = "lightning_presets.tools.plan.reference_models:unused_head_tiny"

UNUSED_PARAMETERS = Code(
    code="LP732", severity="error", stage="check",
    title="parameters one training step leaves without a gradient, under DDP that expects every one",
    evidence="runtime: torch's DDP reducer raises RuntimeError in the second step on every rank (Lightning: 'It looks "
    "like your LightningModule has parameters that were not used in producing the loss')",
    fails=f"{CHECK} --strategy ddp_bf16_compress --accelerator cuda --gpus 8 --devices 8 --model {_MODEL}",
    fixed=f"{CHECK} --strategy ddp_bf16_compress --accelerator cuda --gpus 8 --devices 8 --model {_MODEL} --set "
    "find_unused_parameters=True",
)  # fmt: skip

CODES: tuple[Code, ...] = (UNUSED_PARAMETERS,)
_SHOWN = 5


def _expects_every_gradient(options: Any) -> bool:
    """DDP as the preset builds it reduces every parameter each step: no unused-parameter search, no static graph."""
    return options.get("find_unused_parameters") is not True and options.get("static_graph") is not True


def unused_parameter_condition(context: Context) -> list[Finding]:
    """``check`` without ``--model``: LP732's condition, for a DDP job that expects every gradient (the call repeated
    as the presets' conditions repeat it)."""
    if context.family is None or not context.family.reducer or not _expects_every_gradient(context.options):
        return []
    return [
        condition(
            UNUSED_PARAMETERS.code, context.call(),
            "every rank fails in DDP's second step (it waits for a gradient of every trained parameter)",
            "every trained parameter gets a gradient in every training step (else pass find_unused_parameters=True "
            "to the preset)",
            "by `check --model` (one training step under fake tensors), else in the second step of the run",
        )
    ]  # fmt: skip


def unused_parameter_findings(context: Any, model: nn.Module, spec: str, call: str) -> tuple[list[Finding], list[str]]:
    """LP732 when the job's DDP expects every gradient and one training step of ``model`` (built under the caller's
    fake-tensor mode) leaves some parameter that requires one without it; notes for what could not be run."""
    from lightning_presets.tools.simulation import step, user_model

    family = getattr(context, "family", None)
    if not getattr(family, "reducer", False) or not _expects_every_gradient(getattr(context, "options", {})):
        return [], []
    trained = [(name, parameter) for name, parameter in model.named_parameters() if parameter.requires_grad]
    if not trained:
        return [], []
    if not step.lightning_step(model):  # manual optimization (a GAN's two steps): only the user's step says what runs
        return [], [f"--model {spec}: {step.why_not_lightning_step(model)}, so no step was run to find parameters "
                    "without a gradient; DDP decides it in its second step"]  # fmt: skip
    try:
        batch = user_model.batch(model, spec)
        with user_model.contained(f"{spec}: one training step"):
            torch.autograd.backward(step.loss(model, batch, through_root=False, spec=spec))
    except user_model.ModelError as error:
        return [], [f"{error}: whether every parameter gets a gradient is decided when DDP runs its second step"]
    unused = [name for name, parameter in trained if parameter.grad is None]
    for _, parameter in trained:
        parameter.grad = None
    if not unused:
        return [], []
    listed = ", ".join(unused[:_SHOWN]) + (f" and {len(unused) - _SHOWN} more" if len(unused) > _SHOWN else "")
    return [
        UNUSED_PARAMETERS.finding(
            f"{call}: one training step of {spec} ({batch.source}) leaves {len(unused)} of {len(trained)} trained "
            f"parameters without a gradient ({listed}); DDP without find_unused_parameters waits for every one, so "
            "every rank fails in the second step",
            "pass find_unused_parameters=True to the preset (lightning_presets.strategy(..., find_unused_parameters="
            "True)), or freeze what the loss does not use (requires_grad_(False)); a model whose unused set is the "
            "same every step can use strategy='ddp_static_graph'",
        )
    ], []
