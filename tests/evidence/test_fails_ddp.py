"""DDP presets (ddp_static_graph, ddp_bf16_compress) on CPU, one gloo process."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from jobs import Steps, fit
from proof import Proof

pytestmark = pytest.mark.usefixtures("process_group")
BF16 = "ddp_bf16_compress"


class RecordsHooks(Steps):
    """Reads the comm hooks of the DDP wrapper while it exists (Lightning unwraps the model at teardown)."""

    hooks: list[str]

    def on_train_start(self) -> None:
        wrapper: Any = self.trainer.strategy.model
        self.hooks = [getattr(hook, "__name__", repr(hook)) for hook, _ in wrapper._comm_hooks]


@pytest.mark.proves("LP303")
def test_lp303_bf16_compression_off_cuda_is_ignored_or_refused(proof: Proof) -> None:
    from lightning.fabric import Fabric

    from lightning_presets.tools.simulation.stand_ins import standing_in

    with standing_in("cpu_only_torch"):
        proof.refused("LP303", lambda: Fabric(strategy=BF16, accelerator="cpu", devices=1))
    with proof.guard_off("LP303", "LP311"):
        module = fit(BF16, RecordsHooks())  # the Trainer off CUDA: LP311's warning, no error
        assert len(module.losses) == 2  # it trains, as plain DDP
        assert "bf16_compress_hook" not in module.hooks
        if torch.version.cuda is None:  # a CPU build of torch refuses the hook itself (Fabric registers it)
            fabric = Fabric(strategy=BF16, accelerator="cpu", devices=1)
            fabric.launch()
            with proof.raises(TypeError, r"BF16 all reduce communication hook required CUDA 11\+ and NCCL 2\.10\+"):
                fabric.setup(torch.nn.Linear(4, 4))
