"""``lightning-presets convert``: a checkpoint the presets write, converted to the layout another preset (or another
program) loads, written safely and verified.

What it converts (the source's layout is detected by the checkpoint reader the resume guards use,
:func:`lightning_presets.checkpoints.read_checkpoint`):

- to ``file``, one ``torch.save`` file in its writer's layout: from a ``torch.distributed.checkpoint`` folder (fsdp2,
  tp2d_hybrid, FSDP's sharded layout; any world size; the Trainer's optimizers re-keyed from parameter names to
  positions, as DDP loads them; the loops', callbacks' and schedulers' state kept), from a DeepSpeed ZeRO-2/3 folder
  (fp32 weights by DeepSpeed's own consolidation; the ZeRO optimizer partitions are said to be dropped), or from a
  file (a copy);
- to ``folder``, the Trainer's sharded layout that ``ModelParallelStrategy`` (fsdp2, tp2d_hybrid) loads at any world
  size, from a checkpoint in the Trainer's layout: optimizer state re-keyed from positions to parameter names
  through the model (``model="MODULE:FACTORY"``: its own ``configure_optimizers`` says which parameter each position
  is);
- to ``universal``, a DeepSpeed ZeRO folder made loadable at another data-parallel size by DeepSpeed's own
  ``ds_to_universal``, run on a copy;
- to ``safetensors``: the model's weights only (``strip_prefix="model."`` removes the LightningModule's attribute
  from the names), each tensor its own storage.

The target is named by format (``to``) or by the job that will load it (``strategy``, ``devices``, ``num_nodes``):
``ddp*`` and FSDP presets load one file, ``fsdp2`` and ``tp2d_hybrid`` a folder, DeepSpeed presets a universal
checkpoint.

Safe: the source is only read; the result is written into a temporary sibling and renamed when complete, so a failure
leaves nothing; an existing destination is refused unless ``force``. Verified: the result is read back from disk and
compared tensor by tensor with the source as its owner's loader read it (and a distributed source's tensors counted
against its own index); then the target preset's resume guard judges it (as ``lightning-presets check
--resume-from`` does) and a refusal fails the conversion; ``verify_result=False`` skips both. Memory: the whole
checkpoint is held in CPU memory once (the file source is memory-mapped), as Lightning's and torch's consolidations
do, and once more while the result is read back; the need is computed from the source's metadata before loading
(:mod:`~lightning_presets.tools.convert.memory`), reported, and a :class:`MemoryShortWarning` issued where it exceeds
the memory available. Refusals are :class:`ConvertError` with an LP code (LP820-LP823,
:mod:`~lightning_presets.tools.convert.codes`); a request convert does not serve has none (a usage error).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lightning_presets.checkpoints import CheckpointFacts, CheckpointReadError, read_checkpoint
from lightning_presets.core.codes import Code
from lightning_presets.tools.convert import codes, loading, memory, verify, writing

__all__ = ["TARGETS", "ConvertError", "Converted", "MemoryShortWarning", "convert", "target_for"]

Target = Literal["file", "folder", "universal", "safetensors"]
TARGETS: tuple[Target, ...] = ("file", "folder", "universal", "safetensors")
_BY_FAMILY: Mapping[str, Target] = {"ddp": "file", "fsdp": "file", "model_parallel": "folder", "deepspeed": "universal"}
"""The layout each family's preset resumes (an FSDP preset loads one file at any world size, a sharded folder only in
its own layout)."""
_READ_ERRORS = (OSError, RuntimeError, ValueError, KeyError, EOFError, TypeError, AttributeError, ImportError)
"""What the owners' loaders raise on a damaged or foreign checkpoint (torch's pickle reader among them)."""


class ConvertError(Exception):
    """The conversion did not happen (nothing was written): what is wrong, with the real paths, and the fix.
    ``code``: the LP code of the refusal; ``None`` for a request convert does not serve (a usage error)."""

    def __init__(self, message: str, hint: str, code: Code | None = None) -> None:
        prefix = f"[{code.code}] " if code is not None else ""
        super().__init__(f"{prefix}{message}\n  hint: {hint}")
        self.message, self.hint, self.code = message, hint, code.code if code is not None else None


class MemoryShortWarning(ResourceWarning):
    """Issued before loading when the conversion needs more memory than the machine has available (a warning, not a
    refusal: swap may still serve)."""


@dataclass(frozen=True, slots=True)
class Converted:
    """What a conversion wrote."""

    source: str
    source_layout: str
    """The source as the checkpoint reader describes it."""
    destination: str
    target: Target
    tensors: int
    """Tensors written (a universal checkpoint: the parameters' fp32 weights compared)."""
    verified: bool
    dropped: tuple[str, ...] = ()
    """What the source holds that the result cannot."""
    seconds: float = 0.0
    """Wall time of the whole conversion, verification included."""
    notes: tuple[str, ...] = field(default=())
    guard: str = ""
    """The target preset's resume guard on the result (empty with ``verify_result=False``)."""
    memory: str = ""
    """The memory the conversion needed, computed from the source's metadata before loading, and what was
    available then."""
    memory_needed_bytes: int | None = None
    memory_available_bytes: int | None = None


def target_for(strategy: str | None, facts: CheckpointFacts | None = None) -> Target:
    """The layout the preset ``strategy`` resumes (``file`` without one)."""
    if strategy is None:
        return "file"
    family = _family(strategy)
    target = _BY_FAMILY.get(family or "")
    if target is None:
        raise ConvertError(
            f"the preset {strategy!r} ({family or 'no'} family) resumes no layout convert writes",
            "name a ddp, FSDP, fsdp2, tp2d_hybrid or DeepSpeed preset, or the layout with --to",
        )
    return target


def _family(strategy: str) -> str | None:
    import lightning_presets

    if strategy not in lightning_presets.presets():
        raise ConvertError(
            f"{strategy!r} is not a strategy preset",
            "`lightning-presets list` names them; or name the layout with --to",
        )
    return lightning_presets.get_preset(strategy).family


def convert(
    source: str | Path,
    destination: str | Path,
    *,
    to: Target | None = None,
    strategy: str | None = None,
    devices: int = 1,
    num_nodes: int = 1,
    model: str | None = None,
    force: bool = False,
    verify_result: bool = True,
    strip_prefix: str = "",
) -> Converted:
    """Convert the checkpoint at ``source`` into ``destination`` (see the module's documentation); raises
    :class:`ConvertError` when it cannot, having written nothing and leaving the source as it was."""
    started = time.monotonic()
    if to is not None and to not in TARGETS:
        raise ConvertError(f"unknown target {to!r}", f"use one of {', '.join(TARGETS)}")
    if devices < 1 or num_nodes < 1:
        raise ConvertError(f"devices={devices}, num_nodes={num_nodes}: the job has at least one of each",
                           "pass --devices and --num-nodes of the job that will resume the result")  # fmt: skip
    src, dst = Path(source), Path(destination)
    facts = _facts(src)
    target = to or target_for(strategy, facts)
    if strategy is not None:
        _family(strategy)
    _check_destination(src, dst, force)
    _check_pair(facts, target)
    # ds_to_universal runs in its own interpreter; here only its verification holds the consolidated checkpoint
    needs = memory.need(facts, verify_result=verify_result and target != "universal")
    if needs is not None and needs.short:
        warnings.warn(needs.warning(), MemoryShortWarning, stacklevel=2)
    if target == "universal":
        done = _to_universal(facts, src, dst, force=force, verify_result=verify_result, strategy=strategy,
                             devices=devices, num_nodes=num_nodes, started=started)  # fmt: skip
        return _with_memory(done, needs)
    loaded = _load(facts, src)
    notes: list[str] = []
    if target == "safetensors":
        weights = loaded.checkpoint.get(loaded.weights_key, {}) if loaded.weights_key else loaded.checkpoint
        payload = writing.weights_for_safetensors(weights, strip_prefix)
        if not payload:
            raise ConvertError(f"{src} holds no weights to export", "convert a checkpoint that holds the model",
                               codes.UNREADABLE)  # fmt: skip
        dropped = (*loaded.dropped, "everything but the model's weights (safetensors holds tensors only)")
        expected: dict[str, Any] = dict(payload)
    elif target == "folder":
        expected, model_key, extra = _sharded(facts, loaded, model, strategy)
        dropped, notes = loaded.dropped, extra
    else:
        expected, dropped = loaded.checkpoint, loaded.dropped
    guard = ""
    with writing.staged(dst, force=force) as staging:
        if target == "safetensors":
            writing.save_safetensors(expected, staging, {"format": "pt", "source": src.name})
        elif target == "folder":
            from lightning_presets.tools.convert import folder

            optimizers = [expected[key] for key in sorted(expected) if key.startswith("optimizer_")]
            meta = {k: v for k, v in expected.items() if k != model_key and not k.startswith("optimizer_")}
            folder.save({**meta, "state_dict": expected[model_key]}, optimizers, staging, model_key)
        else:
            writing.save_file(loaded.checkpoint, staging)
        if verify_result:
            _verify(facts, expected, staging, target)
            if target != "safetensors":
                guard = _judge(facts, staging, target, strategy, devices, num_nodes, dropped)
    count = sum(1 for _ in verify.tensors(expected))
    return Converted(
        source=str(src), source_layout=facts.describe(), destination=str(dst), target=target, tensors=count,
        verified=verify_result, dropped=tuple(dropped), seconds=time.monotonic() - started, notes=tuple(notes),
        guard=guard, **_memory_fields(needs),
    )  # fmt: skip


def _memory_fields(needs: memory.Need | None) -> dict[str, Any]:
    if needs is None:
        return {"memory": "not known (the source's metadata does not say)"}
    return {"memory": needs.describe(), "memory_needed_bytes": needs.needed,
            "memory_available_bytes": needs.available}  # fmt: skip


def _with_memory(done: Converted, needs: memory.Need | None) -> Converted:
    import dataclasses

    return dataclasses.replace(done, **_memory_fields(needs))


def _facts(src: Path) -> CheckpointFacts:
    try:
        return read_checkpoint(src)
    except FileNotFoundError as error:
        raise ConvertError(f"no checkpoint at {src}", "pass the path of a checkpoint file or folder",
                           codes.UNREADABLE) from error  # fmt: skip
    except CheckpointReadError as error:
        raise ConvertError(
            f"{src} is not a checkpoint the presets write: {error}",
            "convert reads a Lightning/torch file, a torch.distributed.checkpoint folder or a DeepSpeed folder",
            codes.UNREADABLE,
        ) from error


def _check_destination(src: Path, dst: Path, force: bool) -> None:
    if dst.resolve() == src.resolve() or src.resolve() in dst.resolve().parents:
        raise ConvertError(f"the destination {dst} is the source or inside it", "write the result beside the source",
                           codes.DESTINATION)  # fmt: skip
    if (dst.exists() or dst.is_symlink()) and not force:
        raise ConvertError(f"the destination {dst} exists", "name another destination, or pass --force to replace it",
                           codes.DESTINATION)  # fmt: skip
    if not dst.parent.is_dir():
        raise ConvertError(f"the destination's folder {dst.parent} does not exist", "create it first",
                           codes.DESTINATION)  # fmt: skip


def _check_pair(facts: CheckpointFacts, target: Target) -> None:
    """Refuse (as a usage error) a target the source cannot become."""
    if target == "universal" and facts.format != "deepspeed":
        raise ConvertError(
            f"{facts.path} is {facts.describe()}; a universal checkpoint is made from a DeepSpeed ZeRO folder only, "
            "and DeepSpeed's engine loads no other layout's optimizer state",
            "resume it with the preset that wrote it, or convert it --to file and load its weights into the DeepSpeed "
            "job (ZeRO-3: load_full_weights=True)",
        )
    if target == "universal" and not facts.zero_stage:
        raise ConvertError(
            f"{facts.path} is {facts.describe()}, without ZeRO optimizer shards to redistribute",
            "resume it as it is: a checkpoint without ZeRO shards loads at any data-parallel size",
        )
    if target == "folder" and facts.writer != "trainer":
        raise ConvertError(
            f"{facts.path} is {facts.describe()}; convert writes the Trainer's sharded layout only from a checkpoint "
            "in the Trainer's layout (a Fabric state's keys are the user's own)",
            "save the sharded layout from Fabric itself (fabric.save with a sharding strategy), or convert --to file",
        )


def _load(facts: CheckpointFacts, src: Path) -> loading.Loaded:
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException: a shard missing or damaged

    try:
        with contextlib.redirect_stdout(sys.stderr):  # DeepSpeed and Lightning print progress: not our output
            return loading.load(facts)
    except (*_READ_ERRORS, CheckpointException) as error:
        raise ConvertError(
            f"{src} could not be read as {facts.describe()}: {type(error).__name__}: {_first_line(error)}",
            "check that the checkpoint was written completely (every rank's files present) and is not truncated",
            codes.UNREADABLE,
        ) from error


def _sharded(
    facts: CheckpointFacts, loaded: loading.Loaded, model: str | None, strategy: str | None
) -> tuple[dict[str, Any], str, list[str]]:
    """(the folder's content as it will be read back: the weights under the layout's key, ``optimizer_i`` keyed by
    name, the rest; the weights' key; notes)."""
    from lightning_presets.tools.convert import folder

    checkpoint = loaded.checkpoint
    model_key = "state_dict"  # ModelParallelStrategy's key (FSDP presets resume a file: see target_for)
    weights = checkpoint.get(folder.STATE_DICT)
    if not isinstance(weights, Mapping):
        raise ConvertError(f"{facts.path} holds no 'state_dict' (the Trainer's weights)",
                           "convert a checkpoint the Trainer saved", codes.UNREADABLE)  # fmt: skip
    named: list[dict[str, Any]] = []
    notes: list[str] = []
    if folder.needs_model(checkpoint):
        if model is None:
            where = f"--strategy {strategy} " if strategy else "--to folder "
            raise ConvertError(
                f"{facts.path} holds optimizer state keyed by the parameters' positions "
                f"({len(checkpoint.get(folder.OPTIMIZER_STATES) or [])} optimizer(s)); the sharded layout keys it by "
                "parameter name, and only the model says which parameter each position is",
                f"name the LightningModule that wrote it: `lightning-presets convert {facts.path} DST {where}--model "
                "MODULE:FACTORY` (its configure_optimizers is called, on the meta device); or resume the file as it "
                "is: fsdp2 and tp2d_hybrid load a single file themselves",
                codes.MODEL_NEEDED,
            )
        named = _renamed(checkpoint, model)
        notes.append(f"optimizer state re-keyed by parameter name through {model}'s configure_optimizers")
    elif checkpoint.get(folder.OPTIMIZER_STATES):
        named = [dict(each) for each in checkpoint[folder.OPTIMIZER_STATES]]  # no state yet: nothing to re-key
    meta = {k: v for k, v in checkpoint.items() if k not in (folder.STATE_DICT, folder.OPTIMIZER_STATES)}
    content = {**meta, model_key: dict(weights), **{f"optimizer_{i}": state for i, state in enumerate(named)}}
    return content, model_key, notes


def _renamed(checkpoint: Mapping[str, Any], spec: str) -> list[dict[str, Any]]:
    from lightning_presets.tools.convert import folder
    from lightning_presets.tools.simulation.user_model import ModelError

    try:
        built, optimizers = folder.build_model(spec)
        return folder.by_name(checkpoint, built, optimizers)
    except ModelError as error:
        raise ConvertError(
            f"--model {spec}: {error}",
            "name the factory of the LightningModule that wrote the checkpoint, importable from the current directory",
            codes.MODEL_NEEDED,
        ) from error
    except folder.ModelMismatch as error:
        raise ConvertError(f"--model {spec} is not the checkpoint's model: {error}",
                           "name the LightningModule (and configure_optimizers) that wrote the checkpoint",
                           codes.MODEL_NEEDED) from error  # fmt: skip


def _to_universal(
    facts: CheckpointFacts, src: Path, dst: Path, *, force: bool, verify_result: bool, strategy: str | None,
    devices: int, num_nodes: int, started: float,
) -> Converted:  # fmt: skip
    from lightning_presets.checkpoints.conversions import deepspeed_root
    from lightning_presets.tools.convert import universal

    root, tag = deepspeed_root(facts)
    guard = ""
    with writing.staged(dst, force=force) as staging:
        try:
            written = universal.write(facts, Path(root), tag, staging)
        except (OSError, RuntimeError, subprocess.SubprocessError) as error:
            raise ConvertError(
                f"{src} could not be converted to a universal checkpoint: {_first_line(error)}",
                "check that every rank's ZeRO shard files are present",
                codes.UNREADABLE,
            ) from error
        count = 0
        if verify_result:
            expected = _load(facts, src).checkpoint
            weights = expected.get(loading.STATE_DICT, expected)
            got = universal.weights(staging, written)
            want = {name.removeprefix("_forward_module."): value for name, value in weights.items()}
            # ZeRO-3's universal files keep each parameter flat: compared as DeepSpeed reshapes them when it loads
            same = {k: want[k].reshape(v.shape) if want[k].numel() == v.numel() else want[k] for k, v in got.items()
                    if k in want}  # fmt: skip
            problems = verify.differences(same, got)
            problems += [f"missing {name}" for name in sorted(set(want) - set(got))][:3]
            problems += [f"unexpected {name}" for name in sorted(set(got) - set(want))][:3]
            if problems:
                raise ConvertError(f"the universal checkpoint differs from {facts.path}: {'; '.join(problems)}",
                                   "nothing was written; please report this with the checkpoint's layout",
                                   codes.NOT_VERIFIED)  # fmt: skip
            count = len(got)
            if strategy is not None:
                guard = _verdict(staging, strategy, devices, num_nodes, facts, dropped=False, universal=True)
    return Converted(
        source=str(src), source_layout=facts.describe(), destination=str(dst), target="universal", tensors=count,
        verified=verify_result, seconds=time.monotonic() - started, guard=guard,
        notes=(f"DeepSpeed loads it with checkpoint.load_universal set (it reads {dst / 'latest_universal'})",),
    )  # fmt: skip


def _verify(facts: CheckpointFacts, expected: Mapping[str, Any], staging: Path, target: Target) -> None:
    written = verify.read_back(staging, target)
    problems = verify.differences(expected, written)
    if facts.format == "distributed" and target == "file":
        indexed = len(verify.indexed_tensors(facts.path))
        found = sum(1 for _ in verify.tensors(written))
        if found < indexed:
            problems.append(f"the source's index lists {indexed} tensors, the result holds {found}")
    if problems:
        raise ConvertError(
            f"the converted checkpoint differs from {facts.path}: {'; '.join(problems)}",
            "nothing was written; please report this with the checkpoint's layout (`lightning-presets check "
            "--resume-from` prints it)",
            codes.NOT_VERIFIED,
        )


def _judge(
    facts: CheckpointFacts, staging: Path, target: Target, strategy: str | None, devices: int, num_nodes: int,
    dropped: tuple[str, ...],
) -> str:  # fmt: skip
    """The target preset's resume guard on the result: a refusal fails the conversion. Without a named preset, a
    file or folder in the Trainer's layout is judged by ``ddp_static_graph`` on one device (a file) or ``fsdp2``
    (a folder); a state of the user's own keys is not judged (no preset knows its keys)."""
    if strategy is None:
        if facts.writer != "trainer":
            return "not judged: not a Trainer checkpoint (name the job with --strategy to judge it)"
        strategy = "ddp_static_graph" if target == "file" else "fsdp2"
    optimizer_dropped = any("optimizer" in each for each in dropped)
    return _verdict(staging, strategy, devices, num_nodes, facts, dropped=optimizer_dropped)


def _verdict(
    staging: Path,
    strategy: str,
    devices: int,
    num_nodes: int,
    facts: CheckpointFacts,
    *,
    dropped: bool,
    universal: bool = False,
) -> str:
    from lightning_presets.tools.convert.judge import judge

    mode = "trainer" if facts.writer == "trainer" else "fabric"  # a state of the user's keys: Fabric.load reads it
    with contextlib.redirect_stdout(sys.stderr):
        verdict = judge(
            staging, strategy, devices, num_nodes, mode=mode, optimizer_dropped=dropped, load_universal=universal
        )
    if verdict.refused:
        raise ConvertError(
            f"the converted checkpoint is refused by the job it was made for: {verdict.describe()}",
            "nothing was written; name the job that will load it (--strategy, --devices, --num-nodes), or report "
            "this with the checkpoint's layout",
            codes.NOT_VERIFIED,
        )
    suffix = " (with checkpoint.load_universal set)" if universal and verdict.accepted else ""
    return verdict.describe().replace(str(staging), "the result") + suffix


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:300] if text else ""
