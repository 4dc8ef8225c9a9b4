"""What the machine-against-build rules (LP120-LP125, ``guards.machine``) cost at ``Trainer`` construction.

    python benchmarks/bench_machine_build.py [--output benchmarks/results/machine_build.txt]

Three figures, medians of repeated runs in one process: (1) a ``Trainer(strategy="ddp_static_graph",
accelerator="cuda", devices=8)`` built on simulated H100s with a simulated CUDA 12.6 build and driver, with the rules
and with them skipped (``LIGHTNING_PRESETS_SKIP``), and the difference; (2) the rules alone on that construction's
context; (3) the rules on this machine's real path (NVML and the installed torch read, then cached), and the first,
uncached read of both. This machine has no NVIDIA driver: on a GPU node the first NVML read is the driver's own
``nvmlInit`` (shared with the capability read construction already does on CUDA, ``core.hardware``).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

ROUNDS = 25
CODES = "LP120,LP121,LP122,LP123,LP124,LP125"


def median_ms(run: Callable[[], object], rounds: int = ROUNDS) -> float:
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", type=Path)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    for name in ("lightning.pytorch", "lightning.fabric", "pytorch_lightning", "lightning_fabric"):
        logging.getLogger(name).setLevel(logging.ERROR)  # its "GPU available" lines at every construction
    import torch
    from lightning.pytorch import Trainer

    import lightning_presets  # noqa: F401  (registers the presets)
    from lightning_presets.core import hardware
    from lightning_presets.core.machine import Build
    from lightning_presets.core.rules import run_rules
    from lightning_presets.guards.machine import MACHINE_RULES
    from lightning_presets.inspection import machine
    from lightning_presets.tools.simulation import simulated_cuda

    start = time.perf_counter()
    machine.installed_build.cache_clear()
    machine.installed_build()
    cold_build = (time.perf_counter() - start) * 1e3
    start = time.perf_counter()
    hardware._read_nvml.cache_clear()
    hardware.nvml_gpus()
    cold_nvml = (time.perf_counter() - start) * 1e3

    build = Build("2.13.0+cu126", "12.6", ("sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"), True,
                  MappingProxyType({}))  # fmt: skip
    contexts = []

    def construct() -> None:
        trainer = Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8, logger=False,
                          enable_checkpointing=False)  # fmt: skip
        contexts.append(trainer.strategy._lp_context)

    with simulated_cuda(8, (9, 0)), machine.simulating_target(machine.SimulatedTarget((12, 2), build)):
        construct()
        with_rules, without = [], []
        for _ in range(3):  # interleaved, so that load on the machine weighs on both alike
            os.environ.pop("LIGHTNING_PRESETS_SKIP", None)
            with_rules.append(median_ms(construct, 9))
            os.environ["LIGHTNING_PRESETS_SKIP"] = CODES
            without.append(median_ms(construct, 9))
        os.environ.pop("LIGHTNING_PRESETS_SKIP", None)
        rules_simulated = median_ms(lambda: run_rules(MACHINE_RULES, "construction", contexts[-1]), 200)
    rules_real = median_ms(lambda: run_rules(MACHINE_RULES, "construction", contexts[-1]), 200)
    lines = [
        f"machine: {platform.machine()} {platform.processor() or ''}; python {platform.python_version()}; "
        f"torch {torch.__version__}; NVML read: {hardware.nvml_gpus() is not None}",
        f"Trainer(ddp_static_graph, cuda, devices=8) on simulated H100s, median of 3×9 interleaved: "
        f"{statistics.median(with_rules):.2f} ms with LP120-LP125, {statistics.median(without):.2f} ms skipped "
        f"(difference {statistics.median(with_rules) - statistics.median(without):+.2f} ms, within the noise)",
        f"the six rules alone on its context, simulated machine and target: {rules_simulated:.3f} ms (median of 200)",
        f"the six rules alone on this machine's real path (NVML and build cached): {rules_real:.3f} ms (median of 200)",
        f"first read, uncached: the installed torch's build {cold_build:.2f} ms; NVML {cold_nvml:.2f} ms (no driver)",
    ]
    text = "\n".join(lines) + "\n"
    sys.stdout.write(text)
    if args.output:
        args.output.write_text(text, encoding="utf-8")


if __name__ == "__main__":
    main()
