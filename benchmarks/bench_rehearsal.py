"""What ``check --model``'s rehearsal costs the user (issue 35 item 6): the wall time of ``lightning-presets check``
for a small model, with ``--model`` and without, each run as the user runs it (a fresh command), alternated, several
times; the figure is the median of each and their difference. The machine's load is printed with them (a shared
2-core machine inflates every figure; the difference is what the rehearsal and the model's plan add). Then the
rehearsal alone, in this process after its imports (what ``check --model`` adds once torch and Lightning are
imported): 2 ranks (2 children side by side) and 2 nodes x 2 (ranks 0, 2 and 3: 3 children), median of several.

    python benchmarks/bench_rehearsal.py [--runs 3]      # writes benchmarks/results/rehearsal.txt
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODEL = """
import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset
from lightning.pytorch import LightningModule


class Small(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)

    def train_dataloader(self):
        return DataLoader(TensorDataset(torch.randn(64, 64), torch.randint(0, 10, (64,))), batch_size=16)

    def val_dataloader(self):
        return self.train_dataloader()
"""
JOB = ["--strategy", "ddp_static_graph", "--accelerator", "cpu", "--devices", "2"]
NODES = [*JOB, "--num-nodes", "2"]


def once(folder: Path, model: bool, job: list[str] = JOB) -> float:
    command = [
        sys.executable,
        "-m",
        "lightning_presets",
        "check",
        *job,
        *(["--model", "bench_small:Small"] if model else []),
    ]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return seconds


def in_process(folder: Path, runs: int) -> dict[str, list[float]]:
    """The rehearsal alone (``rehearse``, its children forked from this process), after one untimed warm-up."""
    from lightning_presets.tools.check.rehearsal import rehearse

    sys.path.insert(0, str(folder))
    cwd = os.getcwd()
    os.chdir(folder)
    found: dict[str, list[float]] = {"2 ranks (0, 1)": [], "2 nodes x 2 (ranks 0, 2, 3)": []}
    try:
        rehearse("bench_small:Small", {}, "ddp", world_size=2)
        for _ in range(runs):
            for times, (world, nodes) in zip(found.values(), ((2, 1), (4, 2)), strict=True):
                started = time.perf_counter()
                result = rehearse("bench_small:Small", {}, "ddp", world_size=world, num_nodes=nodes)
                times.append(time.perf_counter() - started)
                if result.stage or result.limitation or result.disagreements:
                    raise SystemExit(f"the rehearsal did not complete: {result}")
    finally:
        os.chdir(cwd)
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        (folder / "bench_small.py").write_text(MODEL)
        once(folder, True)  # warm the file caches once, for both
        plain, model, nodes = [], [], []
        for _ in range(args.runs):
            plain.append(once(folder, False))
            model.append(once(folder, True))
            nodes.append(once(folder, True, NODES))
        alone = in_process(folder, args.runs)
    load = os.getloadavg()
    lines = [
        f"python benchmarks/bench_rehearsal.py --runs {args.runs}",
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}",
        f"job: lightning-presets check {' '.join(JOB)}  (a 19k-parameter model with its own dataloaders)",
        f"plain check:            median {statistics.median(plain):.2f} s  "
        f"(runs: {', '.join(f'{s:.2f}' for s in plain)})",
        f"check --model (rehearsal of ranks 0, 1; plan):  median {statistics.median(model):.2f} s  "
        f"(runs: {', '.join(f'{s:.2f}' for s in model)})",
        f"difference of the medians: {statistics.median(model) - statistics.median(plain):+.2f} s",
        f"check --model with --num-nodes 2 (ranks 0, 2, 3):  median {statistics.median(nodes):.2f} s  "
        f"(runs: {', '.join(f'{s:.2f}' for s in nodes)}; {statistics.median(nodes) - statistics.median(plain):+.2f} s)",
        *(
            f"the rehearsal alone, in the checking process after its imports, {name}: median "
            f"{statistics.median(each):.2f} s (runs: {', '.join(f'{s:.2f}' for s in each)})"
            for name, each in alone.items()
        ),
    ]
    text = "\n".join(lines) + "\n"
    (ROOT / "benchmarks" / "results" / "rehearsal.txt").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
