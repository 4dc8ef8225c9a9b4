"""The two DDP presets, as data: ``ddp_static_graph`` and ``ddp_bf16_compress``."""

from __future__ import annotations

from typing import Any

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook

from lightning_presets.core.namespaces import Kind
from lightning_presets.core.preset import Preset, every_kind
from lightning_presets.core.versions import tested
from lightning_presets.strategies.ddp.family import DDP_FAMILY
from lightning_presets.strategies.ddp.hooks import CommHookFabricHooks, StaticGraphFabricHooks, StaticGraphTrainerHooks
from lightning_presets.strategies.ddp.rules import BF16_COMPRESS_RULES, STATIC_GRAPH_RULES

TESTED_WITH_STATIC_GRAPH = tested(
    "runtime: Trainer.fit and Fabric on CPU (gloo), 2 processes; construction on simulated CUDA",
    construction="Trainer, Fabric and the standalone packages on CPU",
    runtime_cpu="Trainer.fit and a Fabric loop on 2 processes (gloo): static_graph and gradient_as_bucket_view in "
    "torch's DDP, each rank its own batches, identical weights after",
)
TESTED_WITH_BF16_COMPRESS = tested(
    "construction on simulated CUDA (Trainer and Fabric); never run on a GPU",
    construction="Trainer, Fabric and the standalone packages on 8 simulated CUDA devices: the Trainer's DDPStrategy "
    "holds the bf16 hook, Fabric's preset keeps it to register after wrapping",
)


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
    family=DDP_FAMILY,
    strategy=every_kind("DDPStrategy"),
    init_params={"static_graph": True, "gradient_as_bucket_view": True},
    rules=STATIC_GRAPH_RULES,
    mixins={"trainer": StaticGraphTrainerHooks, "fabric": StaticGraphFabricHooks},
    tested_with=TESTED_WITH_STATIC_GRAPH,
)

DDP_BF16_COMPRESS = Preset(
    name="ddp_bf16_compress",
    description="DDP whose gradients travel as bf16 (torch's bf16_compress_hook), halving all-reduce traffic. "
    "CUDA and NCCL only; for bandwidth-bound multi-node data parallelism.",
    family=DDP_FAMILY,
    strategy=every_kind("DDPStrategy"),
    init_params={"ddp_comm_hook": bf16_compress_hook},
    rules=BF16_COMPRESS_RULES,
    mixins={"fabric": CommHookFabricHooks},
    extra_keys=frozenset({"ddp_comm_state"}),  # Fabric's DDPStrategy has no such argument: the mixin uses it
    prepare=prepare_comm_hook,
    tested_with=TESTED_WITH_BF16_COMPRESS,
)
