"""``Trainer(strategy="fsdp_offload_ckpt")`` vs ``Trainer(strategy=FSDPStrategy(...))`` with the same arguments.

The same for ``Fabric``. One process, simulated CUDA (8 devices, capability 9.0), ``precision="bf16-mixed"``; the
two constructions alternate in blocks of pairs (each pair's order alternating too, so neither always runs first), and
the medians over the blocks are compared. The
difference is what the preset adds: its factory (argument checks, a fresh guarded instance) and the
guards that run while the Trainer is constructed. Writes ``benchmarks/results/construction.txt``.

    python benchmarks/bench_construction.py [--blocks 30] [--per-block 20]
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning
import torch
from lightning.fabric import Fabric
from lightning.fabric.strategies import FSDPStrategy as FabricFSDPStrategy
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import FSDPStrategy

import lightning_presets  # noqa: F401  (registers when autoload is off)
from lightning_presets.tools.simulation import simulated_cuda

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
COMMON: dict[str, Any] = {
    "accelerator": "cuda",
    "devices": 8,
    "precision": "bf16-mixed",
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


FABRIC: dict[str, Any] = {"accelerator": "cuda", "devices": 8, "precision": "bf16-mixed"}


def trainer_preset() -> Any:
    return Trainer(strategy="fsdp_offload_ckpt", **COMMON)


def trainer_plain() -> Any:
    strategy = FSDPStrategy(sharding_strategy="FULL_SHARD", cpu_offload=True, state_dict_type="sharded")
    return Trainer(strategy=strategy, **COMMON)


def fabric_preset() -> Any:
    return Fabric(strategy="fsdp_offload_ckpt", **FABRIC)


def fabric_plain() -> Any:
    strategy = FabricFSDPStrategy(sharding_strategy="FULL_SHARD", cpu_offload=True, state_dict_type="sharded")
    return Fabric(strategy=strategy, **FABRIC)


def timed(make: Callable[[], Any], clock: Callable[[], float]) -> float:
    start = clock()
    make()
    return clock() - start


def measure(
    preset: Callable[[], Any], plain: Callable[[], Any], blocks: int, per_block: int, clock: Callable[[], float]
) -> dict[str, float]:
    """Per block: ``per_block`` pairs, the order of each pair alternating (preset first, then plain first), and the
    block's median of each; the figures are the medians over the blocks (a slow stretch of a shared machine moves
    both of a block's medians, and no more than one block)."""
    ratios, named_medians, plain_medians = [], [], []
    for _ in range(blocks):
        named, instance = [], []
        for pair in range(per_block):
            if pair % 2:
                instance.append(timed(plain, clock))
                named.append(timed(preset, clock))
            else:
                named.append(timed(preset, clock))
                instance.append(timed(plain, clock))
        named_medians.append(statistics.median(named))
        plain_medians.append(statistics.median(instance))
        ratios.append(named_medians[-1] / plain_medians[-1])
    return {
        "preset": statistics.median(named_medians),
        "plain": statistics.median(plain_medians),
        "ratio": statistics.median(ratios),
        "ratio_low": min(ratios),
        "ratio_high": max(ratios),
    }


CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "CPU": time.process_time}
"""Wall time, and this process's CPU time: on a shared machine the CPU time leaves out the time other processes
held the cores, so its ratio is the steadier one; both are reported."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=30, help="blocks of pairs; the figures are medians over them")
    parser.add_argument("--per-block", type=int, default=20, help="pairs of constructions in each block")
    args = parser.parse_args()
    logging.disable(logging.INFO)  # "GPU available: ..." on every Trainer
    warnings.filterwarnings("ignore")

    results = {}
    with simulated_cuda(8):
        for kind, preset_fn, plain_fn in (
            ("Trainer", trainer_preset, trainer_plain),
            ("Fabric", fabric_preset, fabric_plain),
        ):
            made = preset_fn(), plain_fn()
            preset, plain = (getattr(each, "strategy", None) or each._strategy for each in made)
            if type(preset).__mro__[-len(type(plain).__mro__) :] != type(plain).__mro__:
                raise RuntimeError(f"{type(preset)} is not built on {type(plain)}")
            for attribute in ("sharding_strategy", "cpu_offload", "_state_dict_type", "mixed_precision_config"):
                if repr(getattr(preset, attribute)) != repr(getattr(plain, attribute)):
                    raise RuntimeError(f"the two {kind} strategies differ in {attribute}")
            for _ in range(10):
                preset_fn()
                plain_fn()
            for name, clock in CLOCKS.items():
                results[f"{kind} ({name} time)"] = measure(preset_fn, plain_fn, args.blocks, args.per_block, clock)

    lines = [
        "bench_construction: Trainer/Fabric(strategy='fsdp_offload_ckpt') vs the same with strategy=FSDPStrategy(...)",
        f"python {platform.python_version()}, torch {torch.__version__}, lightning {lightning.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end",
        "simulated CUDA: 8 devices, capability (9, 0); precision='bf16-mixed'; FSDPStrategy(sharding_strategy="
        "'FULL_SHARD', cpu_offload=True, state_dict_type='sharded')",
        f"{args.blocks} blocks of {args.per_block} pairs each (the order of each pair alternating), after 10 warm-up "
        "pairs; figures: medians over the blocks of each block's medians",
    ]
    for kind, result in results.items():
        lines += [
            f"{kind}: preset by name {result['preset'] * 1e3:7.3f} ms, plain instance {result['plain'] * 1e3:7.3f} ms,"
            f" difference {(result['preset'] - result['plain']) * 1e3:6.3f} ms",
            f"{kind}: ratio preset/plain {result['ratio']:.3f} (median of the blocks' ratios; blocks ranged "
            f"{result['ratio_low']:.3f} to {result['ratio_high']:.3f})",
        ]
    print("\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "construction.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
