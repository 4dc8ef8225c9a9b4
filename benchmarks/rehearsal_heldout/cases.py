"""Held-out rehearsal cases (issue 35, item 9): failures from public threads that happen at set-up or at the first
training/validation step, of classes the project had no rule for, and legal configurations from the same kind of
threads. Gathered before the rehearsal existed; no URL here is used anywhere else in the project (checked by grep).

Each case: the thread, what went wrong there, the expected outcome (``flag`` or ``accept``), the job (a preset, on
the simulated hardware) and the model (``rehearsal_models:CLASS``, the thread's model cut down to the one thing that
matters). ``stage`` says where the real run fails: ``setup`` (fit's optimizer/scheduler set-up), ``step`` (the first
training step, its logging or scheduler update) or ``validation`` (the first validation step: the sanity check).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

GH = "https://github.com/"
CPU2 = {"strategy": "ddp_static_graph", "accelerator": "cpu", "devices": 2}
GPU8 = {"strategy": "fsdp2", "accelerator": "cuda", "devices": 8}
DS = {"strategy": "deepspeed_zero2_offload", "accelerator": "cuda", "devices": 8}


@dataclass(frozen=True)
class Case:
    id: str
    source: str
    wrong: str
    expected: str  # flag | accept
    model: str
    stage: str = ""
    job: dict[str, Any] = field(default_factory=lambda: dict(CPU2))
    gpus: int = 0
    real: dict[str, Any] = field(default_factory=dict)
    """Trainer arguments of the single-process CPU run that confirms the expected outcome (``--verify``)."""
    stale: str = ""
    """Why the thread's failure does not happen with the installed Lightning (found by ``--verify`` at first contact,
    before any change): reported, and counted apart from the misconfigurations that still fail."""


def _gpu(job: dict[str, Any]) -> dict[str, Any]:
    return {"job": dict(job), "gpus": 8}


MISCONFIGURATIONS = [
    Case(
        "R01",
        GH + "LearnedVector/A-Hackers-AI-Voice-Assistant/issues/54",
        "ReduceLROnPlateau returned without a monitor: MisconfigurationException when fit sets up the optimizers",
        "flag",
        "PlateauNoMonitor",
        "setup",
    ),
    Case(
        "R02",
        GH + "QData/spacetimeformer/issues/79",
        "the same refusal, the scheduler returned in the two-lists form",
        "flag",
        "PlateauNoMonitorLists",
        "setup",
        **_gpu(GPU8),
    ),
    Case(
        "R03",
        GH + "DiffEqML/torchdyn/issues/43",
        "ReduceLROnPlateau on monitor='loss' with interval='step': 'loss' is never logged, so the scheduler update "
        "after the first step raises",
        "flag",
        "PlateauUnloggedMetric",
        "step",
    ),
    Case(
        "R04",
        GH + "Lightning-AI/pytorch-lightning/issues/6525",
        "configure_optimizers returned (optimizer, scheduler) as one tuple: Lightning refuses the configuration",
        "flag",
        "TupleOptimizerScheduler",
        "setup",
    ),
    Case(
        "R05",
        GH + "project-lighter/lighter/pull/16",
        "a list of schedulers under 'lr_scheduler' in the optimizer dict: AttributeError in Lightning's set-up",
        "flag",
        "SchedulerListInDict",
        "setup",
    ),
    Case(
        "R06",
        GH + "Lightning-AI/pytorch-lightning/issues/7750",
        "training_step returned a dict without 'loss': MisconfigurationException at the first step",
        "flag",
        "DictWithoutLoss",
        "step",
    ),
    Case(
        "R07",
        GH + "Lightning-AI/pytorch-lightning/issues/3041",
        "training_step returned {'train_loss': ..., 'log': ...} and no 'loss'",
        "flag",
        "DictWithLogNoLoss",
        "step",
        **_gpu(GPU8),
    ),
    Case(
        "R08",
        GH + "Lightning-AI/pytorch-lightning/issues/2282",
        "layers assigned to local names (self_layer = ...): 'optimizer got an empty parameter list'",
        "flag",
        "LayersAsLocals",
        "setup",
    ),
    Case(
        "R09",
        GH + "Lightning-AI/pytorch-lightning/issues/6554",
        "layers created inside forward: the optimizer gets an empty parameter list",
        "flag",
        "LayersInForward",
        "setup",
    ),
    Case(
        "R10",
        GH + "Lightning-AI/pytorch-lightning/issues/18222",
        "an optimizer whose step runs the closure under no_grad: 'element 0 of tensors does not require grad' at the "
        "first backward",
        "flag",
        "NoGradOptimizer",
        "step",
        stale="the real run on Lightning 2.6 trains: its closure runs training_step with gradients enabled",
    ),
    Case(
        "R11",
        GH + "Joluck/RWKV-PEFT/issues/57",
        "`idx, targets = batch` on a batch of three: 'too many values to unpack' in the first training_step",
        "flag",
        "UnpackThree",
        "step",
    ),
    Case(
        "R12",
        GH + "Lightning-AI/pytorch-lightning/issues/1221",
        "validation_step unpacks three values from a batch of two: ValueError in the sanity check",
        "flag",
        "ValidationUnpack",
        "validation",
    ),
    Case(
        "R13",
        GH + "andreamad8/ToDCL/issues/1",
        "self.log of a str: ValueError 'str values cannot be logged' at the first step",
        "flag",
        "LogString",
        "step",
    ),
    Case(
        "R14",
        GH + "Lightning-AI/pytorch-lightning/issues/7370",
        "self.log of a tensor with more than one element: ValueError at the first step",
        "flag",
        "LogVector",
        "step",
        **_gpu(GPU8),
    ),
    Case(
        "R15",
        GH + "ashleve/lightning-hydra-template/issues/202",
        "self.log of one name twice with different arguments in training_step: MisconfigurationException",
        "flag",
        "LogTwiceDifferently",
        "step",
    ),
    Case(
        "R16",
        GH + "chemprop/chemprop/issues/925",
        "the head's input size differs from the batch's features: 'mat1 and mat2 shapes cannot be multiplied' in the "
        "first forward",
        "flag",
        "ShapeMismatch",
        "step",
    ),
    Case(
        "R17",
        GH + "VinAIResearch/PSENet-Image-Enhancement/issues/1",
        "loss.backward() inside training_step under automatic optimization: 'Trying to backward through the graph a "
        "second time'",
        "flag",
        "BackwardInStep",
        "step",
    ),
    Case(
        "R18",
        GH + "hpcaitech/ColossalAI/issues/6169",
        "a float32 tensor made in forward meets bf16 activations (bf16-true): 'expected m1 and m2 to have the same "
        "dtype'",
        "flag",
        "Float32InBf16",
        "step",
        stale="the real run trains: Lightning's bf16-true sets the default dtype in forward, so torch.eye is bf16",
        job={**CPU2, "precision": "bf16-true"},
        real={"precision": "bf16-true"},
    ),
    Case(
        "R19",
        GH + "Lightning-AI/pytorch-lightning/pull/5954",
        "DeepSpeed with one optimizer and two schedulers: Lightning's DeepSpeedStrategy refuses 'single optimizer, "
        "single optional scheduler' when fit sets up",
        "flag",
        "DeepSpeedTwoSchedulers",
        "setup",
        **_gpu(DS),
    ),
    Case(
        "R20",
        GH + "EveryVoiceTTS/EveryVoice/issues/26",
        "a scheduler that does not follow torch's LRScheduler API, no lr_scheduler_step override: "
        "MisconfigurationException at set-up",
        "flag",
        "CustomScheduler",
        "setup",
    ),
]

LEGAL = [
    Case(
        "L01",
        GH + "DiffEqML/torchdyn/issues/43",
        "the thread's fix: ReduceLROnPlateau on the logged 'train_loss', interval step, frequency 10",
        "accept",
        "PlateauLoggedMetric",
    ),
    Case(
        "L02",
        GH + "Lightning-AI/pytorch-lightning/issues/6525",
        "the thread's fix: return [optimizer], [scheduler]",
        "accept",
        "ListsOptimizerScheduler",
        **_gpu(GPU8),
    ),
    Case(
        "L03",
        GH + "Lightning-AI/pytorch-lightning/issues/20436",
        "OneCycleLR over trainer.estimated_stepping_batches, stepped every step",
        "accept",
        "OneCycleEstimated",
    ),
    Case(
        "L04",
        GH + "Lightning-AI/pytorch-lightning/issues/19534",
        "a named LambdaLR scheduler dict with interval 'step'",
        "accept",
        "NamedStepScheduler",
    ),
    Case(
        "L05",
        GH + "Lightning-AI/pytorch-lightning/issues/3041",
        "the thread's fix: {'loss': loss, 'log': {...}} (extra keys are allowed)",
        "accept",
        "DictWithLoss",
    ),
    Case(
        "L06",
        GH + "Lightning-AI/pytorch-lightning/issues/18222",
        "the thread's workaround: torch.set_grad_enabled(True) in training_step",
        "accept",
        "NoGradOptimizerGradEnabled",
    ),
    Case(
        "L07",
        GH + "awslabs/gluonts/issues/3157",
        "self.log(..., sync_dist=True, on_epoch=True) on every rank under DDP",
        "accept",
        "SyncDistEveryRank",
    ),
    Case(
        "L08",
        GH + "mmcdermott/MEDS_EIC_AR/issues/48",
        "sync_dist only in validation, training logs without it",
        "accept",
        "SyncDistValidationOnly",
        **_gpu(GPU8),
    ),
    Case(
        "L09",
        GH + "Lightning-AI/pytorch-lightning/pull/14489",
        "logging a one-element tensor of shape [1] (squeezed by Lightning)",
        "accept",
        "LogOneElement",
    ),
    Case(
        "L10",
        GH + "Lightning-AI/pytorch-lightning/issues/11128",
        "OneCycleLR three_phase in [optimizer], [{'scheduler': ..., 'interval': 'step'}]",
        "accept",
        "OneCycleThreePhase",
    ),
    Case(
        "L11",
        GH + "Lightning-AI/pytorch-lightning/pull/5954",
        "DeepSpeed with one optimizer and one scheduler",
        "accept",
        "DeepSpeedOneScheduler",
        **_gpu(DS),
    ),
    Case(
        "L12",
        GH + "Joluck/RWKV-PEFT/issues/57",
        "the fixed loader: (idx, targets) unpacked as two",
        "accept",
        "UnpackTwo",
        job={**CPU2, "precision": "bf16-true"},
        real={"precision": "bf16-true"},
    ),
]
