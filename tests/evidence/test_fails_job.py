"""Evidence for the whole-job rules (Trainer arguments, the optimizer, DeepSpeed's config, the launcher): each failing
configuration, refused by its guard, then run with the guard switched off, fails in Lightning's, torch's or
DeepSpeed's own code.

The CPU family (DDP) runs for real on 2 gloo processes; for the CUDA-only families the Lightning or DeepSpeed function
that raises runs on CPU with the configuration's values.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from proof import Proof

import lightning_presets

HERE = Path(__file__).resolve().parent
QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")


@pytest.mark.proves("LP509")
def test_lp509_xla_fsdp_refuses_an_unknown_state_dict_type(proof: Proof, tmp_path: Path) -> None:
    from lightning_presets.tools.simulation.stand_ins import standing_in

    def build() -> Any:
        return lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", state_dict_type="consolidated")

    with standing_in("torch_xla"):
        sys.modules["torch_xla.distributed.fsdp"].XlaFullyShardedDataParallel = type("XlaFSDP", (torch.nn.Module,), {})
        proof.refused("LP509", build)
        with proof.guard_off("LP509"):
            strategy = build()
            strategy.broadcast = lambda obj, src=0: obj
            with proof.raises(ValueError, "Unknown state_dict_type: consolidated"):
                strategy.load_checkpoint(tmp_path, state={"model": torch.nn.Linear(2, 2)})


@pytest.fixture(autouse=True)
def _no_leftover_world() -> Any:
    """A real ``fit`` in this process leaves Lightning's default process group (its store listening on MASTER_PORT)
    and the variables it wrote (MASTER_PORT, LOCAL_RANK, ...) behind; the next test starts without them (a child
    launched later would otherwise inherit a MASTER_PORT this process still holds)."""
    import torch.distributed as dist

    saved = dict(os.environ)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(saved)
