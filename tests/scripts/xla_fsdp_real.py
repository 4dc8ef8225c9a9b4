"""``xla_fsdp_ckpt`` on a real torch_xla (PJRT on CPU devices): construction, guards and ``setup_module``.

    PJRT_DEVICE=CPU CPU_NUM_DEVICES=1 python tests/scripts/xla_fsdp_real.py

Prints one line ``RESULT {json}``. Lightning's ``XLAAccelerator`` counts TPU chips only (it asks the TPU metadata
server), so its availability is patched to report 2 devices, as a 2-chip TPU host would; everything else is real:
torch_xla, Lightning's XLAFSDPStrategy, XLAPrecision, XLAEnvironment and the preset's guards. The wrapped model then
runs one forward/backward on the process's XLA CPU device, outside Lightning's launcher: on CPU, torch_xla's
``xmp.spawn`` runs a single process holding every device, while Lightning runs one device per process.
"""

from __future__ import annotations

import json
import math
import sys
from unittest import mock

import torch
import torch_xla
from lightning.fabric import Fabric
from lightning.fabric.accelerators import XLAAccelerator
from torch import nn

from lightning_presets import PresetConfigError


class Blocks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.TransformerEncoderLayer(16, 2, 32, batch_first=True) for _ in range(2))
        self.head = nn.Linear(16, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x)


def codes(**arguments: object) -> list[str]:
    try:
        Fabric(strategy="xla_fsdp_ckpt", **arguments)  # type: ignore[arg-type]
    except PresetConfigError as error:
        return list(error.codes)
    return []


def main() -> None:
    with (
        mock.patch.object(XLAAccelerator, "is_available", staticmethod(lambda: True)),
        mock.patch.object(XLAAccelerator, "auto_device_count", staticmethod(lambda: 2)),
    ):
        fabric = Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=2, precision="32-true")
        rejected = {"single_device": codes(accelerator="tpu", devices=1), "cpu": codes(accelerator="cpu", devices=2)}
    strategy = fabric.strategy
    context = strategy._lp_context
    wrapped = strategy.setup_module(Blocks())
    units = [
        type(module).__name__ for module in wrapped.modules() if "FullyShardedDataParallel" in type(module).__name__
    ]
    device = torch_xla.device()
    loss = wrapped(torch.randn(3, 4, 16).to(device)).pow(2).mean()
    loss.backward()
    torch_xla.sync()
    report = {
        "torch_xla": torch_xla.__version__,
        "strategy": type(strategy).__name__,
        "world_size": context.world_size,
        "accelerator": context.accelerator,
        "precision_plugin": type(strategy.precision).__name__,
        "environment": type(strategy.cluster_environment).__name__,
        "rejected": rejected,
        "fsdp_units": units,
        "checkpoint_policy": sorted(cls.__name__ for cls in strategy._activation_checkpointing_policy or ()),
        "device": str(device),
        "loss_finite": math.isfinite(loss.item()),
        "all_grads": all(p.grad is not None for p in wrapped.parameters()),
    }
    sys.stdout.write("RESULT " + json.dumps(report) + "\n")


if __name__ == "__main__":
    main()
