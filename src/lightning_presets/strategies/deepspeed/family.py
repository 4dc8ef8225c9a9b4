"""The DeepSpeed family: what ``DeepSpeedStrategy`` writes and loads, and how ``plan`` counts its memory."""

from __future__ import annotations

from typing import Any

from lightning_presets.core.family import Checkpoints, Family, Layout, Memory, Placement
from lightning_presets.strategies.deepspeed.options import DeepSpeedOptions


def zero_layout(preset: Any) -> Layout:
    """Where a DeepSpeed preset keeps its model states, from its arguments (``stage``, ``offload_parameters``,
    ``offload_optimizer``, with Lightning's defaults)."""
    view = DeepSpeedOptions(preset.init_params)
    stage, offload_parameters = int(view.stage), view.offload_parameters
    placement: Placement
    if offload_parameters:
        placement = "offload_all"
    elif view.offload_optimizer:
        placement = "offload_optimizer"
    else:
        placement = "full" if stage == 3 else "grad_op"
    return Layout(placement=placement, zero_stage=stage, offload_parameters=offload_parameters)


DEEPSPEED_FAMILY = Family(
    "deepspeed",
    checkpoints=Checkpoints(
        loads=frozenset({"deepspeed"}),
        writes=frozenset({"deepspeed"}),
        own_format_only=True,
        full_weights_from_file=True,
    ),
    memory=Memory(
        title="ZeRO-{zero_stage}",
        rank=3,
        traceable=False,
        compute="half_module",
        place=zero_layout,
        zero_optimizer=True,
    ),
    rehearsal="deepspeed_engine",
)
"""DeepSpeed (``DeepSpeedStrategy``): its engine writes and resumes ZeRO folders only (a single file's weights under
ZeRO-3 with ``load_full_weights=True``); planned by DeepSpeed's own estimators; its engine reads the optimizers and
schedulers at set-up, which the rehearsal runs."""
