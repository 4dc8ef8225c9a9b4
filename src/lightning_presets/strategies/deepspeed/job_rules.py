"""The DeepSpeed rules on the rest of the job: the accelerator and its device indices, the preset's options, the
precision plugin, gradient clipping, the repeated blocks to checkpoint, and the optimizer ZeRO-Offload steps."""

from __future__ import annotations

from typing import Any

from torch import nn

from lightning_presets.core.context import Context, Options
from lightning_presets.core.rules import Problem, rule
from lightning_presets.guards.builders import (
    needs_cuda,
    repeated_block,
)
from lightning_presets.strategies.deepspeed.config import (
    FORCE_DS_CPU_OPTIMIZER,
    OFFLOAD_DEVICES,
    config_view,
)
from lightning_presets.strategies.deepspeed.options import DeepSpeedOptions

ZERO_STAGES = (0, 1, 2, 3)


def _deepspeed_cpu_optimizer(optimizer: Any) -> bool:
    """Whether DeepSpeed takes the optimizer as its own CPU optimizer with ZeRO-Offload (its CPU Adam or Lion)."""
    from deepspeed.ops.adam import DeepSpeedCPUAdam
    from deepspeed.ops.lion import DeepSpeedCPULion

    return isinstance(optimizer, (DeepSpeedCPUAdam, DeepSpeedCPULion))


def _offloads_optimizer(ctx: Context) -> bool:
    return config_view(ctx).optimizer_offload_device is not None


deepspeed_needs_cuda = needs_cuda(
    "LP403", "DeepSpeed on an accelerator other than CUDA",
    why="DeepSpeed runs only on CUDA GPUs, got accelerator={accelerator!r}; Lightning would accept this and fail "
    "only when `fit` starts",
    hint="run it with accelerator='cuda'; to try sharded training on CPU use strategy='tp2d_hybrid' "
    "(FSDP2 over gloo) or strategy='ddp'",
    show=("accelerator", "devices"),
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8)',
    evidence="runtime: fit: Lightning raises RuntimeError 'only supported on CUDA GPUs'",
)  # fmt: skip


@rule(
    "LP420", "error", "construction", "GPU indices other than 0..n-1, which DeepSpeed cannot map to local ranks",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=[1, 3])',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=2)   # CUDA_VISIBLE_DEVICES=1,3',
    evidence="runtime: lightning's _validate_device_index_selection raises RuntimeError in setup_environment, when "
    "`fit` starts",
)  # fmt: skip
def devices_are_local_ranks(ctx: Context) -> Problem | None:
    indices = ctx.device_indices
    if indices is None or indices == tuple(range(len(indices))):
        return None
    return Problem(
        f"{ctx.call('devices')}: DeepSpeed maps each process to the GPU of its local rank, so it can use the "
        f"GPUs 0..{len(indices) - 1} only; Lightning refuses {list(indices)} when `fit` starts",
        f"select the GPUs with CUDA_VISIBLE_DEVICES={','.join(map(str, indices))} and pass devices={len(indices)}",
    )


@rule(
    "LP410", "error", "options", "a ZeRO stage or offload device DeepSpeed does not know",
    fails='lightning_presets.strategy("deepspeed_zero2_offload", offload_optimizer_device="gpu")',
    fixed='lightning_presets.strategy("deepspeed_zero2_offload", offload_optimizer_device="cpu")',
    evidence="runtime: DeepSpeedConfig raises a validation error",
)  # fmt: skip
def zero_values_known(options: Options) -> Problem | None:
    view = DeepSpeedOptions.of(options)
    bad = [] if view.stage in ZERO_STAGES else ["stage"]
    # "none": DeepSpeed's "no offload"
    bad += [key for key, device in view.offload_devices.items() if device not in (*OFFLOAD_DEVICES, "none")]
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
    setup='Trainer(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8).fit(model)',
)  # fmt: skip


@rule(
    "LP412", "error", "construction", "a precision plugin Lightning's DeepSpeed strategy cannot drive",
    fails="from lightning.pytorch.plugins import MixedPrecision\n"
    'Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, '
    'plugins=[MixedPrecision("bf16-mixed", "cuda")])',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, precision="bf16-mixed")',
    evidence="gpu: training_step never runs; not run on a GPU yet",
)  # fmt: skip
def deepspeed_precision_plugin(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    if preset is not None and preset.incompatibility(ctx.family, ctx.preset, ctx.kind) is not None:
        return None  # LP607 says why, in the precision preset's own words
    if ctx.precision_plugin is None or ctx.precision_is("DeepSpeedPrecision"):
        return None  # not constructed (check's syntax fallback), or DeepSpeed's own plugin
    return Problem(
        f"`{ctx.constructor}(strategy={ctx.preset!r}, plugins=[{ctx.precision_plugin}(...)])`: Lightning's DeepSpeed "
        f"strategy steps the optimizer through DeepSpeedPrecision; {ctx.precision_plugin} hands DeepSpeed's "
        "optimizer a closure it never calls, so the model would not train",
        f"drop the plugin and pass precision={ctx.precision!r} (DeepSpeed takes its dtypes from precision= and its "
        "config)",
    )


@rule(
    "LP415", "error", "construction", "gradient clipping by value, which DeepSpeed does not do",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, gradient_clip_val=1.0, '
    'gradient_clip_algorithm="value")',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, gradient_clip_val=1.0)',
    evidence="runtime: Lightning's DeepSpeedStrategy.init_deepspeed raises MisconfigurationException in `fit`",
)  # fmt: skip
def clipping_by_norm_only(ctx: Context) -> Problem | None:
    if ctx.clip_algorithm_requested != "value":  # Lightning refuses the algorithm, with or without a value
        return None
    return Problem(
        f"{ctx.call('gradient_clip_val', 'gradient_clip_algorithm')}: DeepSpeed clips gradients itself, by their norm "
        "only; Lightning refuses clipping by value when `fit` sets DeepSpeed up, after every process has started",
        "drop gradient_clip_algorithm (clipping by norm, DeepSpeed's gradient_clipping), or use a strategy that clips "
        "by value, e.g. strategy='fsdp2'",
    )


@rule(
    "LP422", "error", "optimizers", "more than one optimizer, which DeepSpeed's engine cannot take",
    fails="import torch\nmodel = nn.Linear(64, 64)\n"
    'fabric = Fabric(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8)\n'
    "fabric.setup(model, torch.optim.AdamW(model.parameters()), torch.optim.SGD(model.parameters()))",
    fixed="import torch\nmodel = nn.Linear(64, 64)\n"
    'fabric = Fabric(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8)\n'
    "fabric.setup(model, torch.optim.AdamW(model.parameters()))",
    evidence="runtime: Lightning's DeepSpeedStrategy._init_optimizers raises MisconfigurationException (Trainer) and "
    "Fabric's setup_module_and_optimizers raises ValueError",
    unless="configure_optimizers returns one optimizer (Fabric: setup gets one)", construction=False,
    consequence="Lightning refuses the optimizers when the DeepSpeed engine is set up, after every process started",
)  # fmt: skip
def one_optimizer(ctx: Context, model: nn.Module | None, optimizers: tuple[Any, ...]) -> Problem | None:
    if len(optimizers) < 2:
        return None
    names = ", ".join(type(each).__name__ for each in optimizers)
    where = "configure_optimizers returns" if ctx.kind == "trainer" else "fabric.setup(...) gets"
    return Problem(
        f"{ctx.call()}: {where} {len(optimizers)} optimizers ({names}), but a DeepSpeed engine steps exactly one "
        "(with at most one scheduler): Lightning refuses them when the engine is set up, after every process has "
        "started",
        "step every parameter group with one optimizer (its param_groups can carry their own lr), or use an FSDP or "
        "DDP preset, which take several optimizers (e.g. a GAN's)",
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
    unless="configure_optimizers returns deepspeed.ops.adam.DeepSpeedCPUAdam (or DeepSpeedCPULion)",
    when=lambda ctx: _offloads_optimizer(ctx) and not config_view(ctx).forces_deepspeed_cpu_optimizer,
    consequence="a torch optimizer steps the offloaded state with torch's CPU kernels, several times slower",
    construction=False,
)  # fmt: skip
def offload_steps_with_cpu_adam(ctx: Context, model: nn.Module | None, optimizers: tuple[Any, ...]) -> Problem | None:
    config = config_view(ctx)
    device = config.optimizer_offload_device
    slow = [type(each).__name__ for each in optimizers if not _deepspeed_cpu_optimizer(each)]
    if device is None or not slow or config.forces_deepspeed_cpu_optimizer:
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
    evidence="runtime: DeepSpeedEngine._configure_optimizer raises ZeRORuntimeException when the engine is created",
    unless="configure_optimizers returns deepspeed.ops.adam.DeepSpeedCPUAdam (or DeepSpeedCPULion)",
    when=lambda ctx: _offloads_optimizer(ctx) and config_view(ctx).forces_deepspeed_cpu_optimizer,
    consequence=f"DeepSpeed refuses a torch optimizer with ZeRO-Offload when {FORCE_DS_CPU_OPTIMIZER} is true, as the "
    "engine is created", construction=False,
)  # fmt: skip
def offload_takes_the_optimizer(ctx: Context, model: nn.Module | None, optimizers: tuple[Any, ...]) -> Problem | None:
    config = config_view(ctx)
    device = config.optimizer_offload_device
    refused = [type(each).__name__ for each in optimizers if not _deepspeed_cpu_optimizer(each)]
    if device is None or not refused or not config.forces_deepspeed_cpu_optimizer:
        return None
    return Problem(
        f"{ctx.call()}: the DeepSpeed config offloads the optimizer state to {device!r} and leaves "
        f"{FORCE_DS_CPU_OPTIMIZER} at true, so DeepSpeed refuses {', '.join(refused)} (only its own CPU Adam or Lion) "
        "when the engine is created, after every process has started",
        "return deepspeed.ops.adam.DeepSpeedCPUAdam(self.parameters(), lr=...) from configure_optimizers, or add "
        f'"{FORCE_DS_CPU_OPTIMIZER}": false to the config (torch\'s optimizer then steps on the CPU, slower)',
    )
