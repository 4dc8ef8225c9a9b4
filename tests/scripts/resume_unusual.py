"""A real save and ``fit(ckpt_path=...)`` with an optimizer plain Lightning resumes but whose state dict is unusual
(``tests/test_resume_reader.py``): ``none`` (a fit without an optimizer saves ``optimizer_states: [{}]``),
``lookahead`` (``fast_state``/``slow_state``, as torch-optimizer's Lookahead) or ``foreign`` (keys of its own).

    python resume_unusual.py --strategy ddp_static_graph --optimizer lookahead --devices 2 --out run.ckpt

Each rank prints ``RESULT {json}``: the step and epoch the resumed fit (one epoch of 2 batches more) ended at, or the
error.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback
from typing import Any

import torch
from lightning.pytorch import LightningModule, Trainer
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

QUIET = {"logger": False, "enable_progress_bar": False, "enable_model_summary": False, "enable_checkpointing": False}


class Lookahead(torch.optim.SGD):
    def state_dict(self) -> dict[str, Any]:
        inner = super().state_dict()
        return {"fast_state": inner["state"], "slow_state": {}, "param_groups": inner["param_groups"]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict({"state": state_dict["fast_state"], "param_groups": state_dict["param_groups"]})


class Foreign(torch.optim.SGD):
    def state_dict(self) -> dict[str, Any]:
        return {"inner": {"k": 5}, "version": 3}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict != {"inner": {"k": 5}, "version": 3}:
            raise ValueError(f"not what was saved: {state_dict}")


class Module(LightningModule):
    def __init__(self, optimizer: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = nn.Linear(4, 1)
        self.kind = optimizer
        if optimizer == "none":
            self.automatic_optimization = False  # a fit without an optimizer steps nothing itself

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = self.layer(batch[0]).pow(2).mean()
        if self.kind == "none":
            self.manual_backward(loss)
            return None
        return loss

    def configure_optimizers(self) -> Any:
        if self.kind == "none":
            return None
        return {"lookahead": Lookahead, "foreign": Foreign}[self.kind](self.parameters(), lr=0.1, momentum=0.9)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--strategy", required=True)
    parser.add_argument("--optimizer", choices=("none", "lookahead", "foreign"), required=True)
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = DataLoader(TensorDataset(torch.randn(32, 4)), batch_size=4)
    report: dict[str, Any] = {}
    try:
        run = {"accelerator": "cpu", "devices": args.devices, "limit_train_batches": 2, **QUIET}
        first = Trainer(strategy=args.strategy, max_epochs=1, **run)
        first.fit(Module(args.optimizer), data)
        first.save_checkpoint(args.out)
        second = Trainer(strategy=args.strategy, max_epochs=2, **run)
        module = Module(args.optimizer)
        second.fit(module, data, ckpt_path=args.out)
        report = {"rank": second.global_rank, "step": second.global_step, "epochs": second.current_epoch, "error": None}
    except BaseException as error:  # the result is what the test reads
        report = {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()[-2000:]}
    sys.stdout.write("RESULT " + json.dumps(report) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
