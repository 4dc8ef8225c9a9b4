"""The LightningModule that ``tests/scripts/resume_run.py`` trains, named for ``lightning-presets convert --model
convert_model:module`` (run with ``tests/scripts`` on the path): its ``configure_optimizers`` tells convert which
parameter each optimizer position is."""

from __future__ import annotations

from typing import Any

from resume_run import _module


def module() -> Any:
    return _module("ddp_static_graph", {})


def other() -> Any:
    """A model that is not the checkpoint's: its parameters have other names."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 2))
