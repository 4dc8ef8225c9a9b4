"""The resume rules (stage ``resume``, LP801-LP809): pure functions of the job's
:class:`~lightning_presets.core.context.Context` and a :class:`~lightning_presets.guards.resume.state.Resume`, each
refusal with the conversion that makes the checkpoint loadable (:mod:`~lightning_presets.checkpoints.conversions`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from types import MappingProxyType

from lightning_presets.checkpoints import CheckpointFacts
from lightning_presets.checkpoints.conversions import (
    Conversion,
    integer_keys,
    render,
    to_one_file,
    to_universal,
)
from lightning_presets.core.context import Context
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.guards.resume.examples import CPU_NODE, FULL, MODEL, deepspeed_folder, resumes, trainer_folder
from lightning_presets.guards.resume.state import FORMAT_NAMES, Resume, checkpoints_of, loadable

# --------------------------------------------------------------------------- messages and conversions


def _job(ctx: Context, resume: Resume) -> str:
    return f"{ctx.call('devices', 'num_nodes')} resuming from {resume.path!r} with {resume.how}"


def _resume_from(ctx: Context, path: str) -> str:
    return f"fit(model, ckpt_path={path!r})" if ctx.kind == "trainer" else f"fabric.load({path!r}, state)"


def _first(file: Conversion) -> str:
    return f"consolidate it: {render(file)}; then " if file.steps else ""


def _weights_only(ctx: Context, file: Conversion) -> str:
    """Load only the weights of ``file`` and start training afresh."""
    first = _first(file)
    if ctx.kind == "trainer":
        weights = f"torch.load({file.result!r}, weights_only=False)" + (f"[{file.key!r}]" if file.key else "")
        return (
            f"{first}load its weights with `model.load_state_dict({weights})` and call fit without ckpt_path (the "
            "optimizer and the loops start afresh)"
        )
    load = f"fabric.load({file.result!r}, {{{file.key!r}: model}}, strict=False)" if file.key else (
        f"fabric.load_raw({file.result!r}, model)"
    )  # fmt: skip
    return f"{first}load its weights with `{load}` (the optimizer starts afresh)"


def _loadable_conversion(ctx: Context, facts: CheckpointFacts) -> Conversion:
    """LP801's conversion: the checkpoint as one file, which the job resumes from unless DeepSpeed is on either side
    (then it loads the weights alone, or under ZeRO-3 with ``load_full_weights=True``)."""
    file = to_one_file(facts)
    own_format_only = checkpoints_of(ctx.family).own_format_only
    return file if own_format_only or facts.format == "deepspeed" else file.resuming()


def _layout_conversion(facts: CheckpointFacts) -> Conversion:
    """LP805's conversion: one file, which both FSDP strategies resume from."""
    return to_one_file(facts).resuming()


def conversion(ctx: Context, facts: CheckpointFacts, resume: Resume) -> str:
    """The conversion that makes ``facts`` loadable by the job (LP801), as commands and code with the real paths."""
    file = _loadable_conversion(ctx, facts)
    if checkpoints_of(ctx.family).own_format_only:
        if resume.zero_stage == 3:
            return (
                f"{_first(file)}load the file's weights with `lightning_presets.strategy({ctx.preset!r}, "
                f"load_full_weights=True{_target(ctx)})` and {_resume_from(ctx, file.result)} (DeepSpeed restores no "
                "optimizer state from one file: it starts afresh)"
            )
        return f"{_weights_only(ctx, file)}; or resume with the preset that wrote it"
    if facts.format == "deepspeed":
        return (
            f"DeepSpeed's ZeRO optimizer shards convert to no other strategy's optimizer state: "
            f"{_weights_only(ctx, file)}; or resume with a DeepSpeed preset at data-parallel size "
            f"{facts.data_parallel_size}"
        )
    return f"consolidate it into one file: {render(file)}; then {_resume_from(ctx, file.result)}"


def _deepspeed_checkpoint(ctx: Context, resume: Resume) -> CheckpointFacts | None:
    """The checkpoint's facts when a DeepSpeed preset resumes a DeepSpeed checkpoint (LP802, LP803, LP807)."""
    facts = resume.checkpoint
    own = facts is not None and facts.format in checkpoints_of(ctx.family).loads and facts.format == "deepspeed"
    return facts if own else None


def _target(ctx: Context) -> str:
    return "" if ctx.target == "trainer" else f", target={ctx.target!r}"


# --------------------------------------------------------------------------- the rules


@rule(
    "LP801", "error", "resume", "a checkpoint format the preset's strategy cannot load",
    fails=MODEL + trainer_folder("state_dict") + resumes("ddp_static_graph"),
    fixed=MODEL + trainer_folder("state_dict") + resumes("fsdp2"),
    evidence="runtime: DDP's torch.load of an fsdp2 folder: IsADirectoryError; each such cell of the resume matrix "
    "fails too",
    setting=CPU_NODE,
)  # fmt: skip
def format_is_loadable(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    formats = loadable(ctx, resume)
    if facts is None or not formats or facts.format in formats:
        return None
    takes = " and ".join(FORMAT_NAMES[each] for each in sorted(formats))
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}, but {ctx.preset!r} ({ctx.family} family) loads "
        f"only {takes} checkpoints; Lightning would fail on every rank once the processes have started",
        conversion(ctx, facts, resume),
    )


@rule(
    "LP802", "error", "resume", "ZeRO optimizer shards at another data-parallel size",
    fails=MODEL + deepspeed_folder(2, 8)
    + resumes("deepspeed_zero2_offload", "cuda", devices=4),
    fixed=MODEL + deepspeed_folder(2, 8)
    + resumes("deepspeed_zero2_offload", "cuda", devices=8),
    evidence="source: deepspeed/runtime/engine.py, DeepSpeedEngine._load_zero_checkpoint raises ZeRORuntimeException "
    "'The checkpoint being loaded used a DP world size of ... but the current world size is ...' when it loads "
    "optimizer states without load_universal (deepspeed 0.19.8)",
)  # fmt: skip
def zero_shards_match_world(ctx: Context, resume: Resume) -> Problem | None:
    facts = _deepspeed_checkpoint(ctx, resume)
    if (
        facts is None
        or not resume.restores_optimizer
        or not facts.zero_stage
        or facts.data_parallel_size in (None, ctx.world_size)
        or (facts.universal and resume.load_universal)
    ):
        return None
    strategy = f"strategy = lightning_presets.strategy({ctx.preset!r}{_target(ctx)}); "
    universal = f"{strategy}strategy.config['checkpoint'] = {{'load_universal': True}}"
    converted = to_universal(facts)
    convert = f"convert it: {render(converted)}; then " if converted.steps else ""
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}, and this job's data-parallel size is "
        f"{ctx.world_arithmetic}; DeepSpeed loads ZeRO optimizer shards only at the size that wrote them and raises "
        f"'The checkpoint being loaded used a DP world size of {facts.data_parallel_size} but the current world size "
        f"is {ctx.world_size}' on every rank",
        f"{convert}load the universal checkpoint: `{universal}`, pass strategy=strategy and resume from "
        f"{converted.result!r} (DeepSpeed then reads {os.path.join(converted.result, 'latest_universal')!r}); or "
        f"resume on {facts.data_parallel_size} processes",
    )


@rule(
    "LP803", "error", "resume", "a DeepSpeed checkpoint of another ZeRO stage",
    fails=MODEL + deepspeed_folder(2, 8)
    + resumes("deepspeed_zero3_offload_ckpt", "cuda", devices=8),
    fixed=MODEL + deepspeed_folder(2, 8)
    + resumes("deepspeed_zero2_offload", "cuda", devices=8),
    evidence="source: deepspeed/runtime/engine.py, DeepSpeedEngine._get_ckpt_name looks for "
    "zero_pp_rank_R_mp_rank_00_model_states.pt under ZeRO-3 and mp_rank_00_model_states.pt under ZeRO-1/2, which a "
    "checkpoint of the other stage does not have; Lightning then raises 'DeepSpeed was unable to load the checkpoint' "
    "(deepspeed 0.19.8, lightning 2.6.6)",
)  # fmt: skip
def zero_stage_matches(ctx: Context, resume: Resume) -> Problem | None:
    facts = _deepspeed_checkpoint(ctx, resume)
    if (
        facts is None
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
    fails=MODEL + "torch.save({'state_dict': model.state_dict(), 'lr_schedulers': [], "
    "'pytorch-lightning_version': '2.6.6'}, 'run.ckpt')   # ModelCheckpoint(save_weights_only=True)\n"
    + resumes("ddp_static_graph"),
    fixed=MODEL + FULL + resumes("ddp_static_graph"),
    evidence="runtime: Lightning raises KeyError 'Trying to restore optimizer state but checkpoint contains only the "
    "model'",
    setting=CPU_NODE,
)  # fmt: skip
def optimizer_state_present(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    if (
        facts is None
        or not resume.restores_optimizer
        or facts.format not in loadable(ctx, resume) - {"deepspeed"}
        or (facts.format == "file" and checkpoints_of(ctx.family).own_format_only)
    ):
        return None
    if ctx.kind == "trainer":
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
    fails=MODEL + trainer_folder("model") + resumes("fsdp2"),
    fixed=MODEL + trainer_folder("state_dict") + resumes("fsdp2"),
    evidence="runtime: ModelParallelStrategy finds no 'state_dict' entries in an FSDPStrategy folder",
    setting=CPU_NODE,
)  # fmt: skip
def trainer_layout_matches(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    expected = checkpoints_of(ctx.family).trainer_model_key
    if (
        facts is None
        or ctx.kind != "trainer"
        or facts.format != "distributed"
        or facts.writer != "trainer"
        or expected is None
        or facts.model_key in (None, expected)
    ):
        return None
    file = _layout_conversion(facts)
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}: the Trainer's sharded layout of the other FSDP "
        f"strategy; {ctx.preset!r} ({ctx.family} family) reads the weights under {expected!r} only and fails on every "
        "rank with missing keys",
        f"consolidate it into one file, which both FSDP strategies load at any world size: {render(file)}; then "
        f"{_resume_from(ctx, file.result)}",
    )


@rule(
    "LP806", "error", "resume", "a sharded checkpoint whose optimizer state is keyed by parameter ids",
    fails="model = nn.Linear(4, 4); optimizer = torch.optim.Adam(model.parameters())\n"
    "model(torch.ones(1, 4)).sum().backward(); optimizer.step()\n"
    "import torch.distributed.checkpoint as dcp   # a plain optimizer's state_dict(): keyed by parameter ids\n"
    "dcp.save({'state_dict': model.state_dict(), 'optimizer_0': optimizer.state_dict()}, checkpoint_id='run.ckpt')\n"
    "torch.save({'lr_schedulers': [], 'pytorch-lightning_version': '2.6.6'}, 'run.ckpt/meta.pt')\n"
    + resumes("fsdp2"),
    fixed="model = nn.Linear(4, 4); optimizer = torch.optim.Adam(model.parameters())\n"
    "model(torch.ones(1, 4)).sum().backward(); optimizer.step()\n"
    "torch.save({'state_dict': model.state_dict(), 'optimizer_states': [optimizer.state_dict()], 'lr_schedulers': [], "
    "'pytorch-lightning_version': '2.6.6'}, 'run.ckpt')   # one file: Lightning re-keys it by name\n"
    + resumes("fsdp2"),
    evidence="runtime: the sharded optimizer load finds no entries under the parameter names",
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
    file = _keyed_conversion(facts)
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}: a plain optimizer's state_dict() saved as "
        f"shards (torch_save_to_dcp, or dcp.save by hand); {ctx.preset!r} loads sharded optimizer state by "
        "parameter name and fails on every rank with missing keys",
        f"consolidate it into one file, whose plain optimizer state {ctx.preset!r} re-keys by parameter name itself, "
        f"and give the state back its integer keys (the shards stored them as text): {render(file)}; then "
        f"{_resume_from(ctx, file.result)}",
    )


def _keyed_conversion(facts: CheckpointFacts) -> Conversion:
    """LP806's conversion: one file, its optimizer state keyed by parameter indices again; the job resumes from it
    (``lightning-presets convert`` re-keys the Trainer's layout itself)."""
    file = to_one_file(facts)
    if facts.writer == "trainer":
        return file.resuming()
    return file.then(integer_keys(facts, file.result)).resuming()


@rule(
    "LP807", "error", "resume", "the tag folder inside a DeepSpeed checkpoint instead of the checkpoint",
    fails=MODEL + deepspeed_folder(2, 8)
    + resumes("deepspeed_zero2_offload", "cuda", devices=8, ckpt_path="run.ckpt/checkpoint"),
    fixed=MODEL + deepspeed_folder(2, 8)
    + resumes("deepspeed_zero2_offload", "cuda", devices=8),
    evidence="source: deepspeed/runtime/engine.py, DeepSpeedEngine.load_checkpoint returns (None, None) without a "
    "'latest' file, and Lightning's DeepSpeedStrategy.load_checkpoint raises 'DeepSpeed was unable to load the "
    "checkpoint' (deepspeed 0.19.8, lightning 2.6.6)",
)  # fmt: skip
def deepspeed_root_folder(ctx: Context, resume: Resume) -> Problem | None:
    facts = _deepspeed_checkpoint(ctx, resume)
    if facts is None or facts.tag is not None:
        return None
    parent = os.path.dirname(facts.path.rstrip("/" + os.sep)) or "."
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is the tag folder of a DeepSpeed checkpoint (it holds "
        f"{facts.zero_shards} ZeRO shard files but no 'latest' file); DeepSpeed reads 'latest' in the folder it is "
        "given to find the tag, finds none and loads nothing",
        f"pass the folder that holds the 'latest' file: ckpt_path={parent!r}",
    )


_VERSION = "pytorch-lightning_version"
"""The key of every checkpoint the Trainer saves, and the first that ``fit(ckpt_path=...)`` reads."""


@rule(
    "LP808", "error", "resume", "Trainer.fit resuming a checkpoint the Trainer did not save",
    fails=MODEL + "optimizer = torch.optim.Adam(model.parameters())   # saved by Fabric (or torch.save)\n"
    "torch.save({'model': model.state_dict(), 'optimizer': optimizer.state_dict(), 'step': 100}, 'run.ckpt')\n"
    + resumes("ddp_static_graph"),
    fixed=MODEL + FULL + resumes("ddp_static_graph"),
    evidence="runtime: Lightning raises KeyError 'pytorch-lightning_version' on every rank: a Fabric checkpoint has "
    "none of the Trainer's keys",
    setting=CPU_NODE,
)  # fmt: skip
def saved_by_the_trainer(ctx: Context, resume: Resume) -> Problem | None:
    facts = resume.checkpoint
    if (
        facts is None
        or ctx.kind != "trainer"
        or not resume.how.startswith("fit")
        or _VERSION in facts.top_level  # saved by the Trainer (or as it saves): the other rules read the rest
        or facts.format not in loadable(ctx, resume)
    ):
        return None
    # fit reads the version first (migrating the checkpoint, unconditionally), then the weights, the optimizer and
    # the scheduler states; a sharded folder's strategy loads weights and optimizer state from its shards itself.
    needed = ("state_dict", "optimizer_states", "lr_schedulers") if facts.format == "file" else ("lr_schedulers",)
    missing = [_VERSION, *(key for key in needed if key not in facts.top_level)]
    if facts.format == "distributed" and facts.writer == "torch":  # torch.distributed.checkpoint's own folder
        state = "it has no meta.pt (Lightning's state beside the shards), so Lightning fails on every rank"
    else:
        where = {
            "file": "its keys",
            "distributed": "its meta.pt (Lightning's state beside the shards)",
            "deepspeed": "its client state (the Trainer's keys DeepSpeed keeps in the tag folder's *_model_states.pt)",
        }.get(facts.format, "its keys")
        listed = ", ".join(map(repr, missing))
        state = f"{where} lack {listed}, so Lightning fails on every rank (KeyError {_VERSION!r} first)"
    return Problem(
        f"{_job(ctx, resume)}: {facts.path!r} is {facts.describe()}; fit(ckpt_path=...) restores the Trainer's "
        f"state, and {state}",
        _weights_only(ctx, to_one_file(facts)),
    )


@rule(
    "LP809", "warning", "resume", "a checkpoint whose facts cannot be read",
    fails=MODEL + "import os; os.symlink('run.ckpt', 'run.ckpt')   # a symbolic link to itself\n"
    + resumes("fsdp2"),
    fixed=MODEL + trainer_folder("state_dict") + resumes("fsdp2"),
    setting=CPU_NODE,
)  # fmt: skip
def checkpoint_is_readable(ctx: Context, resume: Resume) -> Problem | None:
    if not resume.unreadable or not checkpoints_of(ctx.family).checked:
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


_Plan = Callable[[Context, CheckpointFacts], Conversion]


def _of_facts(make: Callable[[CheckpointFacts], Conversion]) -> _Plan:
    return lambda ctx, facts: make(facts)


CONVERSIONS: Mapping[str, _Plan] = MappingProxyType(
    {
        "LP801": _loadable_conversion,
        "LP802": _of_facts(to_universal),
        "LP803": _of_facts(to_one_file),
        "LP804": _of_facts(to_one_file),
        "LP805": _of_facts(_layout_conversion),
        "LP806": _of_facts(_keyed_conversion),
        "LP808": _of_facts(to_one_file),
    }
)
"""The conversion each refusal's hint names, by code, built by the function its rule builds the hint from."""


def conversion_for(code: str, ctx: Context, resume: Resume) -> Conversion | None:
    """The conversion the hint of a refusal ``code`` names for this job and checkpoint (``None``: it names none, as
    LP807's, which names the right folder instead)."""
    planned = CONVERSIONS.get(code)
    return planned(ctx, resume.checkpoint) if planned is not None and resume.checkpoint is not None else None
