"""The FSDP1 family: what ``FSDPStrategy`` writes and loads, and how ``plan`` counts its memory."""

from __future__ import annotations

from lightning_presets.core.family import Checkpoints, Family, Layout, Memory
from lightning_presets.core.preset import Preset
from lightning_presets.strategies.fsdp.options import FSDPOptions


def _fsdp_layout(preset: Preset) -> Layout:
    """Where an FSDP1 preset keeps its model states: its ``sharding_strategy`` (a name or the enum) and offload."""
    view = FSDPOptions(preset.init_params)
    sharding, offload = view.sharding, view.cpu_offload or preset.cpu_offload
    if sharding in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
        return Layout(placement="hybrid")
    if sharding == "SHARD_GRAD_OP":
        return Layout(placement="grad_op")
    if sharding == "NO_SHARD":
        return Layout(placement="replica")
    return Layout(placement="offload_all" if offload else "full")


FSDP_FAMILY = Family(
    "fsdp",
    checkpoints=Checkpoints(
        loads=frozenset({"file", "distributed"}), writes=frozenset({"file", "distributed"}), trainer_model_key="model"
    ),
    memory=Memory(title="FSDP", rank=2, traceable=False, compute="half_weights", place=_fsdp_layout),
    rehearsal="fsdp1",
)
"""FSDP1 (``FSDPStrategy``): one file or a sharded folder, the Trainer's weights under ``model``; planned by
arithmetic (FSDP1 needs CUDA to wrap), computing with half-precision gathered weights."""
