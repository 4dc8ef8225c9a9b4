"""``Trainer(strategy="fsdp_offload_ckpt")`` vs ``Trainer(strategy=FSDPStrategy(...))`` with the same arguments.

One process, simulated CUDA (8 devices, capability 9.0), ``precision="bf16-mixed"``; the two
constructions alternate after a warm-up, and the medians per construction are compared. The
difference is what the preset adds: its factory (argument checks, a fresh guarded instance) and the
guards that run while the Trainer is constructed. Writes ``benchmarks/results/construction.txt``.

    python benchmarks/bench_construction.py [--iterations 150]
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


def by_name() -> Any:
    return Trainer(strategy="fsdp_offload_ckpt", **COMMON)


def by_instance() -> Any:
    strategy = FSDPStrategy(sharding_strategy="FULL_SHARD", cpu_offload=True, state_dict_type="sharded")
    return Trainer(strategy=strategy, **COMMON)


def timed(make: Callable[[], Any]) -> float:
    start = time.perf_counter()
    make()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=150, help="constructions of each kind")
    args = parser.parse_args()
    logging.disable(logging.INFO)  # "GPU available: ..." on every Trainer
    warnings.filterwarnings("ignore")

    with simulated_cuda(8):
        preset, plain = by_name().strategy, by_instance().strategy
        if type(preset).__mro__[-len(type(plain).__mro__) :] != type(plain).__mro__:
            raise RuntimeError(f"{type(preset)} is not built on {type(plain)}")
        same = ("sharding_strategy", "cpu_offload", "_state_dict_type", "mixed_precision_config")
        for attribute in same:
            if repr(getattr(preset, attribute)) != repr(getattr(plain, attribute)):
                raise RuntimeError(f"the two strategies differ in {attribute}")
        for _ in range(10):
            by_name()
            by_instance()
        named, instance = [], []
        for _ in range(args.iterations):
            named.append(timed(by_name))
            instance.append(timed(by_instance))

    median_named, median_instance = statistics.median(named), statistics.median(instance)
    lines = [
        "bench_construction: Trainer(strategy='fsdp_offload_ckpt') vs Trainer(strategy=FSDPStrategy(...))",
        f"python {platform.python_version()}, torch {torch.__version__}, lightning {lightning.__version__}, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at the end",
        "simulated CUDA: 8 devices, capability (9, 0); precision='bf16-mixed'; FSDPStrategy(sharding_strategy="
        "'FULL_SHARD', cpu_offload=True, state_dict_type='sharded')",
        f"iterations: {args.iterations} of each, alternating, after 10 warm-up pairs",
        f"median per construction, preset by name: {median_named * 1e3:8.3f} ms",
        f"median per construction, plain instance: {median_instance * 1e3:8.3f} ms",
        f"difference of medians:                   {(median_named - median_instance) * 1e3:8.3f} ms",
        f"median of paired differences:            "
        f"{statistics.median(a - b for a, b in zip(named, instance, strict=True)) * 1e3:8.3f} ms",
        f"ratio preset/plain:                      {median_named / median_instance:8.3f}",
    ]
    print("\n".join(lines))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "construction.txt").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
