"""DDP (``DDPStrategy``) presets: ``ddp_static_graph`` and ``ddp_bf16_compress``."""

from __future__ import annotations

from typing import Any, cast

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

from lightning_presets.core.context import Context, Options
from lightning_presets.core.namespaces import Kind
from lightning_presets.core.preset import Preset
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.core.versions import tested
from lightning_presets.guards.builders import needs_cuda, one_device
from lightning_presets.guards.strategy import PresetHooks
from lightning_presets.registry import compat

# Keyword arguments DDPStrategy forwards to torch's DistributedDataParallel that the presets accept.
TORCH_DDP_KEYS = frozenset(
    {"find_unused_parameters", "broadcast_buffers", "bucket_cap_mb", "static_graph", "gradient_as_bucket_view"}
)
_STATIC_GRAPH_KEYS = ("static_graph", "gradient_as_bucket_view")
_LOW_PRECISION_WEIGHTS = ("bf16-true", "16-true")
TESTED_WITH_STATIC_GRAPH = tested(
    "runtime: Trainer.fit and Fabric on CPU (gloo), 2 processes; construction on simulated CUDA"
)
TESTED_WITH_BF16_COMPRESS = tested("construction on simulated CUDA (Trainer and Fabric); never run on a GPU")


@rule(
    "LP301", "error", "options", "find_unused_parameters=True with a static graph",
    fails='lightning_presets.strategy("ddp_static_graph", find_unused_parameters=True)',
    fixed='lightning_presets.strategy("ddp_static_graph", find_unused_parameters=False)',
)  # fmt: skip
def static_graph_uses_all_parameters(options: Options) -> Problem | None:
    if options.values.get("find_unused_parameters") is not True:
        return None
    return Problem(
        f"{options.call('find_unused_parameters')}: {options.preset!r} promises DDP the same graph every step; "
        "searching for unused parameters contradicts that and costs a graph traversal per step",
        "drop find_unused_parameters (a static graph already handles parameters that are never used), or use "
        "strategy='ddp_find_unused_parameters_true' when the set of used parameters changes between steps",
    )


@rule(
    "LP302", "error", "options", "static_graph or gradient_as_bucket_view turned off",
    fails='lightning_presets.strategy("ddp_static_graph", static_graph=False)',
    fixed='lightning_presets.strategy("ddp_static_graph")',
)  # fmt: skip
def static_graph_kept(options: Options) -> Problem | None:
    off = [key for key in _STATIC_GRAPH_KEYS if options.values.get(key, True) is not True]
    if not off:
        return None
    return Problem(
        f"{options.call(*off)}: {options.preset!r} is DDP with static_graph=True and gradient_as_bucket_view=True; "
        f"turning off {' and '.join(off)} leaves plain DDP under a name that promises otherwise",
        "drop the override, or use strategy='ddp'",
    )


bf16_compress_needs_cuda = needs_cuda(
    "LP303", "bf16 gradient compression off CUDA",
    why="the bf16 compression hook halves NCCL gradient traffic between CUDA devices; with "
    "accelerator={accelerator!r} there is no NCCL to compress for",
    hint="run it with accelerator='cuda'; on CPU use strategy='ddp_static_graph' or strategy='ddp'",
    fails='Trainer(strategy="ddp_bf16_compress", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="ddp_bf16_compress", accelerator="cuda", devices=8)',
)  # fmt: skip


@rule(
    "LP304", "error", "options", "a process group backend other than NCCL for bf16 compression",
    fails='lightning_presets.strategy("ddp_bf16_compress", process_group_backend="gloo")',
    fixed='lightning_presets.strategy("ddp_bf16_compress", process_group_backend="nccl")',
)  # fmt: skip
def bf16_compress_needs_nccl(options: Options) -> Problem | None:
    backend = options.values.get("process_group_backend")
    if backend is None or backend == "nccl":
        return None
    return Problem(
        f"{options.call('process_group_backend')}: the bf16 compression hook is meant for NCCL all-reduce, "
        f"got process_group_backend={backend!r}",
        "drop process_group_backend (NCCL is the default on CUDA), or pass process_group_backend='nccl'",
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
    "LP307", "error", "options", "the bf16 compression hook removed",
    fails='lightning_presets.strategy("ddp_bf16_compress", ddp_comm_hook=None)',
    fixed='lightning_presets.strategy("ddp_bf16_compress")',
)  # fmt: skip
def compression_hook_kept(options: Options) -> Problem | None:
    if options.values.get("ddp_comm_hook", bf16_compress_hook) is not None:
        return None
    return Problem(
        f"{options.call('ddp_comm_hook')}: {options.preset!r} is DDP with a gradient compression hook; without "
        "one it is plain DDP under a name that promises otherwise",
        "drop the override (bf16 compression), pass another hook such as fp16_compress_hook, or use "
        "strategy='ddp_static_graph' or strategy='ddp'",
    )


STATIC_GRAPH_RULES: tuple[Rule, ...] = (static_graph_uses_all_parameters, static_graph_kept, ddp_has_peers)
BF16_COMPRESS_RULES: tuple[Rule, ...] = (
    compression_hook_kept,
    bf16_compress_needs_nccl,
    bf16_compress_needs_cuda,
    ddp_has_peers,
    bf16_compress_has_fp32_grads,
)


class CommHookFabricHooks(PresetHooks):
    """Fabric's DDPStrategy has no ``ddp_comm_hook`` argument: register the hook once the module is wrapped."""

    def setup_module(self, module: Any) -> Any:
        wrapped = cast(Any, super()).setup_module(module)
        hook = self._lp_options.get("ddp_comm_hook")
        if hook is not None:
            wrapped.register_comm_hook(state=self._lp_options.get("ddp_comm_state"), hook=hook)
        return wrapped


class StaticGraphTrainerHooks(PresetHooks):
    """Manual optimization: all-reduce the static graph's first backward where Lightning does not (2.5, ``compat``)."""

    def post_backward(self, closure_loss: Any) -> None:
        cast(Any, super()).post_backward(closure_loss)
        compat.flush_static_graph_first_backward(self)


def prepare_comm_hook(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    """The Trainer's DDPStrategy takes the hook; on Fabric the mixin registers it after wrapping."""
    if kind == "fabric":
        values.pop("ddp_comm_hook", None)
        values.pop("ddp_comm_state", None)
    return values


DDP_STATIC_GRAPH = Preset(
    name="ddp_static_graph",
    description="DDP with static_graph=True and gradient_as_bucket_view=True: the graph is traced once, buckets "
    "are reused as gradients. For models that use the same parameters every step.",
    family="ddp",
    strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"},
    init_params={"static_graph": True, "gradient_as_bucket_view": True},
    rules=STATIC_GRAPH_RULES,
    mixins={"trainer": StaticGraphTrainerHooks},
    extra_keys=TORCH_DDP_KEYS,
    tested_with=TESTED_WITH_STATIC_GRAPH,
)

DDP_BF16_COMPRESS = Preset(
    name="ddp_bf16_compress",
    description="DDP whose gradients travel as bf16 (torch's bf16_compress_hook), halving all-reduce traffic. "
    "CUDA and NCCL only; for bandwidth-bound multi-node data parallelism.",
    family="ddp",
    strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"},
    init_params={"ddp_comm_hook": bf16_compress_hook},
    rules=BF16_COMPRESS_RULES,
    mixins={"fabric": CommHookFabricHooks},
    extra_keys=TORCH_DDP_KEYS | {"ddp_comm_state"},
    prepare=prepare_comm_hook,
    tested_with=TESTED_WITH_BF16_COMPRESS,
)
