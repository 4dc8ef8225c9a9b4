"""The DDP presets' rules: on their options, their construction and the model (LP302 to LP311), and the tuples
each preset runs (:data:`STATIC_GRAPH_RULES`, :data:`BF16_COMPRESS_RULES`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from lightning_presets.core.codes import Setting
from lightning_presets.core.context import Context, Options
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.guards.builders import one_device
from lightning_presets.guards.precision_rules import STRATEGY_HARDWARE_RULES
from lightning_presets.inspection.models import batch_norm_layers, sync_batch_norm_layers
from lightning_presets.strategies.ddp.options import DDPOptions

_LOW_PRECISION_WEIGHTS = ("bf16-true", "16-true")


@rule(
    "LP302", "warning", "options", "static_graph or gradient_as_bucket_view turned off",
    fails='lightning_presets.strategy("ddp_static_graph", static_graph=False)',
    fixed='lightning_presets.strategy("ddp_static_graph")',
)  # fmt: skip
def static_graph_kept(options: Options) -> Problem | None:
    off = DDPOptions.of(options).static_graph_turned_off
    if not off:
        return None
    return Problem(
        f"{options.call(*off)}: {options.preset!r} is DDP with static_graph=True and gradient_as_bucket_view=True; "
        f"turning off {' and '.join(off)} leaves plain DDP under a name that promises otherwise",
        "drop the override, or use strategy='ddp'",
    )


NCCL_FOR_BF16 = (2, 10)
"""The NCCL release torch's DDP needs for the bf16 compression hook (with a CUDA or ROCm build)."""


@rule(
    "LP303", "error", "construction", "bf16 gradient compression that this torch build refuses",
    fails='Fabric(strategy="ddp_bf16_compress", accelerator="cpu", devices=2)   # a CPU-only build of torch',
    fixed='Fabric(strategy="ddp_static_graph", accelerator="cpu", devices=2)   # a CPU-only build of torch',
    setting=Setting(gpus=0, simulated=("cpu_only_torch",)),
    evidence="runtime: with Fabric a CPU build of torch raises TypeError when the hook is registered",
)  # fmt: skip
def bf16_compress_supported(ctx: Context) -> Problem | None:
    """Fabric registers the DDP comm hook on any device, and torch takes it from a build with CUDA (or ROCm) and NCCL
    2.10+, whatever the backend. A job on CUDA runs where such a build is installed; the Trainer off CUDA is LP311."""
    if ctx.accelerator == "cuda" or DDPOptions.of(ctx).comm_hook is None or ctx.kind == "trainer":
        return None
    build = ctx.torch_build
    nccl = build.get("nccl")
    if (build.get("cuda") or build.get("hip")) and nccl is not None and tuple(nccl) >= NCCL_FOR_BF16:
        return None
    return Problem(
        f"{ctx.call('accelerator')}: this torch build ({'CUDA ' + build['cuda'] if build.get('cuda') else 'CPU-only'}"
        f"{', NCCL ' + '.'.join(map(str, nccl)) if nccl else ', no NCCL'}) refuses torch's bf16 compression hook "
        "(it needs CUDA 11+ and NCCL 2.10+): DDP raises TypeError when it wraps the model",
        "on a CPU-only torch use strategy='ddp_static_graph' or strategy='ddp'; Fabric registers the hook with any "
        "backend on a CUDA build of torch",
    )


@rule(
    "LP311", "warning", "construction", "bf16 gradient compression that the Trainer leaves out off CUDA",
    fails='Trainer(strategy="ddp_bf16_compress", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2)',
)  # fmt: skip
def bf16_compress_applied(ctx: Context) -> Problem | None:
    """Lightning's Trainer registers a DDP comm hook only on CUDA devices: on CPU it trains plain DDP (legal, and
    what the user asked for is silently left out)."""
    if ctx.kind != "trainer" or ctx.accelerator == "cuda" or DDPOptions.of(ctx).comm_hook is None:
        return None
    return Problem(
        f"{ctx.call('accelerator')}: Lightning's Trainer registers DDP communication hooks on CUDA devices only, "
        "so the bf16 compression hook is left out and the gradients travel uncompressed (it trains as plain DDP)",
        "run it with accelerator='cuda'; on CPU use strategy='ddp_static_graph' or strategy='ddp'",
    )


def first_epoch_accumulation(ctx: Context) -> tuple[int, str] | None:
    """How many batches the Trainer accumulates in its first epoch, and the argument that says so: its
    ``accumulate_grad_batches``, or the epoch-0 factor of a ``GradientAccumulationScheduler`` among its ``callbacks``
    (Lightning refuses the two together). ``None`` for Fabric, or when the Trainer accumulates nothing at first."""
    if ctx.kind != "trainer":
        return None
    accumulation = ctx.accumulate_grad_batches
    if accumulation is not None and accumulation >= 2:
        return accumulation, f"accumulate_grad_batches={accumulation}"
    callbacks = ctx.arguments.get("callbacks")
    listed: list[Any] = list(callbacks) if isinstance(callbacks, (list, tuple)) else [callbacks]
    for callback in listed:
        if any(klass.__name__ == "GradientAccumulationScheduler" for klass in type(callback).__mro__):
            factor = callback.get_accumulate_grad_batches(0)  # Lightning's own reading of the schedule
            if type(factor) is int and factor >= 2:
                return factor, f"callbacks=[GradientAccumulationScheduler({callback.scheduling!r})]"
    return None


@rule(
    "LP308", "error", "construction", "gradient accumulation before DDP's static graph has synchronised once",
    fails='Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, accumulate_grad_batches=2)',
    fixed='Trainer(strategy="ddp", accelerator="cpu", devices=2, accumulate_grad_batches=2)',
    evidence="runtime: torch's reducer: 'expect_autograd_hooks_ INTERNAL ASSERT FAILED' on every rank",
)  # fmt: skip
def static_graph_without_accumulation(ctx: Context) -> Problem | None:
    """torch's static graph enqueues its delayed all-reduce in the first backward that synchronises; a backward that
    skips synchronisation (``no_sync``) before that one fails on every rank. Afterwards accumulating is legal: a
    ``GradientAccumulationScheduler`` whose first epoch synchronises every batch trains, and so does Fabric's
    documented recipe (``iteration % N != 0`` accumulates: iteration 0 synchronises). The Trainer accumulates from
    its first batch whenever its first epoch's factor is 2 or more; Fabric's order is only known at run time, where
    the guarded ``no_sync`` (below) decides."""
    if not DDPOptions.of(ctx).static_graph:
        return None
    if ctx.kind == "fabric":  # no such argument: the guarded no_sync (below) marks a backward without its sync
        if ctx.accumulate_grad_batches is None:
            return None
        return Problem(
            f"{ctx.call()}: `fabric.no_backward_sync(model, enabled=True)` skips DDP's gradient synchronisation "
            "before any backward has synchronised, and DDP with static_graph=True needs its first backward to "
            "synchronise: every rank fails in this backward with torch's 'expect_autograd_hooks_ INTERNAL ASSERT "
            "FAILED'",
            "synchronise the first backward, then accumulate (Fabric's recipe: `is_accumulating = iteration % N != "
            "0`, iteration counted from 0), or use strategy='ddp' (or lightning_presets.strategy(..., "
            "static_graph=False, target='fabric'))",
        )
    first = first_epoch_accumulation(ctx)
    if first is None:
        return None
    accumulation, argument = first
    call = ctx.call("accumulate_grad_batches") if argument.startswith("accumulate") else f"{ctx.call()} with {argument}"
    return Problem(
        f"{call}: DDP with static_graph=True needs its first backward to synchronise "
        f"gradients, but the Trainer skips the synchronisation on the {accumulation - 1} accumulating batch(es) of "
        f"every {accumulation} from the first batch on (DDP's no_sync): every rank fails in its first backward with "
        "torch's 'expect_autograd_hooks_ INTERNAL ASSERT FAILED'",
        "use strategy='ddp' (or lightning_presets.strategy(..., static_graph=False)) to accumulate gradients, or "
        "accumulate only from the second epoch on (GradientAccumulationScheduler({1: N}): the first epoch "
        "synchronises every batch), or accumulate_grad_batches=1 with a larger batch",
    )


def cuda_backend(backend: str) -> str | None:
    """The backend that reduces CUDA tensors: ``nccl`` for ``"nccl"`` and for ``"cpu:gloo,cuda:nccl"``."""
    if ":" not in backend:
        return backend.strip()
    pairs = dict(part.strip().split(":", 1) for part in backend.split(",") if ":" in part)
    return pairs.get("cuda")


@rule(
    "LP304", "warning", "options", "bf16 gradient compression reduced by a backend other than NCCL",
    fails='lightning_presets.strategy("ddp_bf16_compress", process_group_backend="gloo")',
    fixed='lightning_presets.strategy("ddp_bf16_compress", process_group_backend="cpu:gloo,cuda:nccl")',
)  # fmt: skip
def bf16_compress_reduced_by_nccl(options: Options) -> Problem | None:
    backend = DDPOptions.of(options).process_group_backend
    if not isinstance(backend, str) or cuda_backend(backend) == "nccl":
        return None
    used = cuda_backend(backend)
    return Problem(
        f"{options.call('process_group_backend')}: the CUDA gradients would be reduced by "
        + (f"{used!r}" if used else "no backend at all")
        + ", while the bf16 compression hook exists to halve NCCL traffic; gloo reduces bf16 correctly but far "
        "slower than NCCL",
        "drop process_group_backend (NCCL is the default on CUDA), or pass process_group_backend='nccl' or "
        "'cpu:gloo,cuda:nccl'",
    )


ddp_has_peers = one_device(
    "LP305", "one process in total: nothing to synchronise",
    why="one process in total, so DDP has no gradients to exchange and only its bucketing overhead remains",
    hint="use devices>1 (or more nodes); for one device, train without a strategy",
    fails='Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=1)',
    fixed='Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2)',
)  # fmt: skip


@rule(
    "LP306", "warning", "construction", "bf16 compression with low-precision weights",
    fails='Trainer(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, precision="bf16-true")',
    fixed='Trainer(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, precision="bf16-mixed")',
)  # fmt: skip
def bf16_compress_has_fp32_grads(ctx: Context) -> Problem | None:
    if ctx.precision not in _LOW_PRECISION_WEIGHTS:
        return None
    return Problem(
        f"{ctx.call('precision')}: the gradients are already {ctx.precision.split('-')[0]}, so compressing them "
        "to bf16 saves no traffic" + (" and drops fp16's extra mantissa bits" if ctx.precision == "16-true" else ""),
        "use precision='bf16-mixed' or '32-true' (fp32 gradients, halved on the wire), or strategy='ddp_static_graph'",
    )


@rule(
    "LP307", "warning", "options", "the bf16 compression hook removed",
    fails='lightning_presets.strategy("ddp_bf16_compress", ddp_comm_hook=None)',
    fixed='lightning_presets.strategy("ddp_bf16_compress")',
)  # fmt: skip
def compression_hook_kept(options: Options) -> Problem | None:
    if not DDPOptions.of(options).comm_hook_removed:
        return None
    return Problem(
        f"{options.call('ddp_comm_hook')}: {options.preset!r} is DDP with a gradient compression hook; without "
        "one it is plain DDP under a name that promises otherwise",
        "drop the override (bf16 compression), pass another hook such as fp16_compress_hook, or use "
        "strategy='ddp_static_graph' or strategy='ddp'",
    )


@rule(
    "LP309", "error", "options", "post-localSGD without a model averaging period",
    fails="from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_localSGD\n"
    'lightning_presets.strategy("ddp_static_graph", ddp_comm_state=post_localSGD.PostLocalSGDState(None, None, 8), '
    "ddp_comm_hook=post_localSGD.post_localSGD_hook)",
    fixed="from torch.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as post_localSGD\n"
    'lightning_presets.strategy("ddp_static_graph", ddp_comm_state=post_localSGD.PostLocalSGDState(None, None, 8), '
    "ddp_comm_hook=post_localSGD.post_localSGD_hook, model_averaging_period=4)",
    evidence="runtime: DDPStrategy._enable_model_averaging raises ValueError when `fit` sets the optimizers up",
)  # fmt: skip
def model_averaging_has_a_period(options: Options) -> Problem | None:
    view = DDPOptions.of(options)
    if type(view.comm_state).__name__ != "PostLocalSGDState" or view.model_averaging_period is not None:
        return None
    return Problem(
        f"{options.call('model_averaging_period')}: the post-localSGD communication state averages the models "
        "periodically, and Lightning raises when `fit` sets the optimizers up without model_averaging_period",
        "pass model_averaging_period=N (e.g. 4: the models are averaged every 4 steps after start_localSGD_iter)",
    )


@rule(
    "LP310", "error", "model", "SyncBatchNorm with DDP off CUDA, which torch's DDP refuses",
    fails="model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))\n"
    'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, sync_batchnorm=True).fit(model)',
    fixed="model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))\n"
    'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2).fit(model)',
    evidence="runtime: DistributedDataParallel raises ValueError 'SyncBatchNorm layers only work with GPU modules' "
    "when it wraps",
    unless="the model has no batch norm layers",
    when=lambda ctx: ctx.sync_batchnorm and ctx.accelerator != "cuda", shows=("accelerator", "sync_batchnorm"),
    consequence="DistributedDataParallel refuses the converted SyncBatchNorm layers on CPU when it wraps the model",
)  # fmt: skip
def sync_batchnorm_on_gpus(ctx: Context, model: nn.Module) -> Problem | None:
    """DDP refuses any ``nn.SyncBatchNorm`` on a CPU module: the layers ``sync_batchnorm=True`` converts, and those the
    model already has (built so, or converted by the user), with or without the flag."""
    if ctx.accelerator == "cuda":
        return None
    own = sync_batch_norm_layers(model)
    converted = batch_norm_layers(model, unsynchronised=True) if ctx.sync_batchnorm else []
    if not own and not converted:
        return None
    parts = []
    if converted:
        more = " ..." if len(converted) > 3 else ""
        parts.append(f"Lightning turns {', '.join(converted[:3])}{more} into SyncBatchNorm")
    if own:
        more = " ..." if len(own) > 3 else ""
        several = len(own) > 1
        parts.append(f"the model's layer{'s' * several} {', '.join(own[:3])}{more} {'are' if several else 'is'} "
                     "nn.SyncBatchNorm already")  # fmt: skip
    shown = ("accelerator", "sync_batchnorm") if ctx.sync_batchnorm else ("accelerator",)
    return Problem(
        f"{ctx.call(*shown)}: {' and '.join(parts)}, and torch's DistributedDataParallel refuses SyncBatchNorm on "
        f"{ctx.accelerator} devices when it wraps the model (SyncBatchNorm needs CUDA)",
        ("drop sync_batchnorm on CPU (each process normalises over its own batch), " if converted else "")
        + ("build the model with nn.BatchNorm layers in place of nn.SyncBatchNorm off CUDA, " if own else "")
        + "or run on accelerator='cuda'",
    )


STATIC_GRAPH_RULES: tuple[Rule, ...] = (
    model_averaging_has_a_period,
    sync_batchnorm_on_gpus,
    static_graph_kept,
    ddp_has_peers,
    static_graph_without_accumulation,
    *STRATEGY_HARDWARE_RULES,
)
BF16_COMPRESS_RULES: tuple[Rule, ...] = (
    model_averaging_has_a_period,
    sync_batchnorm_on_gpus,
    compression_hook_kept,
    bf16_compress_reduced_by_nccl,
    bf16_compress_supported,
    bf16_compress_applied,
    ddp_has_peers,
    static_graph_without_accumulation,
    bf16_compress_has_fp32_grads,
    *STRATEGY_HARDWARE_RULES,
)
