"""DeepSpeed (``DeepSpeedStrategy``) presets: ``deepspeed_zero2_offload`` and ``deepspeed_zero3_offload_ckpt``.

DeepSpeed itself is optional: nothing here imports it. The registry probes it (missing, broken, known-bad
torch pair) before Lightning's constructor would import it.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping
from functools import partial
from typing import Any

from torch import nn

from lightning_presets.core.context import Context, Options
from lightning_presets.core.mixins import base
from lightning_presets.core.namespaces import Kind
from lightning_presets.core.preset import Preset, Requirement
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.core.versions import tested
from lightning_presets.guards.blocks import find_repeated_blocks
from lightning_presets.guards.builders import BLOCKS, NO_BLOCKS, needs_cuda, repeated_block
from lightning_presets.guards.precision_rules import PRECISION_CROSS_RULES, STRATEGY_HARDWARE_RULES
from lightning_presets.guards.strategy import PresetHooks
from lightning_presets.registry import compat
from lightning_presets.strategies.deepspeed_config import FORCE_DS_CPU_OPTIMIZER, lightning_config, parse

DEEPSPEED = Requirement(module="deepspeed", extra="deepspeed", builds_against_torch=True)
ZERO_STAGES = (0, 1, 2, 3)
OFFLOAD_DEVICES = ("cpu", "nvme")
_PRESET_ONLY_KEYS = frozenset({"checkpoint_blocks"})

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


def resolved_config(ctx: Context) -> Mapping[str, Any]:
    """The DeepSpeed config the strategy holds (loaded from a path, or built from the arguments)."""
    config = ctx.resolved.get("config")
    return config if isinstance(config, Mapping) else {}


def _held_config(strategy: Any) -> Mapping[str, Any]:
    """``Preset.resolve`` of the DeepSpeed presets: ``config``, a copy of the config dict the strategy holds (loaded
    from a path, or built from the arguments), and ``lightning_config``, that config with what Lightning adds to it
    before ``deepspeed.initialize`` (``strategies.deepspeed_config.lightning_config``)."""
    return {
        "config": copy.deepcopy(getattr(strategy, "config", None)),
        "lightning_config": lightning_config(strategy, strategy._lp_namespace.caller),
    }


def passed_config(ctx: Context) -> Mapping[str, Any]:
    """The config Lightning will pass to DeepSpeed, as far as construction knows it."""
    config = ctx.resolved.get("lightning_config")
    return config if isinstance(config, Mapping) else {}


def _offloads_optimizer(config: Mapping[str, Any]) -> str | None:
    """The device ZeRO-Offload keeps the optimizer state on (``cpu``/``nvme``), or ``None``."""
    device = _section(_section(config, "zero_optimization"), "offload_optimizer").get("device")
    return device if device in OFFLOAD_DEVICES else None


def _deepspeed_cpu_optimizer(optimizer: Any) -> bool:
    """Whether DeepSpeed takes the optimizer as its own CPU optimizer with ZeRO-Offload (its CPU Adam or Lion)."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from deepspeed.ops.lion import DeepSpeedCPULion

    return isinstance(optimizer, (DeepSpeedCPUAdam, DeepSpeedCPULion))


def _section(config: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = config.get(key)
    return value if isinstance(value, Mapping) else {}


def _kind(ctx: Context) -> str:
    return "trainer" if ctx.caller == "Trainer" else "fabric"


def half_precision_sections(config: Mapping[str, Any], precision: str) -> tuple[bool, bool, str | None]:
    """(fp16 enabled, bf16 enabled, the section Lightning adds from ``precision`` or ``None``), as Lightning
    merges them: it adds ``fp16`` for 16-bit precision unless the config has an ``fp16`` section, else ``bf16``
    for bf16 precision unless the config has a ``bf16`` section."""
    fp16 = _section(config, "fp16").get("enabled") is True
    bf16 = _section(config, "bf16").get("enabled") is True
    added = None
    if "fp16" not in config and precision in ("16-mixed", "16-true"):
        fp16, added = True, "fp16"
    elif "bf16" not in config and precision in ("bf16-mixed", "bf16-true"):
        bf16, added = True, "bf16"
    return fp16, bf16, added


def auto_keys(config: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """Dotted paths of every value that is the string ``"auto"`` (a Hugging Face convention Lightning never fills)."""
    for key, value in config.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from auto_keys(value, f"{path}.")
        elif isinstance(value, str) and value.strip().lower() == "auto":
            yield path


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


deepspeed_needs_cuda = needs_cuda(
    "LP403", "DeepSpeed on an accelerator other than CUDA",
    why="DeepSpeed runs only on CUDA GPUs, got accelerator={accelerator!r}; Lightning would accept this and fail "
    "only when `fit` starts",
    hint="run it with accelerator='cuda'; to try sharded training on CPU use strategy='tp2d_hybrid' "
    "(FSDP2 over gloo) or strategy='ddp'",
    show=("accelerator", "devices"),
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8)',
    evidence="runtime: tests/evidence/test_fails_deepspeed.py::test_lp403_deepspeed_on_cpu_fails_when_fit_starts "
    "(fit: Lightning raises RuntimeError 'only supported on CUDA GPUs')",
)  # fmt: skip


@rule(
    "LP404", "warning", "construction", "parameter offload with a ZeRO stage below 3 (ignored by DeepSpeed)",
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", offload_parameters=True), '
    'accelerator="cuda", devices=8)',
    fixed='Trainer(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8)',
)  # fmt: skip
def param_offload_needs_stage3(ctx: Context) -> Problem | None:
    zero = _section(resolved_config(ctx), "zero_optimization")
    offload = _section(zero, "offload_param")
    stage = zero.get("stage", 0)
    if not offload or offload.get("device", "none") == "none" or stage == 3:
        return None
    return Problem(
        f"{ctx.call()}: zero_optimization.offload_param offloads parameters to {offload.get('device')!r} with "
        f"ZeRO stage {stage}; DeepSpeed partitions (and so offloads) parameters only in stage 3 and silently "
        "ignores offload_param below it, so the parameters stay in GPU memory",
        "drop offload_parameters=True (stage 2 offloads optimizer state only, see offload_optimizer), or use "
        "strategy='deepspeed_zero3_offload_ckpt' for parameter offload",
    )


@rule(
    "LP405", "error", "construction", "fp16 and bf16 enabled together",
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"fp16": {"enabled": '
    'True}, "bf16": {"enabled": True}, "zero_optimization": {"stage": 2}}), accelerator="cuda")',
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"bf16": {"enabled": '
    'True}, "zero_optimization": {"stage": 2}}), accelerator="cuda")',
    evidence="runtime: "
    "tests/evidence/test_fails_deepspeed.py::test_lp405_fp16_and_bf16_together_fail_in_deepspeeds_config "
    "(DeepSpeedConfig asserts on the config Lightning formats)",
)  # fmt: skip
def one_half_precision(ctx: Context) -> Problem | None:
    fp16, bf16, added = half_precision_sections(resolved_config(ctx), ctx.precision)
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
    evidence="runtime: "
    "tests/evidence/test_fails_deepspeed.py::test_lp406_fabrics_train_batch_size_fails_deepspeeds_batch_assertion "
    "(DeepSpeedConfig asserts on the config Fabric formats)",
)  # fmt: skip
def fabric_batch_size_adds_up(ctx: Context) -> Problem | None:
    config = resolved_config(ctx)
    train_batch = config.get("train_batch_size")
    if ctx.caller != "Fabric" or type(train_batch) is not int:
        return None
    micro = config.get("train_micro_batch_size_per_gpu", 1)  # Fabric sets 1 when absent
    accumulation = config.get("gradient_accumulation_steps")
    if type(micro) is not int or not (accumulation is None or type(accumulation) is int):
        return None
    problem = batch_arithmetic(train_batch, micro, accumulation, ctx.world_size)
    if problem is None:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: {problem} (world size: {ctx.world_arithmetic})",
        _batch_hint(micro, accumulation or 1, ctx.world_size, "Fabric takes the micro-batch size from the config"),
    )


@rule(
    "LP407", "error", "trainer", "train_batch_size differs from micro-batch × accumulate_grad_batches × world size",
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"train_batch_size": 64, '
    '"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}), accelerator="cuda", devices=8, '
    "accumulate_grad_batches=1).fit(nn.Linear(64, 64))",
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"train_batch_size": 64, '
    '"train_micro_batch_size_per_gpu": 4, "zero_optimization": {"stage": 2}}), accelerator="cuda", devices=8, '
    "accumulate_grad_batches=2).fit(nn.Linear(64, 64))",
    evidence="runtime: "
    "tests/evidence/test_fails_deepspeed.py::test_lp407_the_trainers_accumulation_fails_deepspeeds_batch_assertion "
    "(DeepSpeedConfig asserts on the config the Trainer formats)",
)  # fmt: skip
def trainer_batch_size_adds_up(ctx: Context) -> Problem | None:
    config = resolved_config(ctx)
    train_batch = config.get("train_batch_size")
    micro = config.get("train_micro_batch_size_per_gpu")
    accumulation = ctx.accumulate_grad_batches
    if ctx.caller != "Trainer" or not (type(train_batch) is type(micro) is type(accumulation) is int):
        return None
    problem = batch_arithmetic(train_batch, micro, accumulation, ctx.world_size)
    if problem is None:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')} with accumulate_grad_batches={accumulation}: {problem} "
        f"(world size: {ctx.world_arithmetic}); DeepSpeed would refuse it after every process has started",
        _batch_hint(micro, accumulation, ctx.world_size, "the Trainer sets gradient_accumulation_steps"),
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
    filled = _FILLED_WHEN_ABSENT[_kind(ctx)]
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
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={'
    '"train_micro_batch_size_per_gpu": "auto", "zero_optimization": {"stage": 2}}), accelerator="cuda", devices=8)',
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": '
    '{"stage": 2}}), accelerator="cuda", devices=8)',
    evidence="runtime: "
    "tests/evidence/test_fails_deepspeed.py::test_lp408_auto_batch_values_fail_in_deepspeeds_config (DeepSpeedConfig "
    "raises TypeError on \"auto\")",
)  # fmt: skip
def no_auto_values(ctx: Context) -> Problem | None:
    keys = [key for key in auto_keys(resolved_config(ctx)) if _auto_used_as_given(key)]
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
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": '
    '{"stage": 2, "reduce_bucket_size": "auto"}}), accelerator="cuda", devices=8)',
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": '
    '{"stage": 2, "reduce_bucket_size": 500000000}}), accelerator="cuda", devices=8)',
)  # fmt: skip
def auto_values_defaulted(ctx: Context) -> Problem | None:
    keys = [key for key in auto_keys(resolved_config(ctx)) if not _auto_used_as_given(key)]
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
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={'
    '"gradient_accumulation_steps": 4, "zero_optimization": {"stage": 2}}), accelerator="cuda")',
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={'
    '"zero_optimization": {"stage": 2}}), accelerator="cuda", accumulate_grad_batches=4)',
    evidence="runtime: "
    "tests/evidence/test_fails_deepspeed.py::test_lp409_accumulation_steps_in_the_config_fail_in_fit (Lightning "
    "raises MisconfigurationException)",
)  # fmt: skip
def trainer_owns_accumulation(ctx: Context) -> Problem | None:
    steps = resolved_config(ctx).get("gradient_accumulation_steps")
    if ctx.caller != "Trainer" or steps is None:
        return None
    return Problem(
        f"{ctx.call()}: the DeepSpeed config sets gradient_accumulation_steps={steps!r}, but with the Trainer "
        "Lightning sets it from accumulate_grad_batches and would refuse the config when `fit` starts",
        f"delete gradient_accumulation_steps from the config and pass Trainer(..., accumulate_grad_batches={steps})",
    )


@rule(
    "LP410", "error", "options", "a ZeRO stage or offload device DeepSpeed does not know",
    fails='lightning_presets.strategy("deepspeed_zero2_offload", offload_optimizer_device="gpu")',
    fixed='lightning_presets.strategy("deepspeed_zero2_offload", offload_optimizer_device="cpu")',
    evidence="runtime: "
    "tests/evidence/test_fails_deepspeed.py::test_lp410_an_unknown_offload_device_fails_deepspeeds_config_validation "
    "(DeepSpeedConfig raises a validation error)",
)  # fmt: skip
def zero_values_known(options: Options) -> Problem | None:
    bad = []
    if options.values.get("stage", 2) not in ZERO_STAGES:
        bad.append("stage")
    bad += [
        key
        for key in ("offload_optimizer_device", "offload_params_device")
        if options.values.get(key, "cpu") not in (*OFFLOAD_DEVICES, "none")  # "none": DeepSpeed's "no offload"
    ]
    if not bad:
        return None
    return Problem(
        f"{options.call(*bad)}: Lightning accepts {' and '.join(bad)} as given, DeepSpeed fails on it later",
        f"stage is one of {', '.join(map(str, ZERO_STAGES))}; offload devices are "
        f"{', '.join(map(repr, OFFLOAD_DEVICES))} or 'none'",
    )


checkpoint_block_found = repeated_block(
    "LP411", "no repeated block found to checkpoint",
    consequence="so no activation is checkpointed and activation memory is not reduced",
    hint="pass the block class: lightning_presets.strategy({preset!r}, checkpoint_blocks={{MyBlock}}), "
    "or hold the blocks in an nn.ModuleList",
    unless_given=("checkpoint_blocks",),
    fails=NO_BLOCKS + 'Trainer(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8).fit(model)',
    fixed=BLOCKS + 'Trainer(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8).fit(model)',
)  # fmt: skip


@rule(
    "LP412", "error", "construction", "a precision plugin Lightning's DeepSpeed strategy cannot drive",
    fails="from lightning.pytorch.plugins import MixedPrecision\n"
    'Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, '
    'plugins=[MixedPrecision("bf16-mixed", "cuda")])',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, precision="bf16-mixed")',
    evidence="gpu: benchmarks/gpu/gpu_checks.py::proof_lp412_deepspeed_closure (training_step never runs; not run on "
    "a GPU yet)",
)  # fmt: skip
def deepspeed_precision_plugin(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    if preset is not None and preset.incompatibility(ctx.family, ctx.preset, ctx.caller) is not None:
        return None  # LP607 says why, in the precision preset's own words
    if ctx.precision_plugin is None or ctx.precision_is("DeepSpeedPrecision"):
        return None  # not constructed (check's syntax fallback), or DeepSpeed's own plugin
    return Problem(
        f"`{ctx.caller}(strategy={ctx.preset!r}, plugins=[{ctx.precision_plugin}(...)])`: Lightning's DeepSpeed "
        f"strategy steps the optimizer through DeepSpeedPrecision; {ctx.precision_plugin} hands DeepSpeed's "
        "optimizer a closure it never calls, so the model would not train",
        f"drop the plugin and pass precision={ctx.precision!r} (DeepSpeed takes its dtypes from precision= and its "
        "config)",
    )


@rule(
    "LP413", "error", "construction", "contiguous activation checkpointing, which Lightning cannot configure",
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero3_offload_ckpt", partition_activations=True, '
    'contiguous_memory_optimization=True), accelerator="cuda", devices=8)',
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero3_offload_ckpt", partition_activations=True), '
    'accelerator="cuda", devices=8)',
    evidence="runtime: "
    "tests/evidence/test_fails_deepspeed.py::test_lp413_contiguous_checkpointing_fails_as_lightning_configures_it "
    "(deepspeed.checkpointing.configure asserts)",
)  # fmt: skip
def contiguous_checkpointing_configurable(ctx: Context) -> Problem | None:
    checkpointing = _section(resolved_config(ctx), "activation_checkpointing")
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
    "LP415", "error", "construction", "gradient clipping by value, which DeepSpeed does not do",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, gradient_clip_val=1.0, '
    'gradient_clip_algorithm="value")',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, gradient_clip_val=1.0)',
    evidence="runtime: tests/evidence/test_fails_job.py::test_lp415_deepspeed_refuses_clipping_by_value "
    "(Lightning's DeepSpeedStrategy.init_deepspeed raises MisconfigurationException in `fit`)",
)  # fmt: skip
def clipping_by_norm_only(ctx: Context) -> Problem | None:
    algorithm = ctx.arguments.get("gradient_clip_algorithm")
    if ctx.caller != "Trainer" or str(getattr(algorithm, "value", algorithm)).lower() != "value":
        return None
    return Problem(
        f"{ctx.call('gradient_clip_val', 'gradient_clip_algorithm')}: DeepSpeed clips gradients itself, by their norm "
        "only; Lightning refuses clipping by value when `fit` sets DeepSpeed up, after every process has started",
        "drop gradient_clip_algorithm (clipping by norm, DeepSpeed's gradient_clipping), or use a strategy that clips "
        "by value, e.g. strategy='fsdp2'",
    )


@rule(
    "LP416", "warning", "optimizers", "a torch optimizer stepping ZeRO-Offload's CPU state (slow)",
    fails="import torch\nmodel = nn.Linear(64, 64)\n"
    'fabric = Fabric(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8)\n'
    "fabric.setup(model, torch.optim.AdamW(model.parameters()))",
    fixed="import torch\nmodel = nn.Linear(64, 64)   # or deepspeed.ops.adam.DeepSpeedCPUAdam with the offload\n"
    'fabric = Fabric(strategy=lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", '
    'offload_optimizer=False), accelerator="cuda", devices=8)\n'
    "fabric.setup(model, torch.optim.AdamW(model.parameters()))",
)  # fmt: skip
def offload_steps_with_cpu_adam(ctx: Context, model: nn.Module | None, optimizers: tuple[Any, ...]) -> Problem | None:
    config = passed_config(ctx)
    device = _offloads_optimizer(config)
    slow = [type(each).__name__ for each in optimizers if not _deepspeed_cpu_optimizer(each)]
    if device is None or not slow or config.get(FORCE_DS_CPU_OPTIMIZER, True) is not False:
        return None
    return Problem(
        f"{ctx.call()}: the optimizer state is offloaded to {device!r} and {', '.join(slow)} steps it there with "
        "torch's own CPU kernels, several times slower than DeepSpeed's vectorised CPU Adam; the preset lets it "
        f"({FORCE_DS_CPU_OPTIMIZER}=false) rather than stop the run",
        "return deepspeed.ops.adam.DeepSpeedCPUAdam(self.parameters(), lr=...) from configure_optimizers (same "
        "arguments as torch's Adam/AdamW, adamw_mode=True for AdamW)",
    )


@rule(
    "LP417", "error", "optimizers", "a torch optimizer with ZeRO-Offload, which DeepSpeed refuses in this config",
    fails="import torch\nmodel = nn.Linear(64, 64)\n"
    'fabric = Fabric(strategy=lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config={'
    '"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}), accelerator="cuda", devices=8)\n'
    "fabric.setup(model, torch.optim.AdamW(model.parameters()))",
    fixed="import torch\nmodel = nn.Linear(64, 64)\n"
    'fabric = Fabric(strategy=lightning_presets.strategy("deepspeed_zero2_offload", target="fabric", config={'
    '"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}, "zero_force_ds_cpu_optimizer": '
    'False}), accelerator="cuda", devices=8)\nfabric.setup(model, torch.optim.AdamW(model.parameters()))',
    evidence="runtime: tests/evidence/test_fails_job.py::test_lp417_deepspeed_refuses_a_torch_optimizer_with_offload "
    "(DeepSpeedEngine._configure_optimizer raises ZeRORuntimeException when the engine is created)",
)  # fmt: skip
def offload_takes_the_optimizer(ctx: Context, model: nn.Module | None, optimizers: tuple[Any, ...]) -> Problem | None:
    config = passed_config(ctx)
    device = _offloads_optimizer(config)
    refused = [type(each).__name__ for each in optimizers if not _deepspeed_cpu_optimizer(each)]
    if device is None or not refused or config.get(FORCE_DS_CPU_OPTIMIZER, True) is False:
        return None
    return Problem(
        f"{ctx.call()}: the DeepSpeed config offloads the optimizer state to {device!r} and leaves "
        f"{FORCE_DS_CPU_OPTIMIZER} at true, so DeepSpeed refuses {', '.join(refused)} (only its own CPU Adam or Lion) "
        "when the engine is created, after every process has started",
        "return deepspeed.ops.adam.DeepSpeedCPUAdam(self.parameters(), lr=...) from configure_optimizers, or add "
        f'"{FORCE_DS_CPU_OPTIMIZER}": false to the config (torch\'s optimizer then steps on the CPU, slower)',
    )


def _as_parsed_at_fit(ctx: Context) -> dict[str, Any]:
    """The config DeepSpeed will parse when ``fit`` starts, as far as construction knows it: the Trainer fills a missing
    micro-batch size from the dataloader then, so it is parsed as 1 and ``train_batch_size`` (which depends on it) is
    left to the batch-arithmetic rules (LP406, LP407); ``aio.use_gds``, which DeepSpeed checks against the accelerator
    of the machine it parses on, is left out for a job on CUDA."""
    config = dict(passed_config(ctx))
    if config and ctx.caller == "Trainer" and "train_micro_batch_size_per_gpu" not in config:
        config.pop("train_batch_size", None)
        config["train_micro_batch_size_per_gpu"] = 1
    aio = _section(config, "aio")
    if ctx.accelerator == "cuda" and "use_gds" in aio:  # validated against this machine's accelerator, not the job's
        config["aio"] = {key: value for key, value in aio.items() if key != "use_gds"}
    return config


@rule(
    "LP418", "error", "construction", "a config DeepSpeed's own parser refuses",
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": '
    '{"stage": 2, "reduce_bucket_sise": 500000000}}), accelerator="cuda", devices=8)',
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": '
    '{"stage": 2, "reduce_bucket_size": 500000000}}), accelerator="cuda", devices=8)',
    evidence="runtime: tests/evidence/test_fails_job.py::test_lp418_the_parser_is_deepspeeds_own (DeepSpeedConfig "
    "parses the config when the engine is created and raises)",
)  # fmt: skip
def deepspeed_accepts_the_config(ctx: Context) -> Problem | None:
    config = passed_config(ctx)
    more_precise = (
        one_half_precision, fabric_batch_size_adds_up, trainer_batch_size_adds_up, no_auto_values,
        trainer_owns_accumulation,
    )  # fmt: skip
    if not config or any(each.check(ctx) is not None for each in more_precise):
        return None
    refusal = parse(_as_parsed_at_fit(ctx), ctx.world_size).refusal
    if refusal is None:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: DeepSpeed's config parser refuses the config Lightning would pass it: "
        f"{refusal}; it would stop every process when `fit` creates the engine",
        "fix the key it names in the DeepSpeed config (the DeepSpeed docs list every key: "
        "https://www.deepspeed.ai/docs/config-json/)",
    )


@rule(
    "LP419", "warning", "construction", "config keys DeepSpeed's parser rewrites or ignores",
    fails='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": '
    '{"stage": 2, "cpu_offload": True}}), accelerator="cuda", devices=8)',
    fixed='Trainer(strategy=lightning_presets.strategy("deepspeed_zero2_offload", config={"zero_optimization": '
    '{"stage": 2, "offload_optimizer": {"device": "cpu"}}}), accelerator="cuda", devices=8)',
)  # fmt: skip
def deepspeed_takes_the_config_as_written(ctx: Context) -> Problem | None:
    config = _as_parsed_at_fit(ctx)
    warnings = parse(config, ctx.world_size).warnings if config else ()
    if not warnings:
        return None
    return Problem(
        f"{ctx.call()}: DeepSpeed's config parser says: {'; '.join(warnings)}",
        "write the config as DeepSpeed's current keys name it (https://www.deepspeed.ai/docs/config-json/)",
    )


def _device_indices(devices: Any) -> list[int] | None:
    """The GPU indices ``devices=`` names (``[1, 3]`` or ``"1,3"``), or ``None`` for a count or ``"auto"``."""
    if isinstance(devices, str) and "," in devices:
        parts = [part.strip() for part in devices.split(",") if part.strip()]
        return [int(part) for part in parts] if all(part.isdigit() for part in parts) else None
    if isinstance(devices, (list, tuple)) and all(type(index) is int for index in devices):
        return list(devices)
    return None


@rule(
    "LP420", "error", "construction", "GPU indices other than 0..n-1, which DeepSpeed cannot map to local ranks",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=[1, 3])',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=2)   # CUDA_VISIBLE_DEVICES=1,3',
    evidence="runtime: tests/evidence/test_fails_job.py::test_lp420_deepspeed_refuses_device_indices "
    "(lightning's _validate_device_index_selection raises RuntimeError in setup_environment, when `fit` starts)",
)  # fmt: skip
def devices_are_local_ranks(ctx: Context) -> Problem | None:
    indices = _device_indices(ctx.arguments.get("devices"))
    if indices is None or indices == list(range(len(indices))):
        return None
    return Problem(
        f"{ctx.call('devices')}: DeepSpeed maps each process to the GPU of its local rank, so it can use the "
        f"GPUs 0..{len(indices) - 1} only; Lightning refuses {indices} when `fit` starts",
        f"select the GPUs with CUDA_VISIBLE_DEVICES={','.join(map(str, indices))} and pass devices={len(indices)}",
    )


RULES: tuple[Rule, ...] = (
    deepspeed_needs_cuda,
    devices_are_local_ranks,
    param_offload_needs_stage3,
    one_half_precision,
    fabric_batch_size_adds_up,
    trainer_batch_size_adds_up,
    no_auto_values,
    auto_values_defaulted,
    trainer_owns_accumulation,
    zero_values_known,
    deepspeed_precision_plugin,
    contiguous_checkpointing_configurable,
    clipping_by_norm_only,
    deepspeed_accepts_the_config,
    deepspeed_takes_the_config_as_written,
    offload_steps_with_cpu_adam,
    offload_takes_the_optimizer,
    *PRECISION_CROSS_RULES,
    *STRATEGY_HARDWARE_RULES,
)


def checkpoint_blocks(model: nn.Module, blocks: set[type[nn.Module]]) -> int:
    """Wrap every instance of ``blocks`` in non-reentrant activation checkpointing; returns how many."""
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
        CheckpointImpl,
        apply_activation_checkpointing,
        checkpoint_wrapper,
    )

    classes = tuple(blocks)
    count = sum(1 for module in model.modules() if isinstance(module, classes))
    if count:
        apply_activation_checkpointing(
            model,
            checkpoint_wrapper_fn=partial(checkpoint_wrapper, checkpoint_impl=CheckpointImpl.NO_REENTRANT),
            check_fn=lambda module: isinstance(module, classes),
        )
    return count


class _DeepSpeedHooks(PresetHooks):
    config: Any
    lightning_module: Any
    DEEPSPEED_ENV_VAR: str

    """Presets that checkpoint activations wrap the repeated blocks (the guards read the config the strategy holds
    through ``Preset.resolve``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        base(super()).__init__(*args, **kwargs)
        built_by_lightning = kwargs.get("config") is None and not os.environ.get(type(self).DEEPSPEED_ENV_VAR)
        if built_by_lightning and isinstance(self.config, dict):
            # ZeRO-Offload with the user's torch optimizer: slower than DeepSpeed's CPU Adam (LP416), not refused
            self.config.setdefault(FORCE_DS_CPU_OPTIMIZER, False)

    def _lp_prepare_model(self, model: nn.Module) -> None:
        """Setup rules, then activation checkpointing of the repeated blocks (presets that checkpoint only)."""
        self._lp_check_setup(model)
        if not self._lp_preset.activation_checkpointing:
            return
        blocks = self._lp_options.get("checkpoint_blocks") or find_repeated_blocks(model)
        if blocks:
            checkpoint_blocks(model, set(blocks))
            self.lp_blocks = set(blocks)


class DeepSpeedTrainerHooks(_DeepSpeedHooks):
    """Trainer side: the model is complete (``configure_model`` has run) when ``setup`` starts."""

    def setup(self, trainer: Any) -> None:
        self._lp_prepare_model(trainer.lightning_module)
        base(super()).setup(trainer)

    def _init_optimizers(self) -> tuple[Any, Any]:
        """DeepSpeed takes the optimizer from ``configure_optimizers`` here, not in ``setup_optimizers``."""
        optimizer, scheduler = base(super())._init_optimizers()
        self._lp_check_optimizers(self.lightning_module, [optimizer])
        return optimizer, scheduler


class DeepSpeedFabricHooks(_DeepSpeedHooks):
    """Fabric side: DeepSpeed sets the model up with its optimizer, which bypasses ``setup_module``."""

    def setup_module_and_optimizers(self, module: nn.Module, optimizers: list[Any], scheduler: Any = None) -> Any:
        self._lp_check_model(module)
        self._lp_prepare_model(module)
        return compat.setup_module_and_optimizers(
            base(super()).setup_module_and_optimizers, module, optimizers, scheduler
        )

    def setup_module(self, module: nn.Module) -> Any:
        self._lp_prepare_model(module)
        return base(super()).setup_module(module)


def _prepare(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in values.items() if key not in _PRESET_ONLY_KEYS}


_EVIDENCE = "construction (Trainer and Fabric, simulated CUDA, deepspeed 0.19.8 installed; no GPU run)"
TESTED_WITH_ZERO2 = tested(
    _EVIDENCE,
    construction="the Trainer on 2 simulated nodes of 4 CUDA devices, with DeepSpeed 0.19.8 installed: ZeRO stage 2 "
    "with the optimizer offloaded to CPU in the config Lightning holds (ZeRO needs CUDA to run)",
    construction_test="tests/test_deepspeed.py::test_zero2_offload_constructs_on_simulated_cuda",
    deepspeed="0.19.8",
)
TESTED_WITH_ZERO3 = tested(
    _EVIDENCE,
    construction="Trainer and Fabric on 8 simulated CUDA devices, with DeepSpeed 0.19.8 installed: ZeRO stage 3 with "
    "parameters and optimizer offloaded to CPU in the config (ZeRO needs CUDA to run)",
    construction_test="tests/test_deepspeed.py::test_zero3_offload_ckpt_constructs_for_trainer_and_fabric",
    deepspeed="0.19.8",
)

DEEPSPEED_ZERO2_OFFLOAD = Preset(
    name="deepspeed_zero2_offload",
    description="DeepSpeed ZeRO stage 2 (optimizer state and gradients sharded) with optimizer state offloaded "
    "to CPU. For models whose optimizer state does not fit in GPU memory. CUDA only.",
    family="deepspeed",
    strategy={"trainer": "DeepSpeedStrategy", "fabric": "DeepSpeedStrategy"},
    init_params={"stage": 2, "offload_optimizer": True, "offload_optimizer_device": "cpu"},
    rules=RULES,
    requires=(DEEPSPEED,),
    mixins={"trainer": DeepSpeedTrainerHooks, "fabric": DeepSpeedFabricHooks},
    resolve=_held_config,
    cpu_offload=True,
    tested_with=TESTED_WITH_ZERO2,
)

DEEPSPEED_ZERO3_OFFLOAD_CKPT = Preset(
    name="deepspeed_zero3_offload_ckpt",
    description="DeepSpeed ZeRO stage 3 with parameters and optimizer state offloaded to CPU and activation "
    "checkpointing on the model's repeated blocks. For models that do not fit in GPU memory. CUDA only.",
    family="deepspeed",
    strategy={"trainer": "DeepSpeedStrategy", "fabric": "DeepSpeedStrategy"},
    init_params={
        "stage": 3,
        "offload_optimizer": True,
        "offload_parameters": True,
        "offload_optimizer_device": "cpu",
        "offload_params_device": "cpu",
        "checkpoint_blocks": None,
    },
    rules=(*RULES, checkpoint_block_found),
    requires=(DEEPSPEED,),
    mixins={"trainer": DeepSpeedTrainerHooks, "fabric": DeepSpeedFabricHooks},
    resolve=_held_config,
    extra_keys=_PRESET_ONLY_KEYS,
    prepare=_prepare,
    activation_checkpointing=True,
    cpu_offload=True,
    tested_with=TESTED_WITH_ZERO3,
)
