"""The DDP family: what ``DDPStrategy`` writes and loads, and how ``plan`` counts its memory."""

from __future__ import annotations

from lightning_presets.core.family import Checkpoints, Family, Layout, Memory

DDP_FAMILY = Family(
    "ddp",
    checkpoints=Checkpoints(loads=frozenset({"file"}), writes=frozenset({"file"}), through_checkpoint_io=True),
    memory=Memory(
        title="DDP", rank=0, traceable=True, compute="autocast", place=lambda preset: Layout(placement="replica")
    ),
    reducer=True,
)
"""DDP (``DDPStrategy``): every process keeps the whole model; one file per checkpoint, read through the Trainer's
``CheckpointIO``; gradients all-reduced by DDP's ``Reducer``."""
