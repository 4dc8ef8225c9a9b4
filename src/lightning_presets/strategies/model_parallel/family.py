"""The ``ModelParallelStrategy`` family: what it writes and loads, and how ``plan`` counts its memory."""

from __future__ import annotations

from lightning_presets.core.family import Checkpoints, Family, Layout, Memory, Placement
from lightning_presets.core.preset import Preset


def _mesh_layout(preset: Preset) -> Layout | None:
    """Where a ModelParallelStrategy preset keeps its model states: tensor parallel when its mesh has a tensor
    dimension, else FSDP2 over every device (in CPU memory with ``cpu_offload``); no mesh: not planned."""
    if preset.mesh is None:
        return None
    tensor_parallel = preset.mesh.auto[1] != "one"
    placement: Placement = "tensor" if tensor_parallel else ("offload_all" if preset.cpu_offload else "full")
    return Layout(placement=placement, tensor_parallel=tensor_parallel)


MODEL_PARALLEL_FAMILY = Family(
    "model_parallel",
    checkpoints=Checkpoints(
        loads=frozenset({"file", "distributed"}),
        writes=frozenset({"file", "distributed"}),
        trainer_model_key="state_dict",
    ),
    memory=Memory(title="FSDP2", rank=1, traceable=True, compute="autocast", place=_mesh_layout, on_mesh=True),
    fp16_loss_scaler=False,
)
"""``ModelParallelStrategy`` (FSDP2 and tensor parallel on a device mesh): one file or a sharded folder, the
Trainer's weights under ``state_dict``; traced under fake tensors; no fp16 loss scaler for ``16-mixed``."""
