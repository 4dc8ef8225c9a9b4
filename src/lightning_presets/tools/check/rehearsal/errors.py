"""What an exception raised in the strategy's set-up rehearsal means (:mod:`.setup`, :mod:`.fsdp1`, and the Fabric
and DeepSpeed plug-ins): the job's error, :data:`SETUP_FAILS` (LP750) or :data:`STEP_FAILS` (LP751), or the
rehearsal's own limit (CUDA, the fake world, the job's data elsewhere; reported as LP743, a warning)."""

from __future__ import annotations

import os
import traceback
from pathlib import Path

from lightning_presets.core.codes import Code
from lightning_presets.tools.check.rehearsal.findings import StageRecord
from lightning_presets.tools.check.rehearsal.job import _first
from lightning_presets.tools.check.request import COMMAND as CHECK

SETUP_FAILS = Code(
    code="LP750", severity="error", stage="check",
    title="the strategy's set-up raises on the user's model (configure_model on the job's device mesh, the wrapper, "
    "the optimizers over the wrapped parameters)",
    evidence="runtime: Trainer.fit of the fsdp2 preset on 2 CPU processes (gloo) raises in configure_model on the "
    "preset's device mesh, on every rank, before the first step; the rehearsal raises the same exception at the "
    "same line",
    fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:WrongMeshName   "
    '# configure_model reads self.device_mesh["tp"]; the preset\'s mesh names tensor_parallel',
    fixed=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:Sharded",
)  # fmt: skip

STEP_FAILS = Code(
    code="LP751", severity="error", stage="check",
    title="the first training step raises through the strategy's wrapping (DDP, FSDP2, tensor parallel) though "
    "it runs on the unwrapped model",
    evidence="runtime: Trainer.fit of the fsdp2 preset on 2 CPU processes (gloo) raises in the first training step "
    "on every rank (the forward reads a sharded parameter outside its FSDP unit); the rehearsal raises the same "
    "exception",
    fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:ReadsSharedWeight   "
    "# forward uses self.blocks[0].lin.weight outside the block",
    fixed=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:Sharded",
)  # fmt: skip

CODES: tuple[Code, ...] = (SETUP_FAILS, STEP_FAILS)

_LIMITS = ("cuda", "nccl", "nvidia", "triton", "flash_attn", "transformer_engine", "bitsandbytes", "pin_memory",
           "accelerator device", "mirrorgroup", "not implemented for the fake", "fake process group")  # fmt: skip

_DATA_LIMIT = "loading the model's data"

_DATA_HOOKS = ("prepare_data", "train_dataloader", "val_dataloader", "setup_dataloaders")

_OWN_FILES = frozenset(str(Path(__file__).with_name(name)) for name in ("setup.py", "job.py", "mirror.py",
                                                                         "errors.py", "fsdp1.py"))  # fmt: skip
"""The rehearsal's own modules (one module, ``setup.py``, before it was split): an exception whose last frames are
in them was raised by the rehearsal itself (its process group), not by the job."""


def limitation(error: BaseException) -> str:
    """Why ``error`` is the rehearsal's own limit (CUDA, the fake world), or empty."""
    from lightning_presets.tools.check.rehearsal.findings import FORKED_AUTOGRAD

    text = f"{type(error).__name__}: {error}".lower()
    if "autograd" in text and "fork" in text:
        return FORKED_AUTOGRAD
    frames = traceback.extract_tb(error.__traceback__)
    data = os.sep.join(("torch", "utils", "data", ""))
    if any(frame.name in _DATA_HOOKS for frame in frames) or any(data in frame.filename for frame in frames):
        return f"{_DATA_LIMIT} raised {type(error).__name__}; the job's data may be where the job runs"
    if any(frame.filename in _OWN_FILES for frame in frames[-2:]):  # raised in the mirror group itself
        return "the rehearsal's process group"
    hit = next((word for word in _LIMITS if word in text), None)
    return f"needs what a CPU rehearsal lacks ({hit})" if hit else ""


def _raised(name: str, stage: str, error: BaseException) -> StageRecord:
    from lightning_presets.tools.check.rehearsal.child import user_line

    exception = f"{type(error).__name__}: {_first(error)}"
    why = limitation(error)
    if why.startswith(_DATA_LIMIT):  # the child's own fit loads the same data and says so once (LP743)
        return StageRecord(name=name, outcome="not rehearsed", exception=exception, detail=why)
    if why:
        return StageRecord(name=name, outcome="raised", exception=exception, line=user_line(error),
                           detail=f"the rehearsal's limit: {why}")  # fmt: skip
    code = STEP_FAILS if stage == "step" else SETUP_FAILS
    return StageRecord(name=name, outcome="raised", exception=exception, line=user_line(error), code=code.code,
                       detail="a real run raises it on every rank at the same stage; change what the exception "
                       "names, then check again")  # fmt: skip
