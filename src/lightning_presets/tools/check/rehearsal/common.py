"""What the rehearsal's child runs by more than one path (Lightning's fit with real tensors, :mod:`.fake`'s step
under fake tensors): which failures are the rehearsal's own limit, Lightning's rank-zero flag as the rehearsed rank's,
and the user's ``--datamodule``."""

from __future__ import annotations

import contextlib
import os
import traceback
from typing import Any

from lightning_presets.tools.check.rehearsal.findings import FORKED_AUTOGRAD

_NOT_THEIRS = (os.sep + "site-packages" + os.sep, os.sep + "lib" + os.sep + "python", "<frozen ", "<string>")


_CPU_LIMITS = ("cuda", "nccl", "nvidia", "triton", "flash_attn", "transformer_engine", "bitsandbytes",
               "process group", "device_mesh", "device mesh")  # fmt: skip
_DATA_HOOKS = ("prepare_data", "setup", "train_dataloader", "val_dataloader")


def _limitation(error: BaseException) -> str:
    """Why ``error`` is the rehearsal's own limit (the model needs what one CPU process lacks, or data this machine
    does not hold), or empty."""
    frames = traceback.extract_tb(error.__traceback__)
    mine = [frame for frame in frames if not any(part in frame.filename for part in _NOT_THEIRS)]
    data = os.sep.join(("torch", "utils", "data", ""))
    if any(frame.name in _DATA_HOOKS for frame in mine) or any(data in frame.filename for frame in frames):
        return (f"loading the model's data raised {type(error).__name__}: {_first(error)}; the job's data may be "
                "where the job runs, not here")  # fmt: skip
    if any(frame.name == "configure_model" for frame in frames):
        return (f"configure_model raised {type(error).__name__}: {_first(error)}; it builds the model for the job's "
                "strategy and device mesh, which one CPU process does not have")  # fmt: skip
    text = f"{type(error).__name__}: {error}".lower()
    if "autograd" in text and "fork" in text:  # torch's own refusal in a child forked after autograd ran
        return f"{FORKED_AUTOGRAD} ({type(error).__name__}: {_first(error)})"
    hit = next((word for word in _CPU_LIMITS if word in text), None)
    return f"the model needs what a CPU process lacks ({hit}: {type(error).__name__}: {_first(error)})" if hit else ""


def _first(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else ""


@contextlib.contextmanager
def _rank_zero(rank: int) -> Any:
    """Lightning's ``rank_zero_only.rank`` as the rank's (Lightning sets it at set-up; restored after)."""
    from lightning.fabric.utilities import rank_zero as fabric_rank
    from lightning.pytorch.utilities import rank_zero_only

    saved = getattr(rank_zero_only, "rank", 0), getattr(fabric_rank.rank_zero_only, "rank", 0)
    rank_zero_only.rank = fabric_rank.rank_zero_only.rank = rank
    try:
        yield
    finally:
        rank_zero_only.rank, fabric_rank.rank_zero_only.rank = saved


def _datamodule(spec: str) -> Any:
    """The ``LightningDataModule`` the user's factory builds (``--datamodule MODULE:FACTORY``)."""
    from lightning.pytorch import LightningDataModule

    from lightning_presets.tools.simulation.user_model import ModelError, contained, load_factory

    factory = load_factory(spec, noun="--datamodule")
    with contained(f"the factory {spec}"):
        data = factory()
    if not isinstance(data, LightningDataModule):
        raise ModelError(f"--datamodule {spec}: the factory returned a {type(data).__name__}, not a "
                         "LightningDataModule")  # fmt: skip
    return data
