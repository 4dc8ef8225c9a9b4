"""A real ``Trainer.fit`` with a preset string on 2 CPU processes (gloo), its memory measured at the allocator.

    python tests/scripts/plan_fit_run.py --model hf_models:llama --preset fsdp2 [--precision 32-true] [--steps 3]
    python tests/scripts/plan_fit_run.py --model hf_models:llama --preset fsdp2 --accelerator cuda   # 2 GPUs

Run it as a file: Lightning starts rank 1 by running the same command line again. The measurement is
independent of the planner and of torch's memory trackers (on CUDA the peak is the caching allocator's own
``torch.cuda.max_memory_allocated()`` over the last step, after ``reset_peak_memory_stats()`` at its start):

* **peak**: ``torch.profiler`` with ``profile_memory=True``, started before the model is built. Every CPU
  allocation and free made while it runs is an event with its address and size; their running sum is the
  memory the allocator has handed out, and its largest value in the last step (a ``record_function`` range
  from ``on_train_batch_start`` to ``on_train_batch_end``) is the step's peak. The largest value over the
  whole ``fit`` (model construction, sharding and setup included) is reported beside it. Frees made on
  threads the profiler does not see (gloo's workers) are recovered from reused addresses
  (:func:`_allocated_timeline`).
* **parameters, gradients, optimizer state**: the distinct storages the rank holds at the end of the last
  step (local shards of DTensors), read from the module and ``trainer.optimizers``.
* **activations**: the distinct storages saved for backward while the last ``training_step`` runs
  (``saved_tensors_hooks`` on the user's step; parameters excluded), counted by address.

The model is the factory's LightningModule, unchanged; the data is its ``example_input_array`` repeated.
Rank 0 prints one line ``FIT_MEMORY {json}`` (bytes).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the factories' modules (hf_models)

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

PREFIX = "FIT_MEMORY "
WINDOW = "lp_measured_step"


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


def _is_parameter(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, nn.Parameter) or isinstance(getattr(tensor, "_base", None), nn.Parameter)


class Saved:
    """Bytes of the distinct storages saved for backward, parameters and their views excluded."""

    def __init__(self, module: nn.Module) -> None:
        self.module = module
        self.found: dict[int, int] = {}

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if not _is_parameter(tensor):
            parameters = _storages(self.module.parameters())
            for address, size in _storages([tensor]).items():
                if address not in parameters:
                    self.found[address] = size
        return tensor


def _allocated_timeline(prof: Any) -> tuple[list[tuple[int, int]], list[tuple[int, int]], dict[str, int]]:
    """(time, bytes handed out by the CPU allocator) after each allocation or free, each step's window, and the
    frees the profiler did not see.

    The profiler records allocations and frees on the threads it profiles. A block freed on another thread
    has no free event: gloo's worker threads free the copies their collectives make (``c10d::`` operations),
    and any block whose address is handed out again was freed before. Such a block is counted as freed when
    the outermost operation that allocated it ends (the collective is waited for by its caller): an upper
    bound of its life.
    """
    events: list[tuple[int, int]] = []
    windows: dict[int, tuple[int, int]] = {}
    live: dict[int, tuple[int, int]] = {}  # address -> (bytes, when the operation that made it ended)
    unseen = {"blocks": 0, "bytes": 0}
    allocations = []

    def walk(node: Any, top: Any, collective: bool) -> None:
        if node.name.startswith(WINDOW):
            windows[int(node.name.removeprefix(WINDOW))] = (node.start_time_ns, node.end_time_ns)
        if type(node.extra_fields).__name__ == "_ExtraFields_Allocation":
            fields = node.extra_fields
            if str(fields.device).startswith("cpu"):
                ended = top.end_time_ns if top else node.start_time_ns
                allocations.append((node.start_time_ns, fields.ptr, fields.alloc_size, ended, collective))
        for child in node.children:
            walk(child, top if top is not None and not top.name.startswith(WINDOW) else child,
                 collective or node.name.startswith("c10d::"))  # fmt: skip

    for root in prof.profiler.kineto_results.experimental_event_tree():
        walk(root, None, False)
    gloo: dict[int, int] = {}  # address -> when a collective's copy is freed, if no free is recorded
    for when, address, size, ended, collective in sorted(allocations):
        if size > 0:
            if address in live:  # freed on a thread the profiler does not see
                old, old_end = live.pop(address)
                gloo.pop(address, None)
                events.append((min(old_end, when), -old))
                unseen["blocks"] += 1
                unseen["bytes"] += old
            live[address] = (size, max(ended, when))
            if collective:
                gloo[address] = max(ended, when)
            events.append((when, size))
        elif address in live:
            gloo.pop(address, None)
            events.append((when, -live.pop(address)[0]))
    for address, freed in gloo.items():
        size = live.pop(address)[0]
        events.append((freed, -size))
        unseen["blocks"] += 1
        unseen["bytes"] += size
    total, timeline = 0, []
    for when, delta in sorted(events):
        total += delta
        timeline.append((when, total))
    return timeline, [windows[index] for index in sorted(windows)], unseen


def _window(timeline: list[tuple[int, int]], start: int, end: int) -> tuple[int, int]:
    """(bytes allocated when the window opens, the largest value inside it)."""
    before = [total for when, total in timeline if when < start]
    inside = [total for when, total in timeline if start <= when <= end]
    opening = before[-1] if before else 0
    return opening, max([opening, *inside])


def _broadcasts_as_collectives() -> None:
    """Run DDP's parameter broadcast (``torch.distributed._broadcast_coalesced``) inside a ``c10d::`` range.

    It flattens the parameters into one buffer, broadcasts it and waits; the buffer is dead when it returns, but its
    last reference may be dropped by gloo's worker thread (a free the profiler does not see) or by this one, as the
    two threads race. Inside the range the buffer is one of a collective's copies (:func:`_allocated_timeline`),
    counted as freed when the broadcast returns at the latest; outside it, in about one run of four, 12.7 MB that
    had been freed during set-up counted as live through every step.
    """
    import torch.distributed as dist

    broadcast = dist._broadcast_coalesced

    def recorded(*args: Any, **kwargs: Any) -> Any:
        with record_function("c10d::_broadcast_coalesced"):
            return broadcast(*args, **kwargs)

    dist._broadcast_coalesced = recorded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="MODULE:FACTORY")
    parser.add_argument("--preset", required=True)
    parser.add_argument("--precision", default="32-true")
    parser.add_argument("--steps", type=int, default=3, help="optimizer steps; the last one is measured")
    parser.add_argument("--accelerator", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    cuda = args.accelerator == "cuda"
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    if not cuda:
        _broadcasts_as_collectives()
        prof.start()  # before the model exists: every byte the run allocates is an event

    import lightning.pytorch as pl
    from torch.utils.data import DataLoader

    module_name, attr = args.model.split(":")
    torch.manual_seed(0)
    module = getattr(importlib.import_module(module_name), attr)()
    measured: dict[str, Any] = {}
    last = args.steps - 1
    original_step = module.training_step

    def training_step(batch: Any, batch_idx: int) -> Any:
        if batch_idx != last:
            return original_step(batch, batch_idx)
        saved = Saved(module)
        with torch.autograd.graph.saved_tensors_hooks(saved.pack, lambda tensor: tensor):
            output = original_step(batch, batch_idx)
        measured["activations"] = sum(saved.found.values())
        return output

    module.training_step = training_step

    class Measure(pl.Callback):  # type: ignore[misc]
        window: Any = None

        def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
            self.window = record_function(f"{WINDOW}{batch_idx}")
            self.window.__enter__()
            if cuda and batch_idx == last:
                torch.cuda.synchronize()
                measured["step_start"] = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()

        def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx != last:
                self.window.__exit__(None, None, None)
                return
            del outputs
            parameters = list(pl_module.parameters())
            states = [value for optimizer in trainer.optimizers for state in optimizer.state.values()
                      for value in state.values() if isinstance(value, torch.Tensor)]  # fmt: skip
            measured["parameters"] = sum(_storages([*parameters, *pl_module.buffers()]).values())
            measured["gradients"] = sum(_storages(p.grad for p in parameters).values())
            measured["optimizer"] = sum(_storages(states).values())
            self.window.__exit__(None, None, None)
            if cuda:
                torch.cuda.synchronize()
                measured["peak"] = torch.cuda.max_memory_allocated()

    example = module.example_input_array
    world = 2
    samples = [example[i % example.shape[0]] for i in range(example.shape[0] * world * args.steps)]
    trainer = pl.Trainer(strategy=args.preset, accelerator=args.accelerator, devices=world, precision=args.precision,
                         max_steps=args.steps, callbacks=[Measure()], logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0)  # fmt: skip
    started = time.perf_counter()
    trainer.fit(module, DataLoader(samples, batch_size=example.shape[0]))  # type: ignore[arg-type]
    seconds = time.perf_counter() - started
    if cuda:
        measured.update(fit_peak=None, steps=None, frees_on_other_threads=None)
    else:
        prof.stop()
        timeline, windows, unseen = _allocated_timeline(prof)
        if len(windows) != args.steps:
            raise SystemExit(f"{len(windows)} of {args.steps} steps were measured")
        steps = [_window(timeline, *window) for window in windows]
        measured.update(peak=steps[-1][1], fit_peak=max(total for _, total in timeline), step_start=steps[-1][0],
                        steps=steps, frees_on_other_threads=unseen)  # fmt: skip
    measured.update(
        seconds=round(seconds, 1),
        world_size=trainer.world_size,
        strategy=type(trainer.strategy).__name__,
    )
    if trainer.is_global_zero:
        sys.stdout.write(PREFIX + json.dumps(measured) + "\n")
        sys.stdout.flush()
    if torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
