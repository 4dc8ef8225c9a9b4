"""The DeepSpeed rules on what the config says: offload, precision sections, batch arithmetic, ``"auto"``,
accumulation, activation checkpointing, and DeepSpeed's own parser. Each reads the one config view
(:func:`~lightning_presets.strategies.deepspeed.config.config_view`)."""

from __future__ import annotations

from typing import TypeGuard

from lightning_presets.core.context import Context
from lightning_presets.core.rules import Problem, rule
from lightning_presets.strategies.deepspeed.config import config_view

# Top-level config keys Lightning writes when they are absent, and from what.
_DERIVED = "DeepSpeed derives it as micro-batch × accumulation × world size"
_FILLED_WHEN_ABSENT = {
    "trainer": {
        "train_batch_size": _DERIVED,
        "train_micro_batch_size_per_gpu": "Lightning uses the train dataloader's batch size",
        "gradient_accumulation_steps": "Lightning uses Trainer(accumulate_grad_batches=...)",
        "gradient_clipping": "Lightning uses Trainer(gradient_clip_val=...)",
        "fp16": "Lightning writes it for precision='16-mixed'",
        "bf16": "Lightning writes it for precision='bf16-mixed'",
    },
    "fabric": {
        "train_batch_size": _DERIVED,
        "train_micro_batch_size_per_gpu": "Lightning uses 1",
        "fp16": "Lightning writes it for precision='16-mixed'",
        "bf16": "Lightning writes it for precision='bf16-mixed'",
    },
}


def batch_arithmetic(train_batch: int, micro: int, accumulation: int | None, world_size: int) -> str | None:
    """Why DeepSpeed would reject ``train_batch_size``, or ``None``. ``accumulation=None``: DeepSpeed derives it."""
    if accumulation is None:
        if train_batch % (micro * world_size) == 0:
            return None
        return (
            f"train_batch_size={train_batch} is not divisible by train_micro_batch_size_per_gpu={micro} × "
            f"world size {world_size} = {micro * world_size}, so DeepSpeed cannot derive gradient_accumulation_steps"
        )
    product = micro * accumulation * world_size
    if product == train_batch:
        return None
    return (
        f"train_batch_size={train_batch}, but train_micro_batch_size_per_gpu={micro} × "
        f"gradient_accumulation_steps={accumulation} × world size {world_size} = {product}"
    )


def _batch_hint(micro: int, accumulation: int, world_size: int, owner: str) -> str:
    return (
        f"remove train_batch_size from the config (DeepSpeed derives it), or set it to "
        f"{micro} × {accumulation} × {world_size} = {micro * accumulation * world_size}; {owner}"
    )


def _zero2(config: str, trainer: str = 'accelerator="cuda", devices=8') -> str:
    """An example: a Trainer of ``deepspeed_zero2_offload`` given the DeepSpeed ``config`` (as written) and the
    Trainer's other arguments ``trainer``."""
    return f'Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={config}), {trainer})'


@rule(
    "LP418", "error", "construction", "a config DeepSpeed's own parser refuses",
    fails=_zero2('{"zero_optimization": {"stage": 2, "reduce_bucket_sise": 500000000}}'),
    fixed=_zero2('{"zero_optimization": {"stage": 2, "reduce_bucket_size": 500000000}}'),
    evidence="runtime: DeepSpeedConfig parses the config when the engine is created and raises",
)  # fmt: skip
def deepspeed_accepts_the_config(ctx: Context) -> Problem | None:
    """The parser's refusal; the rules that name the same fault more precisely (the half-precision sections, the batch
    arithmetic, ``"auto"`` values, accumulation) supersede it."""
    config = config_view(ctx)
    if not config.passed:
        return None
    refusal = config.parsed.refusal
    if refusal is None:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: DeepSpeed's config parser refuses the config Lightning would pass it: "
        f"{refusal}; it would stop every process when `fit` creates the engine",
        "fix the key it names in the DeepSpeed config (the DeepSpeed docs list every key: "
        "https://www.deepspeed.ai/docs/config-json/)",
    )


@rule(
    "LP404", "warning", "construction", "parameter offload with a ZeRO stage below 3 (ignored by DeepSpeed)",
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", offload_parameters=True), '
    'accelerator="cuda", devices=8)',
    fixed='Trainer(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8)',
)  # fmt: skip
def param_offload_needs_stage3(ctx: Context) -> Problem | None:
    config = config_view(ctx)
    device, stage = config.param_offload_device, config.zero_stage
    if device == "none" or stage == 3:
        return None
    return Problem(
        f"{ctx.call()}: zero_optimization.offload_param offloads parameters to {device!r} with "
        f"ZeRO stage {stage}; DeepSpeed partitions (and so offloads) parameters only in stage 3 and silently "
        "ignores offload_param below it, so the parameters stay in GPU memory",
        "drop offload_parameters=True (stage 2 offloads optimizer state only, see offload_optimizer), or use "
        "strategy='deepspeed_zero3_offload_ckpt' for parameter offload",
    )


@rule(
    "LP405", "error", "construction", "fp16 and bf16 enabled together",
    fails=_zero2('{"fp16": {"enabled": True}, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}',
                 'accelerator="cuda"'),
    fixed=_zero2('{"bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}', 'accelerator="cuda"'),
    evidence="runtime: DeepSpeedConfig asserts on the config Lightning formats",
    supersedes=(deepspeed_accepts_the_config,),
)  # fmt: skip
def one_half_precision(ctx: Context) -> Problem | None:
    fp16, bf16, added = config_view(ctx).half_precision(ctx.precision)
    if not (fp16 and bf16):
        return None
    origin = (
        "the config enables both"
        if added is None
        else f"the config enables {'fp16' if added == 'bf16' else 'bf16'} and precision={ctx.precision!r} makes "
        f"Lightning add {added}.enabled=True"
    )
    return Problem(
        f"{ctx.call('precision')}: {origin}; DeepSpeed refuses fp16 and bf16 at the same time",
        "keep one: delete the fp16 or bf16 section from the config and let precision= choose "
        "('bf16-mixed' on Ampere or newer, '16-mixed' before)",
    )


@rule(
    "LP406", "error", "construction", "train_batch_size differs from micro-batch × accumulation × world size",
    fails='Fabric(strategy=lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config={'
    '"train_batch_size": 48, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}), '
    'accelerator="cuda", devices=8)',
    fixed='Fabric(strategy=lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config={'
    '"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}), '
    'accelerator="cuda", devices=8)',
    evidence="runtime: DeepSpeedConfig asserts on the config Fabric formats",
    supersedes=(deepspeed_accepts_the_config,),
)  # fmt: skip
def fabric_batch_size_adds_up(ctx: Context) -> Problem | None:
    config = config_view(ctx)
    train_batch = config.train_batch_size
    if ctx.kind != "fabric" or type(train_batch) is not int:
        return None
    micro = config.micro_batch_size  # Fabric sets 1 when absent
    accumulation = config.accumulation_steps
    world_size = config.data_parallel_size
    if type(micro) is not int or not (accumulation is None or type(accumulation) is int) or world_size is None:
        return None
    problem = batch_arithmetic(train_batch, micro, accumulation, world_size)
    if problem is None:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: {problem} (world size: {config.data_parallel_arithmetic})",
        _batch_hint(micro, accumulation or 1, world_size, "Fabric takes the micro-batch size from the config"),
    )


@rule(
    "LP407", "error", "trainer", "train_batch_size differs from micro-batch × accumulate_grad_batches × world size",
    fails=_zero2('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}',
                 'accelerator="cuda", devices=8, accumulate_grad_batches=1') + ".fit(nn.Linear(64, 64))",
    fixed=_zero2('{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}',
                 'accelerator="cuda", devices=8, accumulate_grad_batches=2') + ".fit(nn.Linear(64, 64))",
    evidence="runtime: DeepSpeedConfig asserts on the config the Trainer formats",
    supersedes=(deepspeed_accepts_the_config,),
)  # fmt: skip
def trainer_batch_size_adds_up(ctx: Context) -> Problem | None:
    config = config_view(ctx)
    train_batch, micro, accumulation = config.train_batch_size, config.micro_batch_size, ctx.accumulate_grad_batches
    if ctx.kind != "trainer" or not (type(train_batch) is type(micro) is type(accumulation) is int):
        return None
    world_size = config.data_parallel_size
    if world_size is None:
        return None
    problem = batch_arithmetic(train_batch, micro, accumulation, world_size)
    if problem is None:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')} with accumulate_grad_batches={accumulation}: {problem} "
        f"(world size: {config.data_parallel_arithmetic}); DeepSpeed would refuse it after every process has started",
        _batch_hint(micro, accumulation, world_size, "the Trainer sets gradient_accumulation_steps"),
    )


_USED_AS_GIVEN = ("optimizer", "scheduler")
"""Sections whose values DeepSpeed passes on as they are (to the optimizer and scheduler constructors)."""


def _auto_used_as_given(key: str) -> bool:
    """Whether DeepSpeed uses an ``"auto"`` at this dotted path as it is (and fails on it).

    Top-level values (batch sizes, ``gradient_clipping``) and optimizer/scheduler parameters are read as given;
    the config sections DeepSpeed models (``zero_optimization``, ``fp16``, ``bf16``, ...) drop ``"auto"`` and use
    their own defaults instead.
    """
    return "." not in key or key.split(".")[0] in _USED_AS_GIVEN


def _auto_fixes(ctx: Context, keys: list[str]) -> str:
    filled = _FILLED_WHEN_ABSENT[ctx.kind]
    removable = [key for key in keys if key.split(".")[0] in filled]
    to_set = [key for key in keys if key not in removable]
    fixes = []
    if removable:
        sections = dict.fromkeys(key.split(".")[0] for key in removable)
        fixes.append("delete " + ", ".join(f"{section} ({filled[section]})" for section in sections))
    if to_set:
        fixes.append(f"give {', '.join(to_set)} a number or true/false")
    return "; ".join(fixes)


@rule(
    "LP408", "error", "construction", '"auto" values DeepSpeed uses as given (batch sizes, clipping, optimizer)',
    fails=_zero2('{"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}'),
    fixed=_zero2('{"zero_optimization": {"stage": 2}}'),
    evidence="runtime: DeepSpeedConfig raises TypeError on \"auto\"",
    supersedes=(deepspeed_accepts_the_config,),
)  # fmt: skip
def no_auto_values(ctx: Context) -> Problem | None:
    keys = [key for key in config_view(ctx).auto_keys if _auto_used_as_given(key)]
    if not keys:
        return None
    return Problem(
        f'{ctx.call()}: the DeepSpeed config has "auto" for {", ".join(keys)}; "auto" is filled in by '
        "Hugging Face's integration, not by Lightning, and DeepSpeed fails on the string when the engine is created "
        "or at the first step",
        _auto_fixes(ctx, keys),
    )


@rule(
    "LP414", "warning", "construction", '"auto" values DeepSpeed replaces with its own defaults',
    fails=_zero2('{"zero_optimization": {"stage": 2, "reduce_bucket_size": "auto"}}'),
    fixed=_zero2('{"zero_optimization": {"stage": 2, "reduce_bucket_size": 500000000}}'),
)  # fmt: skip
def auto_values_defaulted(ctx: Context) -> Problem | None:
    keys = [key for key in config_view(ctx).auto_keys if not _auto_used_as_given(key)]
    if not keys:
        return None
    return Problem(
        f'{ctx.call()}: the DeepSpeed config has "auto" for {", ".join(keys)}; Lightning does not fill it in (Hugging '
        "Face's integration does), and DeepSpeed's config classes drop it for their defaults: e.g. an \"enabled\": "
        '"auto" section is off, whatever precision= says',
        _auto_fixes(ctx, keys),
    )


@rule(
    "LP409", "error", "construction", "gradient_accumulation_steps in the config when the Trainer owns accumulation",
    fails=_zero2('{"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}', 'accelerator="cuda"'),
    fixed=_zero2('{"zero_optimization": {"stage": 2}}', 'accelerator="cuda", accumulate_grad_batches=4'),
    evidence="runtime: Lightning raises MisconfigurationException",
    supersedes=(deepspeed_accepts_the_config,),
)  # fmt: skip
def trainer_owns_accumulation(ctx: Context) -> Problem | None:
    steps = config_view(ctx).accumulation_steps
    if ctx.kind != "trainer" or steps is None:
        return None
    return Problem(
        f"{ctx.call()}: the DeepSpeed config sets gradient_accumulation_steps={steps!r}, but with the Trainer "
        "Lightning sets it from accumulate_grad_batches and would refuse the config when `fit` starts",
        f"delete gradient_accumulation_steps from the config and pass Trainer(..., accumulate_grad_batches={steps})",
    )


def _number(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


@rule(
    "LP421", "warning", "construction", "gradient_clipping in the config and a different gradient_clip_val",
    fails=_zero2('{"gradient_clipping": 1.0, "zero_optimization": {"stage": 2}}',
                 'accelerator="cuda", gradient_clip_val=0.3'),
    fixed=_zero2('{"zero_optimization": {"stage": 2}}', 'accelerator="cuda", gradient_clip_val=0.3'),
)  # fmt: skip
def one_clipping_threshold(ctx: Context) -> Problem | None:
    """Lightning's ``_format_batch_size_and_grad_accum_config`` keeps the config's ``gradient_clipping`` and DeepSpeed
    clips at it: the run trains, at a threshold the user set explicitly (in the config), and the Trainer's
    ``gradient_clip_val`` is dropped without a word. An option silently overridden by another explicit setting of the
    user's: a warning (the severity policy in docs/errors.md)."""
    configured = config_view(ctx).gradient_clipping
    requested = ctx.arguments.get("gradient_clip_val")
    if ctx.kind != "trainer" or not _number(configured) or not _number(requested) or requested <= 0:
        return None  # a Trainer that leaves clipping to the config (None or 0: it clips nothing), or "auto" (LP408)
    if float(configured) == float(requested):
        return None
    return Problem(
        f"{ctx.call('gradient_clip_val')}: the DeepSpeed config sets gradient_clipping={configured!r}, and Lightning "
        f"writes gradient_clip_val={requested!r} into the config only when it has none, so DeepSpeed clips the "
        f"gradient norm at {configured!r} and gradient_clip_val is ignored",
        f"set the threshold once: delete gradient_clipping from the config (Lightning then passes "
        f"gradient_clip_val={requested!r}), or drop gradient_clip_val to keep the config's {configured!r}",
    )


@rule(
    "LP413", "error", "construction", "contiguous activation checkpointing, which Lightning cannot configure",
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero3_offload_ckpt", partition_activations=True, '
    'contiguous_memory_optimization=True), accelerator="cuda", devices=8)',
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero3_offload_ckpt", partition_activations=True), '
    'accelerator="cuda", devices=8)',
    evidence="runtime: deepspeed.checkpointing.configure asserts",
)  # fmt: skip
def contiguous_checkpointing_configurable(ctx: Context) -> Problem | None:
    checkpointing = config_view(ctx).activation_checkpointing
    if checkpointing.get("contiguous_memory_optimization") is not True:
        return None
    partitioned = checkpointing.get("partition_activations") is True
    return Problem(
        f"{ctx.call()}: activation_checkpointing.contiguous_memory_optimization=True; Lightning passes it to "
        "deepspeed.checkpointing.configure without number_checkpoints"
        + ("" if partitioned else " (and it also needs partition_activations=True)")
        + ", so DeepSpeed's assertion stops the run in `setup`, after every process has started",
        "drop contiguous_memory_optimization (partition_activations and cpu_checkpointing still work), or call "
        "deepspeed.checkpointing.configure(..., num_checkpoints=N) yourself in configure_model",
    )


@rule(
    "LP419", "warning", "construction", "config keys DeepSpeed's parser rewrites or ignores",
    fails=_zero2('{"zero_optimization": {"stage": 2, "cpu_offload": True}}'),
    fixed=_zero2('{"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}'),
)  # fmt: skip
def deepspeed_takes_the_config_as_written(ctx: Context) -> Problem | None:
    warnings = config_view(ctx).parsed.warnings
    if not warnings:
        return None
    return Problem(
        f"{ctx.call()}: DeepSpeed's config parser says: {'; '.join(warnings)}",
        "write the config as DeepSpeed's current keys name it (https://www.deepspeed.ai/docs/config-json/)",
    )
