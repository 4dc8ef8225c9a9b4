"""What ``lightning-presets convert`` refuses (LP820-LP824): each refusal writes nothing, leaves the source as it was
and exits 1 with the reason and the fix, never a traceback."""

from __future__ import annotations

from lightning_presets.core.codes import Code

COMMAND = "lightning-presets convert"

UNREADABLE = Code(
    code="LP820", severity="error", stage="convert",
    title="convert's source is not a checkpoint it can read (missing, foreign, corrupt or truncated)",
    evidence="runtime: torch.load of a truncated checkpoint file raises, and torch's reader of a folder without its "
    ".metadata index raises",
    fails=f"{COMMAND} truncated.ckpt out.ckpt   # the file ends early (an interrupted copy)",
    fixed=f"{COMMAND} last.ckpt out.ckpt",
)  # fmt: skip
DESTINATION = Code(
    code="LP821", severity="error", stage="convert",
    title="convert's destination exists (without --force), is the source, or has no folder",
    evidence="runtime: a conversion written over an existing destination replaces the files that were there",
    fails=f"{COMMAND} run.ckpt taken.ckpt   # taken.ckpt exists",
    fixed=f"{COMMAND} run.ckpt taken.ckpt --force",
)  # fmt: skip
MODEL_NEEDED = Code(
    code="LP822", severity="error", stage="convert",
    title="optimizer state to re-key from positions to names without the model (or with a model that is not the "
    "checkpoint's)",
    evidence="runtime: ModelParallelStrategy's load of a folder whose optimizer state is keyed by positions finds "
    "no state under the parameter names and fails",
    fails=f"{COMMAND} ddp.ckpt fsdp2.ckpt --strategy fsdp2 --devices 2   # ddp.ckpt has AdamW's state",
    fixed=f"{COMMAND} ddp.ckpt fsdp2.ckpt --strategy fsdp2 --devices 2 --model my_models:Classifier",
)  # fmt: skip
NOT_VERIFIED = Code(
    code="LP823", severity="error", stage="convert",
    title="the converted checkpoint differs from its source, or the target preset's resume guard refuses it",
    evidence="runtime: a result whose tensors differ from the source's resumes with other weights than the source "
    "holds",
    fails=f"{COMMAND} run.ckpt out.ckpt   # a tensor read back differs from the source's",
    fixed=f"{COMMAND} run.ckpt out.ckpt   # every tensor read back equal, the target's resume guard accepts it",
)  # fmt: skip
CODES: tuple[Code, ...] = (UNREADABLE, DESTINATION, MODEL_NEEDED, NOT_VERIFIED)
