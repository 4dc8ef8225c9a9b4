"""``lightning-presets convert``: a checkpoint the presets write, converted to a layout another preset (or another
program) loads, written safely and verified.

What it converts (the source's layout is detected by the checkpoint reader the resume guards use,
:func:`lightning_presets.checkpoints.read_checkpoint`):

- to ``file``, one ``torch.save`` file in its writer's layout: from a ``torch.distributed.checkpoint`` folder (fsdp2,
  tp2d_hybrid, FSDP's sharded layout; any world size; the Trainer's optimizers re-keyed from parameter names to
  positions, as DDP loads them; the loops', callbacks' and schedulers' state kept), from a DeepSpeed ZeRO-2/3 folder
  (fp32 weights by DeepSpeed's own consolidation; the ZeRO optimizer partitions are said to be dropped), or from a
  file (a copy);
- to ``safetensors``: the model's weights only (``--strip-prefix model.`` removes the LightningModule's attribute
  from the names), each tensor its own storage.

Loading a full file is what Lightning's ``FSDPStrategy`` and ``ModelParallelStrategy`` do themselves, so a file needs
no conversion to a folder to be resumed by fsdp2 or tp2d_hybrid.

Safe: the source is only read; the result is written into a temporary sibling and renamed when complete, so a failure
leaves nothing; an existing destination is refused unless ``force``. Verified: the result is read back from disk and
compared tensor by tensor with the source as its owner's loader read it (and a distributed source's tensors counted
against its own index); ``verify=False`` skips that. Memory: the whole checkpoint is held in CPU memory once (the
file source is memory-mapped), as Lightning's and torch's consolidations do.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lightning_presets.checkpoints import CheckpointFacts, CheckpointReadError, read_checkpoint
from lightning_presets.tools.convert import loading, verify, writing

__all__ = ["TARGETS", "ConvertError", "Converted", "convert"]

Target = Literal["file", "safetensors"]
TARGETS: tuple[Target, ...] = ("file", "safetensors")


class ConvertError(Exception):
    """The conversion did not happen (nothing was written): what is wrong, with the real paths, and the fix."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(f"{message}\n  hint: {hint}")
        self.message, self.hint = message, hint


@dataclass(frozen=True, slots=True)
class Converted:
    """What a conversion wrote."""

    source: str
    source_layout: str
    """The source as the checkpoint reader describes it."""
    destination: str
    target: Target
    tensors: int
    """Tensors written."""
    verified: bool
    dropped: tuple[str, ...] = ()
    """What the source holds that the result cannot."""
    seconds: float = 0.0
    """Wall time of the whole conversion, verification included."""
    notes: tuple[str, ...] = field(default=())


def convert(
    source: str | Path,
    destination: str | Path,
    *,
    to: Target = "file",
    force: bool = False,
    verify_result: bool = True,
    strip_prefix: str = "",
) -> Converted:
    """Convert the checkpoint at ``source`` into ``destination`` (see the module's documentation); raises
    :class:`ConvertError` when it cannot, having written nothing."""
    started = time.monotonic()
    if to not in TARGETS:
        raise ConvertError(f"unknown target {to!r}", f"use one of {', '.join(TARGETS)}")
    src, dst = Path(source), Path(destination)
    facts = _facts(src)
    if dst.resolve() == src.resolve() or src.resolve() in dst.resolve().parents:
        raise ConvertError(f"the destination {dst} is the source or inside it", "write the result beside the source")
    if (dst.exists() or dst.is_symlink()) and not force:
        raise ConvertError(f"the destination {dst} exists", "name another destination, or pass --force to replace it")
    if not dst.parent.is_dir():
        raise ConvertError(f"the destination's folder {dst.parent} does not exist", "create it first")
    try:
        with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed and Lightning print progress: not our output
            loaded = loading.load(facts)
    except (OSError, RuntimeError, ValueError, KeyError, EOFError) as error:
        raise ConvertError(
            f"{src} could not be read as {facts.describe()}: {type(error).__name__}: {_first_line(error)}",
            "check that the checkpoint was written completely (every rank's files present) and is not truncated",
        ) from error
    if to == "safetensors":
        weights = loaded.checkpoint.get(loaded.weights_key, {}) if loaded.weights_key else loaded.checkpoint
        payload = writing.weights_for_safetensors(weights, strip_prefix)
        if not payload:
            raise ConvertError(f"{src} holds no weights to export", "convert a checkpoint that holds the model")
        dropped = (*loaded.dropped, "everything but the model's weights (safetensors holds tensors only)")
        expected: dict[str, object] = dict(payload)
    else:
        expected = loaded.checkpoint
        dropped = loaded.dropped
    with writing.staged(dst, force=force) as staging:
        if to == "safetensors":
            writing.save_safetensors(expected, staging, {"format": "pt", "source": src.name})
        else:
            writing.save_file(loaded.checkpoint, staging)
        if verify_result:
            _verify(facts, expected, staging, to)
    count = sum(1 for _ in verify.tensors(expected))
    return Converted(
        source=str(src), source_layout=facts.describe(), destination=str(dst), target=to, tensors=count,
        verified=verify_result, dropped=tuple(dropped), seconds=time.monotonic() - started,
    )  # fmt: skip


def _facts(src: Path) -> CheckpointFacts:
    try:
        return read_checkpoint(src)
    except FileNotFoundError as error:
        raise ConvertError(f"no checkpoint at {src}", "pass the path of a checkpoint file or folder") from error
    except CheckpointReadError as error:
        raise ConvertError(
            f"{src} is not a checkpoint the presets write: {error}",
            "convert reads a Lightning/torch file, a torch.distributed.checkpoint folder or a DeepSpeed folder",
        ) from error


def _verify(facts: CheckpointFacts, expected: object, staging: Path, to: Target) -> None:
    written = verify.read_back(staging, to)
    problems = verify.differences(expected if isinstance(expected, dict) else {}, written)
    if facts.format == "distributed" and to == "file":
        indexed = len(verify.indexed_tensors(facts.path))
        found = sum(1 for _ in verify.tensors(written))
        if found < indexed:
            problems.append(f"the source's index lists {indexed} tensors, the result holds {found}")
    if problems:
        raise ConvertError(
            f"the converted checkpoint differs from {facts.path}: {'; '.join(problems)}",
            "nothing was written; please report this with the checkpoint's layout (`lightning-presets check "
            "--resume-from` prints it)",
        )


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else ""
