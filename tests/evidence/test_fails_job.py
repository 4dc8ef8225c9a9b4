"""Evidence for the whole-job rules (Trainer arguments, the optimizer, DeepSpeed's config, the launcher): each failing
configuration, refused by its guard, then run with the guard switched off, fails in Lightning's, torch's or
DeepSpeed's own code.

The CPU family (DDP) runs for real on 2 gloo processes; for the CUDA-only families the Lightning or DeepSpeed function
that raises runs on CPU with the configuration's values.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent
QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
needs_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="needs deepspeed")


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
