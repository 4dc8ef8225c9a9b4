"""One cell of the resume matrix: save a checkpoint with one strategy, or resume one with another (CPU, gloo).

Run it as a file (Lightning re-runs ``sys.argv`` for rank 1):

    python tests/scripts/resume_run.py save --strategy fsdp2 --devices 2 --out /tmp/run/fsdp2-2.ckpt
    python tests/scripts/resume_run.py resume --strategy ddp_static_graph --devices 1 --ckpt /tmp/run/fsdp2-2.ckpt

``save`` trains ``TOTAL_STEPS`` steps without interruption and saves a checkpoint after ``SAVE_STEP`` of them
(``trainer.save_checkpoint`` from a callback): the losses after the checkpoint are the reference a resumed run must
reproduce. ``resume`` calls ``fit(ckpt_path=...)`` and trains to ``TOTAL_STEPS``. ``--strategy`` is a preset name or
``ddp`` (Lightning's own ``DDPStrategy``, no guards). Every global batch is the same 8 sequences whatever the
world size (each data-parallel rank takes its share), and the loss recorded per step is the
mean over the ranks, so the losses of runs at different world sizes are comparable (and no data loader position
matters on resume).

Rank 0 prints one line ``RESULT {json}``: the losses by global step, the step the fit started at, and the error
(type, first line, the ``LP`` codes of a ``PresetConfigError``) when the fit failed. ``--weights-only`` loads only
the weights (a fresh optimizer): the control that shows a lost optimizer state changes the losses.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for `models`

import torch

from models import TinyTransformer, counting_sequences, next_token_loss, parallelize

SAVE_STEP = 3
TOTAL_STEPS = 5
GLOBAL_BATCH = 8
LEARNING_RATE = 1e-2
ACCELERATOR = ["cpu", "32-true"]
"""The accelerator and precision of every run (``--accelerator cuda`` on a GPU: ``bf16-mixed``)."""
LOAD_UNIVERSAL: list[bool] = []
TIMEOUT = datetime.timedelta(seconds=60)
"""The process group's timeout: a rank left waiting by a failed peer gives up within a minute."""


def _strategy(name: str) -> Any:
    if name == "ddp":
        from lightning.pytorch.strategies import DDPStrategy

        return DDPStrategy(timeout=TIMEOUT)
    import lightning_presets

    strategy = lightning_presets.strategy(name, timeout=TIMEOUT)
    config = getattr(strategy, "config", None)
    if isinstance(config, dict):  # DeepSpeed: train with torch's Adam (DeepSpeedCPUAdam needs a C++ build)
        config["zero_force_ds_cpu_optimizer"] = False
        if LOAD_UNIVERSAL:
            config["checkpoint"] = {"load_universal": True}  # what LP802's hint tells the user to set
    return strategy


def _module(name: str, losses: dict[int, float], first_step: int = 0) -> Any:
    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    class Module(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.model = TinyTransformer()

        def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
            loss = next_token_loss(self.model, batch)
            mean = loss.detach().clone()
            if torch.distributed.is_initialized():
                torch.distributed.all_reduce(mean)
                mean /= torch.distributed.get_world_size()
            losses[first_step + self.trainer.global_step + 1] = float(mean)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.Adam(self.parameters(), lr=LEARNING_RATE)

        def train_dataloader(self) -> DataLoader[torch.Tensor]:
            # Each data-parallel rank takes its share of the same 8 sequences at every step (no sampler, no shuffle).
            split = self.trainer.strategy.distributed_sampler_kwargs
            share = counting_sequences(GLOBAL_BATCH)[split["rank"] :: split["num_replicas"]]
            return DataLoader(share.repeat(8, 1), batch_size=len(share))  # type: ignore[arg-type]

    class TensorParallel(Module):
        """tp2d_hybrid: the module applies tensor parallel and FSDP2 itself (once)."""

        def configure_model(self) -> None:
            from torch.distributed.fsdp import FSDPModule

            if not isinstance(self.model, FSDPModule):
                parallelize(self.model, self.device_mesh)

    return TensorParallel() if name == "tp2d_hybrid" else Module()


def _trainer(strategy: str, devices: int, callbacks: list[Any], steps: int = TOTAL_STEPS) -> Any:
    import lightning.pytorch as pl

    return pl.Trainer(
        strategy=_strategy(strategy),
        accelerator=ACCELERATOR[0],
        precision=ACCELERATOR[1],
        devices=devices,
        max_steps=steps,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        use_distributed_sampler=False,
        callbacks=callbacks,
    )


def _failures() -> tuple[type[BaseException], ...]:
    """What a failed load raises: torch's ``CheckpointException`` derives from ``BaseException``, not ``Exception``."""
    from torch.distributed.checkpoint.api import CheckpointException

    return (Exception, CheckpointException)


FAILURES = _failures()


def _summary(text: str) -> str:
    """The first line of an error's message, and its last where they differ (a ``CheckpointException`` names the
    ranks first and the rank's own error last)."""
    lines = [line for line in text.splitlines() if line.strip()]
    return (lines[0] if len(lines) < 2 else f"{lines[0]} ... {lines[-1]}")[:500] if lines else ""


def _error(error: BaseException) -> dict[str, Any]:
    text = str(error).strip()
    return {
        "type": type(error).__name__,
        "message": _summary(text),
        "codes": list(getattr(error, "codes", ())),
        "where": "".join(traceback.format_tb(error.__traceback__)[-1:]).strip()[:500],
    }


def _finish(report: dict[str, Any], failed: bool) -> None:
    rank = int(os.environ.get("LOCAL_RANK", "0"))
    report["rank"] = rank
    if rank == 0 or failed:
        sys.stdout.write("RESULT " + json.dumps(report) + "\n")
        sys.stdout.flush()
    if failed:  # a peer may wait in a collective: leave at once, the launcher or the harness ends the rest
        os._exit(1)
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def save(strategy: str, devices: int, out: str) -> None:
    import lightning.pytorch as pl

    losses: dict[int, float] = {}

    class SaveAt(pl.Callback):
        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            if trainer.global_step == SAVE_STEP:
                trainer.save_checkpoint(out)

    trainer = _trainer(strategy, devices, [SaveAt()])
    report: dict[str, Any] = {"mode": "save", "strategy": strategy, "devices": devices, "checkpoint": out}
    try:
        trainer.fit(_module(strategy, losses))
    except Exception as error:
        _finish({**report, "error": _error(error), "losses": losses}, failed=True)
    _finish({**report, "error": None, "losses": losses, "world_size": trainer.world_size}, failed=False)


def resume(strategy: str, devices: int, ckpt: str, weights_only: bool) -> None:
    import lightning.pytorch as pl

    losses: dict[int, float] = {}
    started: list[int] = []

    class Start(pl.Callback):
        def on_train_start(self, trainer: Any, *args: Any) -> None:
            started.append(trainer.global_step)

    trainer = _trainer(strategy, devices, [Start()], TOTAL_STEPS - SAVE_STEP if weights_only else TOTAL_STEPS)
    module = _module(strategy, losses, first_step=SAVE_STEP if weights_only else 0)
    report: dict[str, Any] = {"mode": "resume", "strategy": strategy, "devices": devices, "checkpoint": ckpt}
    try:
        if weights_only:
            state = torch.load(ckpt, weights_only=False)["state_dict"]
            module.load_state_dict(state)
            trainer.fit(module)
        else:
            trainer.fit(module, ckpt_path=ckpt)
    except FAILURES as error:
        _finish({**report, "error": _error(error), "losses": losses, "started_at": started}, failed=True)
    _finish({**report, "error": None, "losses": losses, "started_at": started}, failed=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("mode", choices=("save", "resume"))
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--devices", type=int, required=True)
    parser.add_argument("--out", help="save: where the checkpoint goes")
    parser.add_argument("--ckpt", help="resume: the checkpoint")
    parser.add_argument("--weights-only", action="store_true", help="resume: the weights alone, a fresh optimizer")
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu", help="cuda trains in bf16-mixed")
    parser.add_argument("--load-universal", action="store_true", help="DeepSpeed: load a universal checkpoint")
    args = parser.parse_args()
    LOAD_UNIVERSAL[:] = [True] if args.load_universal else []
    ACCELERATOR[:] = [args.accelerator, "bf16-mixed" if args.accelerator == "cuda" else "32-true"]
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    if args.mode == "save":
        save(args.strategy, args.devices, args.out)
    else:
        resume(args.strategy, args.devices, args.ckpt, args.weights_only)


if __name__ == "__main__":
    main()
