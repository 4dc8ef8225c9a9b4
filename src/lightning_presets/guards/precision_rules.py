"""Rules every precision preset gets (hardware), rules every strategy preset gets (bf16 on the GPU it runs on),
and rules across a strategy preset and a precision preset."""

from __future__ import annotations

from lightning_presets.core.codes import Setting
from lightning_presets.core.context import Context, PrecisionContext
from lightning_presets.core.preset import PrecisionPreset
from lightning_presets.core.rules import Problem, Rule, rule

NATIVE_BF16 = (8, 0)
"""bf16 arithmetic arrived with Ampere GPUs; below it torch emulates bf16 (``is_bf16_supported`` with emulation)."""
BF16_PRECISIONS = ("bf16-mixed", "bf16-true")
NO_GPU = Setting(gpus=0)
A100 = Setting(capability=(8, 0))
V100 = Setting(capability=(7, 0))
UNKNOWN_CAPABILITY = Setting(capability=None)
TRANSFORMER_ENGINE = Setting(simulated=("transformer_engine",))


def emulates_bf16(capability: tuple[int, int] | None) -> bool:
    """Whether a GPU of this compute capability runs bf16 emulated (known and below Ampere)."""
    return capability is not None and capability < NATIVE_BF16


def _capability_text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


@rule(
    "LP603", "error", "options", "a CUDA-only precision preset without a CUDA device",
    fails='lightning_presets.precision("nf4-bnb")   # on a machine without a CUDA GPU',
    fixed='lightning_presets.precision("nf4-bnb")   # on a machine with an H100',
    evidence="runtime: the Trainer raises RuntimeError 'Bitsandbytes is only supported on CUDA GPUs'",
    setting=NO_GPU,
    fixed_setting=Setting(),
)  # fmt: skip
def needs_cuda_device(ctx: PrecisionContext) -> Problem | None:
    preset = ctx.requirement
    if preset is None or not preset.needs_cuda or ctx.cuda_devices > 0:
        return None
    return Problem(
        f"{ctx.call()}: the {ctx.preset!r} precision needs a CUDA GPU and this process sees none "
        f"(when the plugin is {ctx.when})",
        "run on a machine with a CUDA GPU; `lightning-presets check` simulates one for validating a "
        "configuration on a laptop",
    )


@rule(
    "LP604", "error", "options", "a GPU whose compute capability is below what the precision needs",
    fails='lightning_presets.precision("fp8-te")   # on an A100 (capability 8.0)',
    fixed='lightning_presets.precision("bf16-fp32-reduce")   # on an A100; FP8 needs an H100/L4/RTX 4090 (8.9+)',
    evidence="gpu: torch._scaled_mm refuses the GPU; runs on GPUs below 8.9 only, not run yet",
    setting=A100,
)  # fmt: skip
def capability_sufficient(ctx: PrecisionContext) -> Problem | None:
    return _below_capability(ctx, "it is refused rather than silently falling back to 16-bit")


def _below_capability(ctx: PrecisionContext, consequence: str) -> Problem | None:
    preset = ctx.requirement
    if preset is None or preset.min_capability is None or ctx.capability is None or ctx.cuda_devices == 0:
        return None
    if ctx.capability >= preset.min_capability:
        return None
    return Problem(
        f"{ctx.call()}: the GPU has compute capability {_capability_text(ctx.capability)}, and {ctx.preset!r} "
        f"needs {_capability_text(preset.min_capability)} or newer ({preset.capability_reason}); {consequence}",
        "use precision='bf16-mixed' (capability 8.0+) or precision='16-mixed' on this GPU, or run on a GPU of "
        f"capability {_capability_text(preset.min_capability)}+",
    )


@rule(
    "LP616", "warning", "options", "a GPU below the compute capability a precision preset is made for (slow)",
    fails="lightning_presets.precision(\"acme-fp8-emulated\")   # min_capability=(8, 9), capability_severity="
    "\"warning\", on an A100",
    fixed="lightning_presets.precision(\"acme-fp8-emulated\")   # on an H100",
    setting=A100,
    fixed_setting=Setting(),
)  # fmt: skip
def capability_recommended(ctx: PrecisionContext) -> Problem | None:
    """LP604 for a preset that declares ``capability_severity="warning"``: below the capability it runs, slower."""
    return _below_capability(ctx, "it runs, slower than on a GPU made for it")


@rule(
    "LP605", "warning", "options", "the GPU's compute capability could not be read (no NVML)",
    fails='lightning_presets.precision("fp8-torchao")   # CUDA GPU visible, but libnvidia-ml.so.1 cannot be loaded',
    fixed='lightning_presets.precision("fp8-torchao")   # the driver\'s NVML is readable: the capability is known',
    setting=UNKNOWN_CAPABILITY,
    fixed_setting=Setting(),
)  # fmt: skip
def capability_known(ctx: PrecisionContext) -> Problem | None:
    preset = ctx.requirement
    if preset is None or preset.min_capability is None or ctx.capability is not None or ctx.cuda_devices == 0:
        return None
    return Problem(
        f"{ctx.call()}: the GPU's compute capability is unknown here (the driver's NVML library, libnvidia-ml.so.1, "
        f"could not be read, and reading it through CUDA would create a context); {ctx.preset!r} needs "
        f"{_capability_text(preset.min_capability)}+, which is checked again when the plugin converts the model",
        "make the NVIDIA driver's libnvidia-ml.so.1 visible to the dynamic loader (LD_LIBRARY_PATH, or the container "
        f"runtime's driver mounts), or ignore this warning if the GPUs are of capability "
        f"{_capability_text(preset.min_capability)}+",
    )


HARDWARE_RULES: tuple[Rule, ...] = (needs_cuda_device, capability_sufficient, capability_known)
"""Run for every precision preset, built-in or not; built-in presets also list them so that docs show them."""


def hardware_rules(preset: PrecisionPreset) -> tuple[Rule, ...]:
    """The hardware rules every precision preset gets; LP616 instead of LP604 for a preset that declares a GPU below
    its ``min_capability`` slow rather than failing (``capability_severity="warning"``)."""
    if preset.capability_severity != "warning":
        return HARDWARE_RULES
    return tuple(capability_recommended if each is capability_sufficient else each for each in HARDWARE_RULES)


def with_hardware_rules(preset: PrecisionPreset) -> tuple[Rule, ...]:
    """Its hardware rules, then the preset's own."""
    hardware = hardware_rules(preset)
    return (*hardware, *(each for each in preset.rules if each not in (*HARDWARE_RULES, capability_recommended)))


@rule(
    "LP615", "warning", "construction", "bf16 on a GPU without native bf16: emulated, slow",
    fails='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, precision="bf16-mixed")   # V100s',
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, precision="16-mixed")   # V100s',
    setting=V100,
)  # fmt: skip
def bf16_is_native(ctx: Context) -> Problem | None:
    capability = ctx.gpu_capability
    if ctx.accelerator != "cuda" or capability is None or not emulates_bf16(capability):
        return None
    if ctx.precision not in BF16_PRECISIONS:
        return None
    return Problem(
        f"{ctx.call('precision')}: the GPUs have compute capability {_capability_text(capability)}, and bf16 "
        f"arithmetic is native from {_capability_text(NATIVE_BF16)} (Ampere) on; below it torch emulates bf16, "
        "which trains correctly but far slower, and Triton (torch.compile) kernels refuse it",
        "use precision='16-mixed' (fp16 with a loss scaler) on these GPUs, or run on Ampere or newer",
    )


STRATEGY_HARDWARE_RULES: tuple[Rule, ...] = (bf16_is_native,)
"""Run for every strategy preset, built-in or not (the guard head adds them); built-in presets also list them."""


@rule(
    "LP614", "warning", "construction", "16-true on a sharded preset: fp16 weights without a loss scaler",
    fails='Trainer(strategy="fsdp_grad_op", accelerator="cuda", devices=8, precision="16-true")',
    fixed='Trainer(strategy="fsdp_grad_op", accelerator="cuda", devices=8, precision="16-mixed")',
)  # fmt: skip
def half_weights_have_a_scaler(ctx: Context) -> Problem | None:
    if ctx.precision != "16-true":
        return None
    return Problem(
        f"{ctx.call('precision')}: precision='16-true' keeps the weights, gradients and optimizer state in fp16 "
        "with no loss scaler, so small gradients underflow to zero and updates smaller than fp16's resolution are "
        "lost: the loss may stall or turn NaN without an error",
        "use precision='bf16-true' (same memory, bf16's range) on Ampere or newer"
        + (
            ", or precision='bf16-mixed' (fp32 weights); this strategy has no fp16 loss scaler for '16-mixed'"
            if ctx.family is not None and not ctx.family.fp16_loss_scaler
            else ", or precision='16-mixed' (fp32 weights and a loss scaler)"
        ),
    )


@rule(
    "LP606", "error", "construction", "a CUDA-only precision preset with another accelerator",
    fails='Trainer(strategy="fsdp2", accelerator="cpu", devices=2, plugins=[lightning_presets.precision("fp8-te")])',
    fixed='Trainer(strategy="fsdp2", accelerator="cpu", devices=2, precision="bf16-mixed")',
    evidence="runtime: the Trainer raises RuntimeError 'Bitsandbytes is only supported on CUDA GPUs'",
    setting=TRANSFORMER_ENGINE,
)  # fmt: skip
def precision_preset_on_cuda(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    if preset is None or not preset.needs_cuda or ctx.accelerator == "cuda":
        return None
    return Problem(
        f"`{ctx.constructor}(strategy={ctx.preset!r}, accelerator={ctx.accelerator!r}, plugins=[lightning_presets."
        f"precision({preset.name!r})])`: the {preset.name!r} precision works only on CUDA devices",
        f"use accelerator='cuda', or drop the plugin and pass a precision= that {ctx.accelerator!r} supports",
    )


@rule(
    "LP607", "error", "construction", "a precision preset known not to work with the strategy preset",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", plugins=[lightning_presets.precision('
    '"bf16-fp32-reduce")])',
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", plugins=[lightning_presets.precision('
    '"bf16-fp32-reduce")])',
    evidence="runtime: fit of fsdp2 with fp8-torchao: torchao raises RuntimeError mixing Tensor and DTensor",
)  # fmt: skip
def precision_preset_fits_strategy(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    reason = preset.incompatibility(ctx.family, ctx.preset, ctx.kind) if preset is not None else None
    if preset is None or reason is None:
        return None
    return Problem(
        f"`{ctx.constructor}(strategy={ctx.preset!r}, plugins=[lightning_presets.precision({preset.name!r})])`: "
        f"this combination is known not to work: {reason}",
        f"use {preset.name!r} with another strategy, or keep strategy={ctx.preset!r} with a precision= it supports",
    )


PRECISION_CROSS_RULES: tuple[Rule, ...] = (
    precision_preset_on_cuda,
    precision_preset_fits_strategy,
)
"""Construction guards across a strategy preset and a precision preset; a strategy preset includes them in its
rules (they do nothing when the plugin does not come from :func:`precision`)."""
