"""``check --model`` for the Trainer: what ``fit`` validates of the model before it runs anything (LP733).

When ``fit`` starts, on every rank of a launched job, Lightning's configuration validator checks the model against
the Trainer: a ``training_step`` and ``configure_optimizers`` defined, no hooks removed in 2.0, no gradient clipping
or accumulation by the Trainer under manual optimization, not both ``configure_sharded_model`` and
``configure_model``. ``check --model`` runs that same validator here, on the Trainer it built and the model it built
(under fake tensors), so the refusal comes before the job is queued, in Lightning's words.
"""

from __future__ import annotations

import warnings
from typing import Any

from lightning_presets.core.codes import Code
from lightning_presets.core.context import Context
from lightning_presets.core.findings import Finding, PresetConfigError
from lightning_presets.core.rules import condition
from lightning_presets.registry import private
from lightning_presets.tools.check.request import COMMAND as CHECK

_MODEL = "lightning_presets.tools.plan.reference_models:manual_tiny"

FIT_START_REFUSES = Code(
    code="LP733", severity="error", stage="check", title="a model the Trainer's fit refuses before it runs anything",
    evidence="runtime: Lightning's configuration validator raises MisconfigurationException when fit starts, on "
    "every rank",
    fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --gradient-clip-val 1.0 --model {_MODEL}",
    fixed=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model {_MODEL}   # it clips in "
    "training_step (self.clip_gradients)",
)  # fmt: skip

CODES: tuple[Code, ...] = (FIT_START_REFUSES,)


def fit_start_condition(context: Context) -> list[Finding]:
    """``check`` without ``--model``: LP733's condition, for a Trainer that clips or accumulates gradients (what
    Lightning refuses under manual optimization when fit starts); it repeats the call as the presets' conditions do."""
    if context.kind != "trainer":
        return []
    accumulate = context.accumulate_grad_batches or context.arguments.get("accumulate_grad_batches")
    used = [name for name, active in (("gradient_clip_val", context.clipping is not None),
            ("accumulate_grad_batches", isinstance(accumulate, int) and accumulate > 1)) if active]  # fmt: skip
    if not used:
        return []
    return [
        condition(
            FIT_START_REFUSES.code, context.call(*used),
            f"fit refuses a manually optimizing model on every rank when it starts ({' and '.join(used)} set in the "
            "Trainer: manual optimization does that in training_step)",
            "your LightningModule uses automatic optimization (automatic_optimization stays True)",
            "by `check --model` (Lightning's own fit-start validation), else when fit starts",
        )
    ]  # fmt: skip


def fit_start_findings(trainer: Any, model: Any, spec: str, call: str) -> list[Finding]:
    """LP733 when Lightning's fit-start validation refuses ``model`` on ``trainer`` (a Trainer; Fabric has none)."""
    from lightning.pytorch import LightningModule, Trainer
    from lightning.pytorch.trainer.states import TrainerFn
    from lightning.pytorch.utilities.exceptions import MisconfigurationException

    if not isinstance(trainer, Trainer) or not isinstance(model, LightningModule):
        return []
    saved = trainer.state.fn
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the validator's warnings (no val_dataloader) and the guards', said before
        try:
            trainer.strategy.connect(model)  # what fit does first: the strategy holds the model the validator reads
        except PresetConfigError:  # the model-stage guards refused it: already among the findings
            return []
        except Exception:  # a strategy that cannot hold the fake-built model here: fit's own validation decides
            return []
        trainer.state.fn = TrainerFn.FITTING
        try:
            private.verify_loop_configurations(trainer)
        except (MisconfigurationException, NotImplementedError, RuntimeError) as error:
            return [
                FIT_START_REFUSES.finding(
                    f"{call}: when fit starts, Lightning refuses {spec} ({type(model).__name__}) on every rank: "
                    f"{type(error).__name__}: {error}",
                    "change what Lightning's message names (in the model or the Trainer's arguments), then check again",
                )
            ]
        finally:
            trainer.state.fn = saved
    return []
