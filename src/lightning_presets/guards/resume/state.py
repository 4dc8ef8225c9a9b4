"""What the resume rules read besides the job's context: :class:`Resume` (the checkpoint's facts and how the job loads
it) and what the job's family loads (its :class:`~lightning_presets.core.family.Checkpoints`)."""

from __future__ import annotations

from dataclasses import dataclass

from lightning_presets.checkpoints import CheckpointFacts, Format
from lightning_presets.core.context import Context
from lightning_presets.core.family import Checkpoints, Family


@dataclass(frozen=True, slots=True, kw_only=True)
class Resume:
    """A checkpoint a job is about to load, and how the job loads it."""

    path: str
    checkpoint: CheckpointFacts | None
    """``None`` when it could not be read (``unreadable`` says why)."""
    unreadable: str = ""
    reader_failed: bool = False
    """The reader itself failed on the checkpoint (``unreadable`` says how): a bug of lightning-presets."""
    how: str = "fit(ckpt_path=...)"
    """The call that loads it: ``fit(ckpt_path=...)`` (or ``validate``, ``test``, ``predict``), ``load(...)``."""
    restores_optimizer: bool = True
    """The job restores optimizer state from it (``fit``; ``Fabric.load`` with an optimizer in its state)."""
    state_optimizers: tuple[str, ...] | None = None
    """``Fabric.load``: the keys of the state that hold optimizers (``None``: not known, as in ``check``)."""
    strict: bool = True
    """``Fabric.load(strict=...)``: with ``False``, Fabric skips the state's keys the checkpoint lacks."""
    zero_stage: int | None = None
    """DeepSpeed: the job's ZeRO stage (its strategy's config)."""
    load_universal: bool = False
    """DeepSpeed: the job's config sets ``checkpoint.load_universal``."""
    load_full_weights: bool = False
    """DeepSpeed: the job's strategy has ``load_full_weights=True``."""
    default_checkpoint_io: bool = True
    """The strategy reads files with Lightning's own ``TorchCheckpointIO`` (a user's ``CheckpointIO`` plugin may read
    other formats: DDP's loads are then not checked)."""


FORMAT_NAMES = {"file": "single-file", "distributed": "distributed (sharded)", "deepspeed": "DeepSpeed"}


def family_of(family: Family | str | None) -> Family | None:
    """The declared family a context or a caller names: a name (or a family made from a name before its declaration
    was imported) is looked up again once the built-in presets, which declare the built-in families, are loaded."""
    found = Family.of(family)
    if found is not None and found.stand_in:
        from lightning_presets.core.preset import Preset
        from lightning_presets.registry.catalog import builtin_entries

        builtin_entries(Preset)
        found = Family.of(found)
    return found


def checkpoints_of(family: Family | str | None) -> Checkpoints:
    """What the family's strategy writes and loads (nothing: not checked)."""
    found = family_of(family)
    return found.checkpoints if found is not None else Checkpoints()


def resumable(family: Family | str | None) -> tuple[str, ...]:
    """What a preset of ``family`` resumes, one line each (``lightning-presets show`` lists them); empty when
    the family is not checked."""
    checkpoints = checkpoints_of(family)
    key = checkpoints.trainer_model_key
    lines = {
        "file": "a single-file checkpoint (DDP's, FSDP's full state, a consolidated folder), at any world size",
        "distributed": "a sharded torch.distributed.checkpoint folder, at any world size"
        + (f" (the Trainer's: weights under {key!r})" if key else ""),
        "deepspeed": "a DeepSpeed ZeRO folder of the same ZeRO stage (1/2 or 3), at the data-parallel size that wrote "
        "it or converted by ds_to_universal and loaded with checkpoint.load_universal",
    }
    found = [lines[each] for each in ("file", "distributed", "deepspeed") if each in checkpoints.loads]
    if checkpoints.full_weights_from_file:
        found.append("a single-file checkpoint's weights, under ZeRO-3 with load_full_weights=True")
    return tuple(found)


def loadable(ctx: Context, resume: Resume) -> frozenset[Format]:
    """The formats the job's strategy loads (empty when its family is not checked)."""
    checkpoints = checkpoints_of(ctx.family)
    formats: frozenset[Format] = checkpoints.loads
    if checkpoints.through_checkpoint_io and not resume.default_checkpoint_io:
        return frozenset()
    if checkpoints.full_weights_from_file and resume.load_full_weights and resume.zero_stage == 3:
        return formats | {"file"}
    return formats
