"""Resume guards: before a checkpoint is loaded, whether the preset can resume it, and the conversion when it cannot.

The rules (stage ``resume``) are pure functions of the job's :class:`~lightning_presets.core.context.Context` and a
:class:`Resume`: the checkpoint's facts (:mod:`lightning_presets.guards.checkpoints`) and how the job loads it. Every
rank reads the same files and the same configuration, so every rank reaches the same verdict without communicating.
:func:`resume_findings` is the one entry point: the strategies' ``load_checkpoint`` hook calls it, and so will
``lightning-presets check --resume-from PATH``.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, NamedTuple

from lightning_presets.core.codes import Setting
from lightning_presets.core.context import Context
from lightning_presets.core.environment import skipped_rules
from lightning_presets.core.findings import Finding
from lightning_presets.core.rules import Problem, Rule, rule, run_rules
from lightning_presets.guards.builders import BLOCKS
from lightning_presets.guards.checkpoints import (
    MAX_TEXT,
    CheckpointFacts,
    CheckpointReadError,
    Format,
    clean,
    local_path,
    read_checkpoint,
)


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


FORMATS: Mapping[str, frozenset[Format]] = MappingProxyType(
    {
        "ddp": frozenset({"file"}),
        "fsdp": frozenset({"file", "distributed"}),
        "model_parallel": frozenset({"file", "distributed"}),
        "deepspeed": frozenset({"deepspeed"}),
    }
)
"""What each family's Lightning strategy loads (``load_checkpoint`` in Lightning 2.5 and 2.6). Families not listed
(XLA, a third party's own) are not checked."""
TRAINER_MODEL_KEY: Mapping[str, str] = MappingProxyType({"fsdp": "model", "model_parallel": "state_dict"})
"""Where the Trainer's sharded checkpoints keep the weights: ``FSDPStrategy`` under ``model``,
``ModelParallelStrategy`` under ``state_dict``; each reads only its own key."""
_FORMAT_NAMES = {"file": "single-file", "distributed": "distributed (sharded)", "deepspeed": "DeepSpeed"}


def resumable(family: str | None) -> tuple[str, ...]:
    """What a preset of ``family`` resumes, one line each (``lightning-presets show`` is to list them); empty when
    the family is not checked."""
    key = TRAINER_MODEL_KEY.get(family or "")
    lines = {
        "file": "a single-file checkpoint (DDP's, FSDP's full state, a consolidated folder), at any world size",
        "distributed": "a sharded torch.distributed.checkpoint folder, at any world size"
        + (f" (the Trainer's: weights under {key!r})" if key else ""),
        "deepspeed": "a DeepSpeed ZeRO folder of the same ZeRO stage (1/2 or 3), at the data-parallel size that wrote "
        "it or converted by ds_to_universal and loaded with checkpoint.load_universal",
    }
    found = [lines[each] for each in ("file", "distributed", "deepspeed") if each in FORMATS.get(family or "", ())]
    if family == "deepspeed":
        found.append("a single-file checkpoint's weights, under ZeRO-3 with load_full_weights=True")
    return tuple(found)


def loadable(ctx: Context, resume: Resume) -> frozenset[Format]:
    """The formats the job's strategy loads (empty when its family is not checked)."""
    formats = FORMATS.get(ctx.family or "", frozenset())
    if ctx.family == "ddp" and not resume.default_checkpoint_io:
        return frozenset()
    if ctx.family == "deepspeed" and resume.load_full_weights and resume.zero_stage == 3:
        return formats | {"file"}
    return formats


# --------------------------------------------------------------------------- messages and conversions


def _job(ctx: Context, resume: Resume) -> str:
    return f"{ctx.call('devices', 'num_nodes')} resuming from {resume.path!r} with {resume.how}"


def _resume_from(ctx: Context, path: str) -> str:
    return f"fit(model, ckpt_path={path!r})" if ctx.caller == "Trainer" else f"fabric.load({path!r}, state)"


def _shell(path: str) -> str:
    return shlex.quote(path)


def _consolidated(facts: CheckpointFacts) -> str:
    return facts.path.rstrip("/" + os.sep) + ".consolidated"


class OneFile(NamedTuple):
    """How a checkpoint becomes one file: the commands (empty for a file already), the file, its weights' key."""

    steps: str
    path: str
    key: str | None


def to_one_file(facts: CheckpointFacts) -> OneFile:
    """The commands that turn ``facts`` into one file, with its real paths."""
    out = _consolidated(facts)
    if facts.format == "file":
        return OneFile("", facts.path, facts.model_key)
    if facts.format == "deepspeed":
        if facts.writer == "trainer":  # Lightning's converter keeps the Trainer's state beside the weights
            return OneFile(
                "in Python: `from lightning.pytorch.utilities.deepspeed import "
                "convert_zero_checkpoint_to_fp32_state_dict; "
                f"convert_zero_checkpoint_to_fp32_state_dict({facts.path!r}, {out!r})`",
                out,
                "state_dict",
            )
        return OneFile(
            "in Python: `import torch; from deepspeed.utils.zero_to_fp32 import "
            "get_fp32_state_dict_from_zero_checkpoint; "
            f"torch.save(get_fp32_state_dict_from_zero_checkpoint({facts.path!r}), {out!r})`",
            out,
            None,
        )
    arguments = f"{_shell(facts.path)} --output_file {_shell(out)}"
    if facts.writer == "trainer" and facts.model_key == "model":  # FSDPStrategy's layout: Lightning renames it
        return OneFile(f"`python -m lightning.pytorch.utilities.consolidate_checkpoint {arguments}`", out, "state_dict")
    if facts.writer == "trainer":  # ModelParallelStrategy's layout: the optimizers still need the Trainer's list
        pops = ", ".join(f"c.pop('optimizer_{index}')" for index in range(facts.optimizers))
        return OneFile(
            f"`python -m lightning.fabric.utilities.consolidate_checkpoint {arguments}`, then in Python: "
            f"`import torch; c = torch.load({out!r}, weights_only=False); c['optimizer_states'] = [{pops}]; "
            f"torch.save(c, {out!r})`",
            out,
            facts.model_key,
        )
    if facts.writer == "fabric":
        return OneFile(
            f"`python -m lightning.fabric.utilities.consolidate_checkpoint {arguments}`", out, facts.model_key
        )
    return OneFile(
        "in Python: `from torch.distributed.checkpoint.format_utils import dcp_to_torch_save; "
        f"dcp_to_torch_save({facts.path!r}, {out!r})`",
        out,
        facts.model_key,
    )


def _weights_only(ctx: Context, file: OneFile) -> str:
    """Load only the weights of ``file`` and start training afresh."""
    first = f"consolidate it: {file.steps}; then " if file.steps else ""
    if ctx.caller == "Trainer":
        weights = f"torch.load({file.path!r}, weights_only=False)" + (f"[{file.key!r}]" if file.key else "")
        return (
            f"{first}load its weights with `model.load_state_dict({weights})` and call fit without ckpt_path (the "
            "optimizer and the loops start afresh)"
        )
    load = f"fabric.load({file.path!r}, {{{file.key!r}: model}}, strict=False)" if file.key else (
        f"fabric.load_raw({file.path!r}, model)"
    )  # fmt: skip
    return f"{first}load its weights with `{load}` (the optimizer starts afresh)"


def conversion(ctx: Context, facts: CheckpointFacts, resume: Resume) -> str:
    """The conversion that makes ``facts`` loadable by the job (LP801), as commands and code with the real paths."""
    file = to_one_file(facts)
    if ctx.family == "deepspeed":
        if resume.zero_stage == 3:
            first = f"consolidate it: {file.steps}; then " if file.steps else ""
            return (
                f"{first}load the file's weights with `lightning_presets.strategy({ctx.preset!r}, "
                f"load_full_weights=True{_target(ctx)})` and {_resume_from(ctx, file.path)} (DeepSpeed restores no "
                "optimizer state from one file: it starts afresh)"
            )
        return f"{_weights_only(ctx, file)}; or resume with the preset that wrote it"
    if facts.format == "deepspeed":
        return (
            f"DeepSpeed's ZeRO optimizer shards convert to no other strategy's optimizer state: "
            f"{_weights_only(ctx, file)}; or resume with a DeepSpeed preset at data-parallel size "
            f"{facts.data_parallel_size}"
        )
    return f"consolidate it into one file: {file.steps}; then {_resume_from(ctx, file.path)}"


def _target(ctx: Context) -> str:
    return "" if ctx.target == "trainer" else f", target={ctx.target!r}"


# --------------------------------------------------------------------------- documented examples

_MODEL = BLOCKS
CPU_NODE = Setting(gpus=0)
"""Where the examples that write a sharded checkpoint run: torch.distributed.checkpoint uses CUDA streams whenever
CUDA looks available, and the simulated GPUs are not real."""
_FULL = (
    "optimizer = torch.optim.Adam(model.parameters())   # a single-file checkpoint, as DDP writes\n"
    "torch.save({'state_dict': model.state_dict(), 'optimizer_states': [optimizer.state_dict()], 'loops': {}, "
    "'pytorch-lightning_version': '2.6.6'}, 'run.ckpt')\n"
)


def _trainer_folder(key: str) -> str:
    """An example's sharded checkpoint in the Trainer's layout: weights under ``key``, Lightning's ``meta.pt``."""
    owner = {"model": "FSDPStrategy", "state_dict": "ModelParallelStrategy"}[key]
    return (
        f"import torch.distributed.checkpoint as dcp   # {owner}'s layout: the weights under {key!r}\n"
        "from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict\n"
        "optimizer = torch.optim.Adam(model.parameters())\n"
        f"dcp.save({{{key!r}: model.state_dict(), 'optimizer_0': get_optimizer_state_dict(model, optimizer)}}, "
        "checkpoint_id='run.ckpt')\n"
        "torch.save({'loops': {}, 'pytorch-lightning_version': '2.6.6'}, 'run.ckpt/meta.pt')\n"
    )


def _deepspeed_folder(stage: int, data_parallel: int) -> str:
    """An example's DeepSpeed checkpoint: Lightning's layout, its metadata, no tensors."""
    return (
        f"import os   # run.ckpt: the files of a ZeRO-{stage} checkpoint Lightning wrote on {data_parallel} GPUs\n"
        "os.makedirs('run.ckpt/checkpoint'); open('run.ckpt/latest', 'w').write('checkpoint')\n"
        f"torch.save({{'module': {{}}, 'dp_world_size': {data_parallel}, 'mp_world_size': 1, 'ds_config': "
        f"{{'zero_optimization': {{'stage': {stage}}}}}, 'loops': {{}}, 'pytorch-lightning_version': '2.6.6'}}, "
        "'run.ckpt/checkpoint/mp_rank_00_model_states.pt')\n"
        f"for rank in range({data_parallel}):\n"
        "    torch.save({}, f'run.ckpt/checkpoint/bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt')\n"
    )


# --------------------------------------------------------------------------- the rules


@rule(
    "LP801", "error", "resume", "a checkpoint format the preset's strategy cannot load",
    fails=_MODEL + _trainer_folder("state_dict") + 'Trainer(strategy="ddp_static_graph", accelerator="cpu", '
    'devices=2).fit(model, ckpt_path="run.ckpt")',
    fixed=_MODEL + _trainer_folder("state_dict") + 'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model, '
    'ckpt_path="run.ckpt")',
    evidence="runtime: tests/evidence/test_fails_resume.py::test_lp801_sharded_folder_into_ddp_fails_in_torch_load "
    "(DDP's torch.load of an fsdp2 folder: IsADirectoryError; each such cell of the resume matrix fails too)",
    setting=CPU_NODE,
)  # fmt: skip
def format_is_loadable(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    formats = loadable(ctx, resume)
    if facts is None or not formats or facts.format in formats:
        return None
    takes = " and ".join(_FORMAT_NAMES[each] for each in sorted(formats))
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}, but {ctx.preset!r} ({ctx.family} family) loads "
        f"only {takes} checkpoints; Lightning would fail on every rank once the processes have started",
        conversion(ctx, facts, resume),
    )


@rule(
    "LP802", "error", "resume", "ZeRO optimizer shards at another data-parallel size",
    fails=_MODEL + _deepspeed_folder(2, 8)
    + 'Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=4).fit(model, ckpt_path="run.ckpt")',
    fixed=_MODEL + _deepspeed_folder(2, 8)
    + 'Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8).fit(model, ckpt_path="run.ckpt")',
    evidence="source: deepspeed/runtime/engine.py, DeepSpeedEngine._load_zero_checkpoint raises ZeRORuntimeException "
    "'The checkpoint being loaded used a DP world size of ... but the current world size is ...' when it loads "
    "optimizer states without load_universal (deepspeed 0.19.8); GPU check benchmarks/gpu/resume_checks.py",
)  # fmt: skip
def zero_shards_match_world(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    if (
        facts is None
        or ctx.family != "deepspeed"
        or facts.format != "deepspeed"
        or not resume.restores_optimizer
        or not facts.zero_stage
        or facts.data_parallel_size in (None, ctx.world_size)
        or (facts.universal and resume.load_universal)
    ):
        return None
    tag = facts.tag or os.path.basename(facts.path.rstrip("/" + os.sep))
    root = facts.path if facts.tag else os.path.dirname(facts.path.rstrip("/" + os.sep)) or "."
    strategy = f"strategy = lightning_presets.strategy({ctx.preset!r}{_target(ctx)}); "
    universal = f"{strategy}strategy.config['checkpoint'] = {{'load_universal': True}}"
    convert = (
        ""
        if facts.universal
        else f"convert it: `python -m deepspeed.checkpoint.ds_to_universal --input_folder "
        f"{_shell(os.path.join(root, tag))} --output_folder {_shell(os.path.join(root, tag + '_universal'))}`; then "
    )
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}, and this job's data-parallel size is "
        f"{ctx.world_arithmetic}; DeepSpeed loads ZeRO optimizer shards only at the size that wrote them and raises "
        f"'The checkpoint being loaded used a DP world size of {facts.data_parallel_size} but the current world size "
        f"is {ctx.world_size}' on every rank",
        f"{convert}load the universal checkpoint: `{universal}` and pass strategy=strategy (DeepSpeed then reads "
        f"{os.path.join(root, 'latest_universal')!r}); or resume on {facts.data_parallel_size} processes",
    )


@rule(
    "LP803", "error", "resume", "a DeepSpeed checkpoint of another ZeRO stage",
    fails=_MODEL + _deepspeed_folder(2, 8)
    + 'Trainer(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8).fit(model, '
    'ckpt_path="run.ckpt")',
    fixed=_MODEL + _deepspeed_folder(2, 8)
    + 'Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8).fit(model, ckpt_path="run.ckpt")',
    evidence="source: deepspeed/runtime/engine.py, DeepSpeedEngine._get_ckpt_name looks for "
    "zero_pp_rank_R_mp_rank_00_model_states.pt under ZeRO-3 and mp_rank_00_model_states.pt under ZeRO-1/2, which a "
    "checkpoint of the other stage does not have; Lightning then raises 'DeepSpeed was unable to load the checkpoint' "
    "(deepspeed 0.19.8, lightning 2.6.6); GPU check benchmarks/gpu/resume_checks.py",
)  # fmt: skip
def zero_stage_matches(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    if (
        facts is None
        or ctx.family != "deepspeed"
        or facts.format != "deepspeed"
        or facts.zero_stage is None
        or resume.zero_stage is None
        or (facts.zero_stage == 3) == (resume.zero_stage == 3)
    ):
        return None
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}, and {ctx.preset!r} runs ZeRO-{resume.zero_stage}; "
        "DeepSpeed keeps the weights in different files under ZeRO-3 and ZeRO-1/2, so it finds none and Lightning "
        "raises 'DeepSpeed was unable to load the checkpoint'",
        f"resume with a preset of ZeRO stage {facts.zero_stage} (the checkpoint's); or, to keep only the weights, "
        f"{_weights_only(ctx, to_one_file(facts))}",
    )


@rule(
    "LP804", "error", "resume", "a checkpoint without optimizer state resumed with its optimizer",
    fails=_MODEL + "torch.save({'state_dict': model.state_dict(), 'loops': {}, 'pytorch-lightning_version': '2.6.6'}, "
    "'run.ckpt')   # ModelCheckpoint(save_weights_only=True)\n"
    'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2).fit(model, ckpt_path="run.ckpt")',
    fixed=_MODEL + _FULL + 'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2).fit(model, '
    'ckpt_path="run.ckpt")',
    evidence="runtime: tests/evidence/test_fails_resume.py::test_lp804_weights_only_checkpoint_fails_in_lightning "
    "(Lightning raises "
    "KeyError 'Trying to restore optimizer state but checkpoint contains only the model')",
    setting=CPU_NODE,
)  # fmt: skip
def optimizer_state_present(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    if (
        facts is None
        or not resume.restores_optimizer
        or facts.format not in loadable(ctx, resume) - {"deepspeed"}
        or (facts.format == "file" and ctx.family == "deepspeed")
    ):
        return None
    if ctx.caller == "Trainer":
        # the Trainer's file: Lightning fails only without the list (an empty one, or [{}] of a fit without an
        # optimizer, loads)
        listed = facts.format == "file" and "optimizer_states" in facts.top_level
        if facts.writer != "trainer" or facts.optimizers or listed:
            return None
        what = "fit restores the optimizer and the loops"
    elif not resume.strict:  # Fabric.load(strict=False) skips what the checkpoint lacks
        return None
    elif resume.state_optimizers is not None:  # Fabric.load: the state's own keys tell what it loads
        missing = [key for key in resume.state_optimizers if key not in facts.top_level]
        if not missing:
            return None
        what = f"the state passed to load has the optimizer {', '.join(map(repr, missing))}, which it lacks"
    elif facts.optimizers or facts.unknown_entries:  # an entry that may be an optimizer's own state_dict()
        return None
    else:
        what = "the state has an optimizer"
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}, but {what}; Lightning fails on every rank "
        "after setup (a KeyError for a file, missing keys for a sharded folder)",
        f"{_weights_only(ctx, to_one_file(facts))}; or resume from a checkpoint saved with the optimizer "
        "(ModelCheckpoint(save_weights_only=False))",
    )


@rule(
    "LP805", "error", "resume", "the Trainer's sharded checkpoint of the other FSDP strategy",
    fails=_MODEL + _trainer_folder("model") + 'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model, '
    'ckpt_path="run.ckpt")',
    fixed=_MODEL + _trainer_folder("state_dict") + 'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model, '
    'ckpt_path="run.ckpt")',
    evidence="runtime: tests/evidence/test_fails_resume.py::test_lp805_fsdp_layout_fails_in_fsdp2 "
    "(ModelParallelStrategy finds no 'state_dict' entries in an FSDPStrategy folder)",
    setting=CPU_NODE,
)  # fmt: skip
def trainer_layout_matches(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    expected = TRAINER_MODEL_KEY.get(ctx.family or "")
    if (
        facts is None
        or ctx.caller != "Trainer"
        or facts.format != "distributed"
        or facts.writer != "trainer"
        or expected is None
        or facts.model_key in (None, expected)
    ):
        return None
    file = to_one_file(facts)
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}: the Trainer's sharded layout of the other FSDP "
        f"strategy; {ctx.preset!r} ({ctx.family} family) reads the weights under {expected!r} only and fails on every "
        "rank with missing keys",
        f"consolidate it into one file, which both FSDP strategies load at any world size: {file.steps}; then "
        f"{_resume_from(ctx, file.path)}",
    )


@rule(
    "LP806", "error", "resume", "a sharded checkpoint whose optimizer state is keyed by parameter ids",
    fails="model = nn.Linear(4, 4); optimizer = torch.optim.Adam(model.parameters())\n"
    "model(torch.ones(1, 4)).sum().backward(); optimizer.step()\n"
    "import torch.distributed.checkpoint as dcp   # a plain optimizer's state_dict(): keyed by parameter ids\n"
    "dcp.save({'state_dict': model.state_dict(), 'optimizer_0': optimizer.state_dict()}, checkpoint_id='run.ckpt')\n"
    "torch.save({'loops': {}, 'pytorch-lightning_version': '2.6.6'}, 'run.ckpt/meta.pt')\n"
    'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model, ckpt_path="run.ckpt")',
    fixed="model = nn.Linear(4, 4); optimizer = torch.optim.Adam(model.parameters())\n"
    "model(torch.ones(1, 4)).sum().backward(); optimizer.step()\n"
    "torch.save({'state_dict': model.state_dict(), 'optimizer_states': [optimizer.state_dict()], 'loops': {}, "
    "'pytorch-lightning_version': '2.6.6'}, 'run.ckpt')   # one file: Lightning re-keys it by name\n"
    'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model, ckpt_path="run.ckpt")',
    evidence="runtime: tests/evidence/test_fails_resume.py::test_lp806_id_keyed_sharded_optimizer_fails_in_fsdp2 "
    "(the sharded "
    "optimizer load finds no entries under the parameter names)",
    setting=CPU_NODE,
)  # fmt: skip
def sharded_optimizer_keyed_by_name(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    if (
        facts is None
        or facts.format != "distributed"
        or facts.optimizer_keys != "ids"
        or not resume.restores_optimizer
        or "distributed" not in loadable(ctx, resume)
    ):
        return None
    file = to_one_file(facts)
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}: a plain optimizer's state_dict() saved as "
        f"shards (torch_save_to_dcp, or dcp.save by hand); {ctx.preset!r} loads sharded optimizer state by "
        "parameter name and fails on every rank with missing keys",
        f"consolidate it into one file, whose plain optimizer state {ctx.preset!r} re-keys by parameter name itself, "
        f"and give the state back its integer keys (the shards stored them as text): {file.steps}, then in Python: "
        f"`{_integer_keys(facts, file.path)}`; then {_resume_from(ctx, file.path)}",
    )


def _integer_keys(facts: CheckpointFacts, path: str) -> str:
    """Python that turns a consolidated optimizer state's text keys (``'0'``) back into parameter indices."""
    fixed = "{**o, 'state': {int(k): v for k, v in o['state'].items()}}"
    if facts.writer == "trainer":  # consolidated into the Trainer's list
        change = f"c['optimizer_states'] = [{fixed} for o in c['optimizer_states']]"
    else:
        change = f"c.update({{k: (lambda o: {fixed})(c[k]) for k in {facts.optimizer_entries!r}}})"
    return f"import torch; c = torch.load({path!r}, weights_only=False); {change}; torch.save(c, {path!r})"


@rule(
    "LP807", "error", "resume", "the tag folder inside a DeepSpeed checkpoint instead of the checkpoint",
    fails=_MODEL + _deepspeed_folder(2, 8)
    + 'Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8).fit(model, '
    'ckpt_path="run.ckpt/checkpoint")',
    fixed=_MODEL + _deepspeed_folder(2, 8)
    + 'Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8).fit(model, ckpt_path="run.ckpt")',
    evidence="source: deepspeed/runtime/engine.py, DeepSpeedEngine.load_checkpoint returns (None, None) without a "
    "'latest' file, and Lightning's DeepSpeedStrategy.load_checkpoint raises 'DeepSpeed was unable to load the "
    "checkpoint' (deepspeed 0.19.8, lightning 2.6.6)",
)  # fmt: skip
def deepspeed_root_folder(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    if facts is None or ctx.family != "deepspeed" or facts.format != "deepspeed" or facts.tag is not None:
        return None
    parent = os.path.dirname(facts.path.rstrip("/" + os.sep)) or "."
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is the tag folder of a DeepSpeed checkpoint (it holds "
        f"{facts.zero_shards} ZeRO shard files but no 'latest' file); DeepSpeed reads 'latest' in the folder it is "
        "given to find the tag, finds none and loads nothing",
        f"pass the folder that holds the 'latest' file: ckpt_path={parent!r}",
    )


@rule(
    "LP808", "error", "resume", "Trainer.fit resuming a checkpoint the Trainer did not save",
    fails=_MODEL + "optimizer = torch.optim.Adam(model.parameters())   # saved by Fabric (or torch.save)\n"
    "torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'step': 100}, 'run.ckpt')\n"
    'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2).fit(model, ckpt_path="run.ckpt")',
    fixed=_MODEL + _FULL + 'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2).fit(model, '
    'ckpt_path="run.ckpt")',
    evidence="runtime: tests/evidence/test_fails_resume.py::test_lp808_fabric_checkpoint_fails_in_trainer_fit "
    "(Lightning raises "
    "KeyError 'pytorch-lightning_version' on every rank: a Fabric checkpoint has none of the Trainer's keys)",
    setting=CPU_NODE,
)  # fmt: skip
def saved_by_the_trainer(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    if (
        facts is None
        or ctx.caller != "Trainer"
        or not resume.how.startswith("fit")
        or facts.writer == "trainer"
        or facts.format not in loadable(ctx, resume)
    ):
        return None
    needed = ("state_dict", "optimizer_states", "lr_schedulers") if facts.format == "file" else ("lr_schedulers",)
    missing = [key for key in needed if key not in facts.top_level]
    if not missing:  # not the Trainer's, but with what fit reads: Lightning loads it
        return None
    where = "its keys" if facts.format == "file" else "its meta.pt (Lightning's state beside the shards)"
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}; fit(ckpt_path=...) restores the Trainer's "
        f"state, and {where} lack {', '.join(map(repr, missing))}, so Lightning fails on every rank",
        _weights_only(ctx, to_one_file(facts)),
    )


@rule(
    "LP809", "warning", "resume", "a checkpoint whose facts cannot be read",
    fails=_MODEL + "import os; os.symlink('run.ckpt', 'run.ckpt')   # a symbolic link to itself\n"
    'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model, ckpt_path="run.ckpt")',
    fixed=_MODEL + _trainer_folder("state_dict") + 'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model, '
    'ckpt_path="run.ckpt")',
    setting=CPU_NODE,
)  # fmt: skip
def checkpoint_is_readable(ctx: Context, resume: Resume) -> Problem | None:
    if not resume.unreadable or ctx.family not in FORMATS:
        return None
    message = f"{_job(ctx, resume)}: the checkpoint was not checked, Lightning will try to load it: {resume.unreadable}"
    if resume.reader_failed:
        return Problem(
            message,
            "nothing to change in the job; please report this bug to lightning-presets with the checkpoint's layout; "
            "LIGHTNING_PRESETS_SKIP=LP809 silences this warning",
        )
    return Problem(
        message,
        "point ckpt_path at a checkpoint file or folder Lightning wrote; if this one is right, "
        "LIGHTNING_PRESETS_SKIP=LP809 silences this warning",
    )


RESUME_RULES: tuple[Rule, ...] = (
    format_is_loadable,
    zero_shards_match_world,
    zero_stage_matches,
    optimizer_state_present,
    trainer_layout_matches,
    sharded_optimizer_keyed_by_name,
    deepspeed_root_folder,
    saved_by_the_trainer,
    checkpoint_is_readable,
)
"""Every strategy preset runs these when it is given a checkpoint to load."""


# --------------------------------------------------------------------------- the entry point


def _deepspeed_settings(strategy: Any) -> tuple[int | None, bool, bool]:
    """(ZeRO stage, load_universal, load_full_weights) of a DeepSpeed strategy; (None, False, False) otherwise."""
    config = getattr(strategy, "config", None)
    if not isinstance(config, Mapping):
        return None, False, False
    zero = config.get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, Mapping) else None
    checkpoint = config.get("checkpoint")
    universal = bool(checkpoint.get("load_universal")) if isinstance(checkpoint, Mapping) else False
    return (stage if type(stage) is int else None), universal, getattr(strategy, "load_full_weights", False) is True


def _default_checkpoint_io(strategy: Any) -> bool:
    """Whether ``strategy`` reads checkpoints with Lightning's own ``TorchCheckpointIO`` (or has none)."""
    try:
        plugin = getattr(strategy, "checkpoint_io", None)
    except Exception:  # Fabric's ModelParallelStrategy and FSDPStrategy raise: they take no CheckpointIO
        return True
    for _ in range(4):  # AsyncCheckpointIO wraps the one that reads
        inner = getattr(plugin, "checkpoint_io", None) if type(plugin).__name__ == "AsyncCheckpointIO" else None
        if inner is None:
            break
        plugin = inner
    return plugin is None or type(plugin).__name__ == "TorchCheckpointIO"


def resume_facts(
    path: object,
    *,
    strategy: Any = None,
    how: str = "fit(ckpt_path=...)",
    restores_optimizer: bool = True,
    state_optimizers: tuple[str, ...] | None = None,
    strict: bool = True,
) -> Resume | None:
    """What the resume rules read: the checkpoint at ``path`` and the job's loading settings (``strategy``: the
    Lightning strategy that will load it). ``None`` when ``path`` is not a local path or does not exist: Lightning
    reports those itself."""
    text = local_path(path)
    if text is None:
        return None
    try:
        stage, universal, full_weights = _deepspeed_settings(strategy)
        default_io = _default_checkpoint_io(strategy)
    except Exception:  # a strategy whose attributes raise: its settings are unknown, the checkpoint is still read
        stage, universal, full_weights, default_io = None, False, False, True
    failed = False
    try:
        facts, unreadable = read_checkpoint(text), ""
    except FileNotFoundError:
        return None
    except CheckpointReadError as error:
        facts, unreadable, failed = None, clean(str(error), MAX_TEXT * 4), error.internal
    return Resume(
        path=text,
        checkpoint=facts,
        unreadable=unreadable,
        reader_failed=failed,
        how=how,
        restores_optimizer=restores_optimizer,
        state_optimizers=state_optimizers,
        strict=strict,
        zero_stage=stage,
        load_universal=universal,
        load_full_weights=full_weights,
        default_checkpoint_io=default_io,
    )


def resume_findings(
    path: object,
    context: Context,
    *,
    strategy: Any = None,
    how: str = "fit(ckpt_path=...)",
    restores_optimizer: bool = True,
    own: tuple[Rule, ...] = (),
    state_optimizers: tuple[str, ...] | None = None,
    strict: bool = True,
) -> list[Finding]:
    """Every finding of the resume rules (and of the preset's ``own`` rules of stage ``resume``) for loading
    ``path`` into the job ``context``.

    The hook in :mod:`lightning_presets.guards.strategy` calls it before ``load_checkpoint``; ``lightning-presets
    check --resume-from PATH`` is to call it with the constructed strategy.
    """
    own = tuple(each for each in own if each.stage == "resume" and each not in RESUME_RULES)
    if context.family not in FORMATS and not own:  # XLA's own format, a third party's family: nothing to check
        return []
    skipped = skipped_rules()
    if "ALL" in skipped or all(str(each.code).upper() in skipped for each in (*RESUME_RULES, *own)):
        return []  # LIGHTNING_PRESETS_SKIP: not even read
    resume = resume_facts(
        path,
        strategy=strategy,
        how=how,
        restores_optimizer=restores_optimizer,
        state_optimizers=state_optimizers,
        strict=strict,
    )
    if resume is None:
        return []
    return run_rules((*RESUME_RULES, *own), "resume", context, resume)
