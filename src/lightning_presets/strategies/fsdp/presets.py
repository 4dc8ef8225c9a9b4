"""The FSDP presets, as data: ``fsdp_offload_ckpt``, ``fsdp_hybrid_shard`` (HSDP) and ``fsdp_grad_op``."""

from __future__ import annotations

from typing import Any

from lightning_presets.core.mesh import AUTO, HYBRID_SHARD
from lightning_presets.core.namespaces import Kind
from lightning_presets.core.preset import Preset, every_kind
from lightning_presets.core.versions import tested
from lightning_presets.strategies.fsdp.family import FSDP_FAMILY
from lightning_presets.strategies.fsdp.hooks import (
    FSDPFabricHooks,
    FSDPTrainerHooks,
    HybridFabricHooks,
    HybridTrainerHooks,
)
from lightning_presets.strategies.fsdp.rules import RULES
from lightning_presets.strategies.fsdp.sharding_rules import GRAD_OP_RULES, HYBRID_RULES

FSDP_DEFAULTS: dict[str, Any] = {"state_dict_type": "sharded", "auto_wrap_policy": None}
"""What every FSDP preset passes: sharded checkpoints, and the wrap policy (found from the model's repeated blocks when
``None``)."""


_EVIDENCE = "construction on simulated CUDA (Trainer and Fabric); never run on a GPU"
TESTED_WITH_HYBRID = tested(
    _EVIDENCE,
    construction="Trainer, Fabric and the standalone packages on 2 simulated nodes of 8 CUDA devices: the (2, 8) "
    "device mesh filled in, HYBRID_SHARD (FSDP1 needs CUDA to run)",
)
TESTED_WITH_GRAD_OP = tested(
    _EVIDENCE,
    construction="Trainer, Fabric and the standalone packages on 8 simulated CUDA devices: SHARD_GRAD_OP without "
    "offload (FSDP1 needs CUDA to run)",
)


FSDP_OFFLOAD_CKPT = Preset(
    name="fsdp_offload_ckpt",
    description="FSDP full shard with parameters and gradients offloaded to CPU, auto-wrap and activation "
    "checkpointing on the model's repeated blocks. For models that do not fit in GPU memory even sharded.",
    family=FSDP_FAMILY,
    strategy=every_kind("FSDPStrategy"),
    init_params={
        "sharding_strategy": "FULL_SHARD",
        "cpu_offload": True,
        **FSDP_DEFAULTS,
        "activation_checkpointing_policy": None,
    },
    rules=RULES,
    mixins={"trainer": FSDPTrainerHooks, "fabric": FSDPFabricHooks},
    activation_checkpointing=True,
    cpu_offload=True,
    tested_with=tested(
        "construction on simulated CUDA (Trainer, Fabric, pytorch_lightning, lightning_fabric); "
        "block detection and activation checkpointing run on CPU; FSDP1 needs CUDA and never ran on a GPU here",
        construction="Trainer, Fabric and the standalone packages on 8 simulated CUDA devices: each namespace's own "
        "FSDPStrategy and FSDPPrecision, FULL_SHARD with parameters offloaded (FSDP1 needs CUDA to run)",
    ),
)


def prepare_hybrid(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
    """A user's ``process_group`` replaces the automatic mesh (Lightning accepts only one of them).

    ``device_mesh=None`` means the automatic one: torch's own default for hybrid sharding is the same
    (nodes, devices per node) layout, and Lightning refuses hybrid sharding with neither. A list (from a
    YAML config) becomes the tuple Lightning turns into a mesh.
    """
    if isinstance(values.get("device_mesh"), list):
        values["device_mesh"] = tuple(values["device_mesh"])
    if values.get("process_group") is not None:
        if values.get("device_mesh") == AUTO:
            values["device_mesh"] = None
    elif values.get("device_mesh") is None:
        values["device_mesh"] = AUTO
    return values


FSDP_HYBRID_SHARD = Preset(
    name="fsdp_hybrid_shard",
    description="HSDP: FSDP sharding inside each node and replication across nodes (device mesh = nodes × devices "
    "per node), auto-wrap on the repeated blocks. For multi-node jobs whose inter-node network is the bottleneck.",
    family=FSDP_FAMILY,
    strategy=every_kind("FSDPStrategy"),
    init_params={
        "sharding_strategy": "HYBRID_SHARD",
        "device_mesh": AUTO,
        **FSDP_DEFAULTS,
    },
    rules=HYBRID_RULES,
    mixins={"trainer": HybridTrainerHooks, "fabric": HybridFabricHooks},
    prepare=prepare_hybrid,
    mesh=HYBRID_SHARD,
    tested_with=TESTED_WITH_HYBRID,
)

FSDP_GRAD_OP = Preset(
    name="fsdp_grad_op",
    description="FSDP SHARD_GRAD_OP (ZeRO-2-like): gradients and optimizer state sharded, parameters kept whole "
    "between forward and backward, auto-wrap on the repeated blocks. For models that fit once their optimizer "
    "state is sharded.",
    family=FSDP_FAMILY,
    strategy=every_kind("FSDPStrategy"),
    init_params={"sharding_strategy": "SHARD_GRAD_OP", **FSDP_DEFAULTS},
    rules=GRAD_OP_RULES,
    mixins={"trainer": FSDPTrainerHooks, "fabric": FSDPFabricHooks},
    tested_with=TESTED_WITH_GRAD_OP,
)
