"""Real memory of one training step under four presets, on 2 CPU processes (gloo), to check ``plan`` against.

    python tests/scripts/plan_real_run.py [--model MODULE:FACTORY] [--precision 32-true]

Each rank builds the model with real tensors, wraps it with the presets' own code (``fully_shard`` of the
repeated blocks through ``strategies.fsdp2.shard_blocks_and_root``, with activation checkpointing and the
CPU offload policy for ``fsdp2_offload_ckpt``; torch's ``DistributedDataParallel`` with the init params of
``ddp_static_graph``; the module's ``configure_model`` on a (1, 2) mesh for ``tp2d_hybrid``), takes one
step, then measures a second one independently of the planner's code:

* parameters, gradients, optimizer state: the distinct storages each rank holds after the optimizer step
  (exact tensor accounting, local shards of DTensors);
* activations: the distinct storages saved for backward during the forward pass, parameters excluded
  (``torch.autograd.graph.saved_tensors_hooks``, storages told apart by address);
* peak: torch's tracker (``FSDPMemTracker`` / ``MemTracker``) in real mode over the whole step.

Rank 0 prints one line ``RESULT {json}``: preset -> figures in bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import os
import socket
import sys
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

PRESETS = ("fsdp2", "fsdp2_offload_ckpt", "ddp_static_graph", "tp2d_hybrid")
_DTYPES = {"32-true": None, "bf16-mixed": torch.bfloat16}


def _storages(tensors: Any) -> dict[int, int]:
    """Address -> bytes of the distinct storages behind ``tensors`` (local shards of DTensors)."""
    found: dict[int, int] = {}
    for tensor in tensors:
        if tensor is None:
            continue
        local = tensor.to_local() if hasattr(tensor, "to_local") else tensor
        storage = local.untyped_storage()
        if storage.nbytes():
            found[storage.data_ptr()] = storage.nbytes()
    return found


def _optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [value for state in optimizer.state.values() for value in state.values() if isinstance(value, torch.Tensor)]


class Saved:
    """Bytes of the distinct storages saved for backward, parameters (by storage address) excluded."""

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.found: dict[int, int] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        parameters = set(_storages(self.model.parameters()))
        for address, size in _storages([tensor]).items():
            if address not in parameters:
                self.found[address] = size
        return tensor


def _wrap(name: str, module: Any, preset: Any) -> tuple[nn.Module, Any]:
    from torch.distributed.device_mesh import init_device_mesh

    from lightning_presets.strategies import fsdp2

    if name in ("fsdp2", "fsdp2_offload_ckpt"):
        mesh = init_device_mesh("cpu", (2, 1), mesh_dim_names=("data_parallel", "tensor_parallel"))
        module._device_mesh = mesh
        module.configure_model()  # the reference decoder leaves a tensor-parallel size of 1 to the preset
        fsdp2.shard_blocks_and_root(module, mesh["data_parallel"], offload=preset.cpu_offload,
                                    checkpoint=preset.activation_checkpointing)  # fmt: skip
        return module, module
    if name == "tp2d_hybrid":
        mesh = init_device_mesh("cpu", (1, 2), mesh_dim_names=("data_parallel", "tensor_parallel"))
        module._device_mesh = mesh
        module.configure_model()
        return module, module
    options = {
        key: value for key, value in preset.init_params.items() if key in ("static_graph", "gradient_as_bucket_view")
    }
    return nn.parallel.DistributedDataParallel(module, **options), module


def _tracker(model: nn.Module, optimizer: torch.optim.Optimizer) -> Any:
    from torch.distributed._tools.fsdp2_mem_tracker import FSDPMemTracker
    from torch.distributed._tools.mem_tracker import MemTracker
    from torch.distributed.fsdp import FSDPModule

    outermost = next((module for module in model.modules() if isinstance(module, FSDPModule)), None)
    if outermost is not None:
        return FSDPMemTracker(outermost, optimizer)
    tracker = MemTracker()
    tracker.track_external(model, optimizer)
    return tracker


def measure(name: str, factory: Any, precision: str) -> dict[str, int]:
    from lightning_presets.registry import catalog

    preset = catalog.strategy_catalog().presets[name]
    torch.manual_seed(0)
    module = factory()
    wrapped, inner = _wrap(name, module, preset)
    optimizer = inner.configure_optimizers()
    for group in optimizer.param_groups:
        group["foreach"] = True  # what CUDA tensors get by default, and what the plan assumes
    tokens = inner.example_input_array
    autocast = _DTYPES[precision]
    replica = name == "ddp_static_graph"

    def forward() -> torch.Tensor:
        with torch.autocast("cpu", dtype=autocast) if autocast else contextlib.nullcontext():
            output = wrapped(tokens)
        return output.float().sum()

    forward().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=not replica)  # DDP keeps its gradient buckets either way
    tracker = _tracker(wrapped, optimizer)
    saved = Saved(wrapped)
    with tracker:
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda tensor: tensor):
            loss = forward()
        activations = sum(saved.found.values())
        loss.backward()
        del loss
        optimizer.step()
        figures = {
            "parameters": sum(_storages(list(wrapped.parameters()) + list(wrapped.buffers())).values()),
            "gradients": sum(_storages(p.grad for p in wrapped.parameters()).values()),
            "optimizer": sum(_storages(_optimizer_tensors(optimizer)).values()),
            "activations": activations,
        }
        optimizer.zero_grad(set_to_none=not replica)
    peak = tracker.get_tracker_snapshot("peak")
    figures["peak"] = sum(device["Total"] for device in peak.values())
    return figures


def run(rank: int, port: int, spec: str, precision: str) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    module_name, attr = spec.split(":")
    factory = getattr(importlib.import_module(module_name), attr)
    results = {name: measure(name, factory, precision) for name in PRESETS}
    if rank == 0:
        sys.stdout.write("RESULT " + json.dumps(results) + "\n")
        sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="lightning_presets.tools.plan.reference_models:decoder_tiny")
    parser.add_argument("--precision", choices=tuple(_DTYPES), default="32-true")
    args = parser.parse_args()
    torch.multiprocessing.spawn(run, args=(_free_port(), args.model, args.precision), nprocs=2, join=True)


if __name__ == "__main__":
    main()
