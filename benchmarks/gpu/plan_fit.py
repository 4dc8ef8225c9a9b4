"""One preset's real peak GPU memory, for the ``plan_memory`` check of ``gpu_checks.py``.

    python benchmarks/gpu/plan_fit.py --preset fsdp2 [--cpu]

Trains :func:`plan_module` (the reference decoder whose ``training_step`` is the sum of the outputs; the plan
traces that ``training_step`` as it is) for two steps with ``Trainer(strategy=PRESET, devices=<every GPU>,
precision="bf16-mixed")`` and measures
``torch.cuda.max_memory_allocated()`` over the second step on rank 0 (the optimizer state exists by then,
as in the plan). Run as a file: Lightning starts the other ranks by running it again. Rank 0 prints one line
``PLAN_FIT {json}``. ``--cpu`` runs 2 gloo processes and measures nothing (the wiring only).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

SIZES = {"vocab": 32_000, "dim": 1024, "heads": 16, "layers": 8, "sequence": 1024, "batch": 4}
CPU_SIZES = {"vocab": 64, "dim": 32, "heads": 4, "layers": 2, "sequence": 16, "batch": 4}
PREFIX = "PLAN_FIT "


def model_spec(cpu: bool) -> str:
    """``--model`` for the plan: the same factory the fit uses."""
    return "plan_fit:plan_module_cpu" if cpu else "plan_fit:plan_module"


def _sum_loss_decoder(sizes: dict[str, int]) -> Any:
    import torch

    from lightning_presets.tools.plan.reference_models import DecoderModule

    class SumLossDecoder(DecoderModule):
        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            return self(batch).float().sum()

    return SumLossDecoder(**sizes)


def plan_module() -> Any:
    """The model the plan traces and the check trains on GPUs (about 165M parameters)."""
    return _sum_loss_decoder(SIZES)


def plan_module_cpu() -> Any:
    """The same decoder, tiny, for ``--cpu`` (the wiring only)."""
    return _sum_loss_decoder(CPU_SIZES)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--preset", required=True)
    parser.add_argument("--cpu", action="store_true")
    args = parser.parse_args()
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader

    cpu = args.cpu
    devices = 2 if cpu else torch.cuda.device_count()
    measured: dict[str, Any] = {}

    class Measure(pl.Callback):  # type: ignore[misc]  # Lightning is not followed by mypy here
        def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == 1 and not cpu:
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == 1 and not cpu:
                torch.cuda.synchronize()
                measured["peak_bytes"] = torch.cuda.max_memory_allocated()

    trainer = pl.Trainer(strategy=args.preset, accelerator="cpu" if cpu else "cuda", devices=devices,
                         precision="32-true" if cpu else "bf16-mixed", max_steps=2, callbacks=[Measure()],
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
    sizes = CPU_SIZES if cpu else SIZES
    tokens = torch.zeros(2 * sizes["batch"] * devices, sizes["sequence"], dtype=torch.long)
    trainer.fit(plan_module_cpu() if cpu else plan_module(), DataLoader(tokens, batch_size=sizes["batch"]))  # type: ignore[arg-type]
    if trainer.is_global_zero:
        measured.update(devices=devices, world_size=trainer.world_size, strategy=type(trainer.strategy).__name__)
        sys.stdout.write(PREFIX + json.dumps(measured) + "\n")
        sys.stdout.flush()
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
