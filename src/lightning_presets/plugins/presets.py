"""The built-in precision presets: ``fp8-te``, ``fp8-torchao``, ``nf4-bnb`` and ``bf16-fp32-reduce``.

Declared, not built: loading this module imports neither Transformer Engine, torchao nor bitsandbytes.
"""

from __future__ import annotations

from typing import Any

from torch import nn

from lightning_presets.core.context import PrecisionContext
from lightning_presets.core.namespaces import Kind
from lightning_presets.core.preset import PrecisionPreset, Requirement, every_kind
from lightning_presets.core.rules import Problem, rule
from lightning_presets.core.versions import tested
from lightning_presets.guards.builders import one_of
from lightning_presets.guards.precision_rules import HARDWARE_RULES, V100, emulates_bf16
from lightning_presets.plugins.fsdp_reduce import BF16FP32ReducePrecision
from lightning_presets.plugins.torchao_float8 import (
    FLOAT8_DIVISOR,
    RECIPES,
    TorchaoFloat8Precision,
    describe_skipped,
    float8_split,
)

FP8_CAPABILITY = (8, 9)
FP8_REASON = "FP8 tensor cores arrived with Ada and Hopper GPUs"
BF16_REASON = "bf16 arithmetic arrived with Ampere GPUs"
DTYPES = ("bfloat16", "float16", "float32")
_DEEPSPEED_CLOSURE = (
    "Lightning's DeepSpeed strategy steps the optimizer through DeepSpeedPrecision; this plugin hands DeepSpeed's "
    "optimizer a closure it never calls, so training_step and backward would never run"
)


def _dtype(name: Any) -> Any:
    import torch

    return getattr(torch, name) if isinstance(name, str) else name


@rule(
    "LP613", "error", "options", "a dtype name the precision preset does not take",
    fails='lightning_presets.precision("nf4-bnb", dtype="bf16")',
    fixed='lightning_presets.precision("nf4-bnb", dtype="bfloat16")',
    evidence="runtime: torch raises AttributeError for torch.bf16",
)  # fmt: skip
def dtype_names_known(ctx: PrecisionContext) -> Problem | None:
    bad = [key for key in ("weights_dtype", "dtype") if key in ctx.values and ctx.values[key] not in DTYPES]
    if not bad:
        return None
    return Problem(
        f"{ctx.call(*bad)}: {' and '.join(bad)} must name a torch dtype",
        f"use one of {', '.join(map(repr, DTYPES))}",
    )


@rule(
    "LP609", "warning", "options", "NF4 with a bf16 compute dtype on a GPU without native bf16: emulated, slow",
    fails='lightning_presets.precision("nf4-bnb")   # on a V100 or T4 (capability 7.x)',
    fixed='lightning_presets.precision("nf4-bnb", dtype="float16")   # on a V100 or T4',
    setting=V100,
)  # fmt: skip
def nf4_dtype_supported(ctx: PrecisionContext) -> Problem | None:
    if ctx.values.get("dtype") != "bfloat16" or ctx.capability is None or not emulates_bf16(ctx.capability):
        return None
    return Problem(
        f"{ctx.call('dtype')}: the GPU has compute capability {ctx.capability[0]}.{ctx.capability[1]}, and bf16 "
        f"arithmetic is native from 8.0 on ({BF16_REASON}); below it the dequantized matmuls run emulated, far slower",
        f"pass dtype='float16': lightning_presets.precision({ctx.preset!r}, dtype='float16')",
    )


float8_recipe_known = one_of(
    "LP612", "an unknown torchao float8 recipe", key="recipe", default="tensorwise", choices=RECIPES,
    what="a torchao float8 recipe", hint=f"use one of {RECIPES}",
    fails='lightning_presets.precision("fp8-torchao", recipe="rowwize")',
    fixed='lightning_presets.precision("fp8-torchao", recipe="rowwise")',
    evidence="runtime: torchao asserts the recipe name",
)  # fmt: skip


@rule(
    "LP610", "warning", "setup", "Linear layers left in high precision: dimensions not divisible by 16",
    fails="model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 10))   # 10 outputs\n"
    'lightning_presets.precision("fp8-torchao").convert_module(model)',
    fixed="model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 10))\n"
    'lightning_presets.precision("fp8-torchao", ignore_modules=["1"]).convert_module(model)   # or pad the head',
)  # fmt: skip
def float8_layers_divisible(ctx: PrecisionContext, model: nn.Module) -> Problem | None:
    convertible, skipped = float8_split(model, ctx.values.get("ignore_modules") or ())
    if not skipped or not convertible:
        return None
    return Problem(
        f"{ctx.call()}: {len(skipped)} Linear layer(s) of {type(model).__name__} stay in high precision because "
        f"their input or output features are not divisible by {FLOAT8_DIVISOR}: {describe_skipped(skipped)}; "
        f"{len(convertible)} layer(s) are converted to float8",
        "pad those dimensions to a multiple of 16 to train them in float8, or list them in ignore_modules= to "
        "silence this warning",
    )


@rule(
    "LP611", "warning", "setup", "no Linear layer can be trained in float8: the model trains in bf16",
    fails="model = nn.Sequential(nn.Linear(10, 30), nn.Linear(30, 2))\n"
    'lightning_presets.precision("fp8-torchao").convert_module(model)',
    fixed="model = nn.Sequential(nn.Linear(16, 32), nn.Linear(32, 16))\n"
    'lightning_presets.precision("fp8-torchao").convert_module(model)',
)  # fmt: skip
def float8_has_layers(ctx: PrecisionContext, model: nn.Module) -> Problem | None:
    convertible, skipped = float8_split(model, ctx.values.get("ignore_modules") or ())
    if convertible:
        return None
    found = f": {describe_skipped(skipped)}" if skipped else ""
    return Problem(
        f"{ctx.call()}: no nn.Linear layer of {type(model).__name__} can be trained in float8 (dimensions must be "
        f"divisible by {FLOAT8_DIVISOR}; {len(skipped)} Linear layer(s) found{found}); the model trains in bf16 "
        "autocast, not FP8",
        "use precision='bf16-mixed' for this model, or pad its Linear dimensions to multiples of 16",
    )


def _te_prepare(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    return {
        **values,
        "weights_dtype": _dtype(values["weights_dtype"]),
        "fallback_compute_dtype": _dtype(values.get("fallback_compute_dtype")),
    }


def _torchao_prepare(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    return {"precision": "bf16-mixed", "device": "cuda", **values}


def _bnb_prepare(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    ignore = values.get("ignore_modules")
    return {"mode": "nf4-dq", "dtype": _dtype(values["dtype"]), "ignore_modules": set(ignore) if ignore else None}


def _fsdp_prepare(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    return {"precision": "bf16-mixed"}


FP8_TE = PrecisionPreset(
    name="fp8-te",
    description="FP8 training with NVIDIA Transformer Engine (Linear and LayerNorm replaced by TE layers, "
    "bf16 weights, delayed scaling). Needs a GPU of compute capability 8.9+ (H100, L4, RTX 4090).",
    plugin=every_kind("TransformerEnginePrecision"),
    init_params={"weights_dtype": "bfloat16", "recipe": None, "replace_layers": None, "fallback_compute_dtype": None},
    prepare=_te_prepare,
    rules=(*HARDWARE_RULES, dtype_names_known),
    requires=(Requirement(module="transformer_engine", extra="fp8"),),
    min_capability=FP8_CAPABILITY,
    capability_reason=FP8_REASON,
    incompatible={
        "model_parallel": "Transformer Engine replaces nn.Linear with te.Linear, which torch's tensor-parallel "
        "plans (ColwiseParallel/RowwiseParallel: nn.Linear and nn.Embedding only) cannot shard, and "
        "ModelParallelStrategy accepts only 32-true, bf16-mixed, bf16-true and 16-true",
        "deepspeed": "Lightning configures DeepSpeed's fp16/bf16 only from the 16-mixed/bf16-mixed precision "
        "strings; with the Transformer Engine plugin it enables neither, so the DeepSpeed engine runs in fp32 "
        "around TE's bf16 weights",
    },
    tested_with=tested(
        "construction (simulated CUDA, simulated transformer_engine module)",
        construction="the Trainer on 8 simulated CUDA devices against a stand-in transformer_engine module: "
        "Lightning's TransformerEnginePrecision with the weights dtype asked (Transformer Engine needs CUDA to "
        "install)",
    ),
)

FP8_TORCHAO = PrecisionPreset(
    name="fp8-torchao",
    description="FP8 training with torchao: nn.Linear layers converted to float8 (tensorwise scaling by default) "
    "in convert_module, the rest under bf16 autocast. On CUDA it needs compute capability 8.9+ (on CPU it runs "
    "emulated).",
    plugin=every_kind("MixedPrecision"),
    mixin=TorchaoFloat8Precision,
    init_params={"recipe": "tensorwise", "ignore_modules": ()},
    prepare=_torchao_prepare,
    rules=(*HARDWARE_RULES, float8_recipe_known, float8_layers_divisible, float8_has_layers),
    requires=(Requirement(module="torchao", extra="torchao"),),
    min_capability=FP8_CAPABILITY,
    capability_reason=FP8_REASON,
    needs_cuda=False,  # torch's _scaled_mm has a CPU kernel: FP8 training runs on CPU, emulated and slow
    incompatible={
        "deepspeed": _DEEPSPEED_CLOSURE,
        "model_parallel:trainer": "the Trainer's ModelParallelStrategy converts the model after configure_model "
        "has applied tensor parallelism and fully_shard, and torchao must convert the Linear layers before them; "
        "call torchao.float8.convert_to_float8_training at the start of configure_model instead",
    },
    tested_with=tested(
        "construction (simulated CUDA); float8 conversion of Linear layers run on CPU, no float8 matmul run",
        construction="the plugin on a simulated CUDA device of capability 9.0 with torchao 0.18.0: the float8 "
        "conversion of the divisible Linear layers run on CPU (no float8 matmul: that needs compute capability 8.9)",
        torch="2.13.0, 2.15.0",  # torchao 0.18.0 does not import on torch 2.7.0 (no torch.nn.functional.ScalingType)
        torchao="0.18.0",
    ),
)

NF4_BNB = PrecisionPreset(
    name="nf4-bnb",
    description="bitsandbytes NF4 4-bit weights with double quantization (QLoRA-style), bf16 compute by default. "
    "CUDA only.",
    plugin=every_kind("BitsandbytesPrecision"),
    init_params={"dtype": "bfloat16", "ignore_modules": None},
    prepare=_bnb_prepare,
    rules=(*HARDWARE_RULES, dtype_names_known, nf4_dtype_supported),
    requires=(Requirement(module="bitsandbytes", extra="bnb"),),
    incompatible={
        "deepspeed": _DEEPSPEED_CLOSURE,
        "model_parallel": "Lightning's ModelParallelStrategy does not support bitsandbytes by design, and "
        "tensor-parallel plans cannot shard bitsandbytes' Linear4bit layers",
    },
    tested_with=tested(
        "construction (simulated CUDA, bitsandbytes 0.50.2 installed on CPU)",
        construction="the Trainer on a simulated CUDA device with bitsandbytes 0.50.2 installed: the NF4 plugin with "
        "double quantization is built (quantization itself needs CUDA)",
        bitsandbytes="0.50.2",
    ),
)

BF16_FP32_REDUCE = PrecisionPreset(
    name="bf16-fp32-reduce",
    description="FSDP mixed precision: parameters gathered and computed in bf16, gradients reduced and buffers "
    "kept in fp32. Numerically safer than bf16-mixed for large-scale FSDP runs. FSDP strategies only.",
    plugin=every_kind("FSDPPrecision"),
    mixin=BF16FP32ReducePrecision,
    prepare=_fsdp_prepare,
    rules=HARDWARE_RULES,  # bf16 on a GPU older than Ampere is emulated, not refused: LP615 warns at construction
    incompatible={
        "model_parallel": "ModelParallelStrategy (FSDP2) takes its mixed precision from fully_shard(mp_policy="
        "MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)) in your parallelize "
        "function or configure_model; this FSDP1 policy would be ignored",
        "deepspeed": "DeepSpeed takes its dtypes from the DeepSpeed config and would ignore this FSDP policy; "
        'use precision="bf16-mixed" with "communication_data_type": "fp32" in the DeepSpeed config',
    },
    tested_with=tested(
        "construction (simulated CUDA); the FSDP policy object is checked on CPU",
        construction="the Trainer with fsdp_offload_ckpt on 8 simulated CUDA devices: FSDP's MixedPrecision policy "
        "with bf16 parameters, fp32 reduction and buffers",
    ),
)
