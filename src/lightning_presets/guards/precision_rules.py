"""Rules every precision preset gets (hardware), and rules across a strategy preset and a precision preset."""

from __future__ import annotations

from lightning_presets.core.context import Context, PrecisionContext
from lightning_presets.core.preset import PrecisionPreset
from lightning_presets.core.rules import Problem, Rule, rule


def _capability_text(capability: tuple[int, int]) -> str:
    return f"{capability[0]}.{capability[1]}"


@rule(
    "LP603", "error", "options", "a CUDA-only precision preset without a CUDA device",
    fails='lightning_presets.precision("fp8-te")   # on a machine without a CUDA GPU',
    fixed='lightning_presets.precision("fp8-te")   # on a machine with an H100',
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
)  # fmt: skip
def capability_sufficient(ctx: PrecisionContext) -> Problem | None:
    preset = ctx.requirement
    if preset is None or preset.min_capability is None or ctx.capability is None or ctx.cuda_devices == 0:
        return None
    if ctx.capability >= preset.min_capability:
        return None
    return Problem(
        f"{ctx.call()}: the GPU has compute capability {_capability_text(ctx.capability)}, and {ctx.preset!r} "
        f"needs {_capability_text(preset.min_capability)} or newer ({preset.capability_reason}); it is refused "
        "rather than silently falling back to 16-bit",
        "use precision='bf16-mixed' (capability 8.0+) or precision='16-mixed' on this GPU, or run on a GPU of "
        f"capability {_capability_text(preset.min_capability)}+",
    )


@rule(
    "LP605", "warning", "options", "the GPU's compute capability could not be read without initialising CUDA",
    fails='lightning_presets.precision("fp8-te")   # CUDA GPU visible, no pynvml, CUDA not initialised',
    fixed="pip install nvidia-ml-py   # then the capability is read through NVML",
)  # fmt: skip
def capability_known(ctx: PrecisionContext) -> Problem | None:
    preset = ctx.requirement
    if preset is None or preset.min_capability is None or ctx.capability is not None or ctx.cuda_devices == 0:
        return None
    return Problem(
        f"{ctx.call()}: the GPU's compute capability is unknown here (reading it would initialise CUDA in this "
        f"process); {ctx.preset!r} needs {_capability_text(preset.min_capability)}+, which is checked again when "
        "the plugin converts the model",
        "install nvidia-ml-py so that the capability is read through NVML, or ignore this warning if the GPUs "
        f"are of capability {_capability_text(preset.min_capability)}+",
    )


HARDWARE_RULES: tuple[Rule, ...] = (needs_cuda_device, capability_sufficient, capability_known)
"""Run for every precision preset, built-in or not; built-in presets also list them so that docs show them."""


def with_hardware_rules(preset: PrecisionPreset) -> tuple[Rule, ...]:
    return (*HARDWARE_RULES, *(each for each in preset.rules if each not in HARDWARE_RULES))


@rule(
    "LP606", "error", "construction", "a CUDA-only precision preset with another accelerator",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cpu", plugins=[lightning_presets.precision('
    '"fp8-torchao")])',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", plugins=[lightning_presets.precision('
    '"fp8-torchao")])',
)  # fmt: skip
def precision_preset_on_cuda(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    if preset is None or not preset.needs_cuda or ctx.accelerator == "cuda":
        return None
    return Problem(
        f"`{ctx.caller}(strategy={ctx.preset!r}, accelerator={ctx.accelerator!r}, plugins=[lightning_presets."
        f"precision({preset.name!r})])`: the {preset.name!r} precision works only on CUDA devices",
        f"use accelerator='cuda', or drop the plugin and pass a precision= that {ctx.accelerator!r} supports",
    )


@rule(
    "LP607", "error", "construction", "a precision preset known not to work with the strategy preset",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", plugins=[lightning_presets.precision('
    '"bf16-fp32-reduce")])',
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", plugins=[lightning_presets.precision('
    '"bf16-fp32-reduce")])',
)  # fmt: skip
def precision_preset_fits_strategy(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    reason = preset.incompatibility(ctx.family, ctx.preset, ctx.caller) if preset is not None else None
    if preset is None or reason is None:
        return None
    return Problem(
        f"`{ctx.caller}(strategy={ctx.preset!r}, plugins=[lightning_presets.precision({preset.name!r})])`: "
        f"this combination is known not to work: {reason}",
        f"use {preset.name!r} with another strategy, or keep strategy={ctx.preset!r} with a precision= it supports",
    )


@rule(
    "LP608", "error", "construction", "a precision preset's GPU capability too low for the Trainer/Fabric",
    fails='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", plugins=[lightning_presets.precision('
    '"fp8-te")])   # on A100s',
    fixed='Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", precision="bf16-mixed")   # on A100s',
)  # fmt: skip
def precision_preset_capability(ctx: Context) -> Problem | None:
    preset = ctx.precision_preset
    if preset is None or preset.min_capability is None or ctx.gpu_capability is None:
        return None
    if ctx.accelerator != "cuda" or ctx.gpu_capability >= preset.min_capability:
        return None
    return Problem(
        f"`{ctx.caller}(strategy={ctx.preset!r}, plugins=[lightning_presets.precision({preset.name!r})])`: the "
        f"GPUs have compute capability {_capability_text(ctx.gpu_capability)}, {preset.name!r} needs "
        f"{_capability_text(preset.min_capability)}+ ({preset.capability_reason})",
        "pass precision='bf16-mixed' instead of the plugin on these GPUs",
    )


PRECISION_CROSS_RULES: tuple[Rule, ...] = (
    precision_preset_on_cuda,
    precision_preset_fits_strategy,
    precision_preset_capability,
)
"""Construction guards across a strategy preset and a precision preset; a strategy preset includes them in its
rules (they do nothing when the plugin does not come from :func:`precision`)."""
