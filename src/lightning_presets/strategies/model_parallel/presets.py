"""The ``ModelParallelStrategy`` presets, as data: ``tp2d_hybrid``, ``fsdp2`` and ``fsdp2_offload_ckpt``."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from torch import nn

from lightning_presets.core.mesh import DATA_PARALLEL_WORLD, MODEL_PARALLEL
from lightning_presets.core.namespaces import Kind
from lightning_presets.core.preset import Preset, every_kind
from lightning_presets.core.versions import tested
from lightning_presets.strategies.model_parallel.family import MODEL_PARALLEL_FAMILY
from lightning_presets.strategies.model_parallel.fsdp2 import OFFLOAD_RULES, shard_by_preset
from lightning_presets.strategies.model_parallel.fsdp2 import RULES as FSDP2_RULES
from lightning_presets.strategies.model_parallel.hooks import (
    FSDP2FabricHooks,
    FSDP2TrainerHooks,
    ModelParallelTrainerHooks,
)
from lightning_presets.strategies.model_parallel.options import ModelParallelOptions
from lightning_presets.strategies.model_parallel.rules import RULES

TESTED_WITH = tested(
    "runtime: Trainer.fit and Fabric on CPU (gloo), 2 processes; construction on simulated CUDA",
    construction="Trainer, Fabric and the standalone packages on CPU: data parallel over the whole world",
    runtime_cpu="Trainer.fit on 2 processes (gloo): the losses equal ddp_static_graph's on the same model, data and "
    "seed",
)
TESTED_WITH_OFFLOAD = tested(
    "runtime: Trainer.fit and Fabric on CPU (gloo), 2 processes, offload policy without pinned memory and "
    "activation checkpointing; construction on simulated CUDA",
    construction="the Trainer on 2 simulated nodes of 8 CUDA devices: data parallel over all 16",
    runtime_cpu="Trainer.fit on 2 processes (gloo), bf16-mixed: half of the parameters on each rank, CPUOffloadPolicy "
    "on the root, every block run twice per step (activation checkpointing), losses within 2% of fp32's",
)


def fabric_parallelize_fn(placeholder: Callable[[nn.Module, Any], nn.Module]) -> Callable[..., dict[str, Any]]:
    """A ``Preset.prepare`` for Fabric's ``ModelParallelStrategy``, which needs a ``parallelize_fn``: the user's, or
    ``placeholder`` (which the preset replaces, or a rule reports, before anything calls it)."""

    def prepare(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
        if kind == "fabric" and ModelParallelOptions(values).parallelize_fn is None:
            values["parallelize_fn"] = placeholder
        return values

    return prepare


def _missing_parallelize_fn(module: nn.Module, device_mesh: Any) -> nn.Module:
    raise RuntimeError("tp2d_hybrid was built without a parallelize_fn (rule LP207 should have stopped this)")


TP2D_HYBRID = Preset(
    name="tp2d_hybrid",
    description="2D parallelism with ModelParallelStrategy: tensor parallel inside a node, FSDP2 data parallel "
    "across nodes (data = nodes, tensor = devices per node unless given). Runs on CUDA, and on CPU with gloo.",
    family=MODEL_PARALLEL_FAMILY,
    strategy=every_kind("ModelParallelStrategy"),
    init_params={"data_parallel_size": "auto", "tensor_parallel_size": "auto"},
    rules=RULES,
    mixins={"trainer": ModelParallelTrainerHooks},
    prepare=fabric_parallelize_fn(_missing_parallelize_fn),
    mesh=MODEL_PARALLEL,
    tested_with=tested(
        "runtime: Trainer.fit and Fabric on CPU (gloo), 2 processes, 1×2 and 2×1 meshes; construction on simulated "
        "CUDA",
        construction="Trainer (by name) and Fabric (with a parallelize_fn) in the four namespaces on 8 simulated CUDA "
        "devices: the (1, 8) mesh of one node",
        runtime_cpu="Trainer.fit by name on 2 processes (gloo), registered by the start-up hook alone: a 1×2 mesh, "
        "DTensor shards on each rank, decreasing losses",
    ),
)

FSDP2 = Preset(
    name="fsdp2",
    description="FSDP2 (fully_shard) over every device through ModelParallelStrategy, with no change to the "
    "model: the repeated blocks and the root are sharded when the model does not shard itself.",
    family=MODEL_PARALLEL_FAMILY,
    strategy=every_kind("ModelParallelStrategy"),
    init_params={"data_parallel_size": "auto", "tensor_parallel_size": 1},
    rules=FSDP2_RULES,
    mixins={"trainer": FSDP2TrainerHooks, "fabric": FSDP2FabricHooks},
    prepare=fabric_parallelize_fn(shard_by_preset),
    mesh=DATA_PARALLEL_WORLD,
    tested_with=TESTED_WITH,
)

FSDP2_OFFLOAD_CKPT = dataclasses.replace(
    FSDP2,
    name="fsdp2_offload_ckpt",
    description="fsdp2 plus CPU offload of the sharded parameters, gradients and optimizer step, and "
    "activation checkpointing of every repeated block. For models that do not fit even sharded.",
    rules=OFFLOAD_RULES,
    activation_checkpointing=True,
    cpu_offload=True,
    tested_with=TESTED_WITH_OFFLOAD,
)
