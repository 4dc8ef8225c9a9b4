"""``lightning-presets convert`` against torch's own consolidation, on a distributed checkpoint of about 1.5 GB.

    python benchmarks/bench_convert.py [--gigabytes 1.5] [--work DIR]

Writes a ``torch.distributed.checkpoint`` folder in the Trainer's layout (``state_dict``, an AdamW-shaped
``optimizer_0`` keyed by parameter names, Lightning's ``meta.pt``), then times, each in a fresh interpreter, torch's
``dcp_to_torch_save`` (the reference), ``convert`` without verification and ``convert`` as users run it (verified),
each run twice, alternating, keeping the faster; wall time and peak resident memory (``ru_maxrss`` of the child). The
figures are written to ``benchmarks/results/convert.txt``. The issue's bound: convert within 2× the reference's time
and peak memory.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "convert.txt"

_MAKE = """
import sys, torch, torch.distributed.checkpoint as dcp
folder, total = sys.argv[1], int(float(sys.argv[2]) * 2**30)
per = 4 * 1024 * 1024  # float32 elements of one 16 MiB tensor
count = max(1, total // (3 * per * 4))  # the weights and AdamW's two moments
weights = {f"model.layers.{i}.weight": torch.randn(1024, 4096) for i in range(count)}
state = {name: {"step": torch.tensor(3.0), "exp_avg": torch.randn_like(w), "exp_avg_sq": torch.rand_like(w)}
         for name, w in weights.items()}
groups = [{"lr": 1e-3, "params": list(weights)}]
dcp.save({"state_dict": weights, "optimizer_0": {"state": state, "param_groups": groups}}, checkpoint_id=folder,
         no_dist=True)
torch.save({"global_step": 3, "epoch": 0, "loops": {}, "callbacks": {}, "lr_schedulers": [],
            "pytorch-lightning_version": "2.6.6"}, folder + "/meta.pt")
"""

_TIMED = """
import json, resource, sys, time
started = time.perf_counter()
kind, source, destination = sys.argv[1:4]
if kind == "torch":
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save
    dcp_to_torch_save(source, destination)
else:
    from lightning_presets.tools.convert import convert
    convert(source, destination, verify_result=kind == "convert")
print(json.dumps({"seconds": time.perf_counter() - started,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def timed(kind: str, source: Path, destination: Path) -> dict[str, float]:
    if destination.exists():
        destination.unlink()
    result = subprocess.run([sys.executable, "-c", _TIMED, kind, str(source), str(destination)], capture_output=True,
                            text=True, check=True)  # fmt: skip
    figures: dict[str, float] = json.loads(result.stdout.strip().splitlines()[-1])
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gigabytes", type=float, default=1.5)
    parser.add_argument("--work", default="")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-convert-"))
    folder = work / "run.ckpt"
    shutil.rmtree(folder, ignore_errors=True)
    subprocess.run([sys.executable, "-c", _MAKE, str(folder), str(args.gigabytes)], check=True)
    size = sum(path.stat().st_size for path in folder.iterdir()) / 2**30
    from lightning_presets.checkpoints import read_checkpoint
    from lightning_presets.tools.convert import memory

    estimated = memory.checkpoint_bytes(read_checkpoint(folder)) or 0  # from .metadata, before loading
    runs: dict[str, list[dict[str, float]]] = {"torch": [], "convert --no-verify": [], "convert": []}
    for _ in range(2):
        for kind, name in (("torch", "torch"), ("unverified", "convert --no-verify"), ("convert", "convert")):
            runs[name].append(timed(kind, folder, work / f"{kind}.pt"))
    best = {name: min(each, key=lambda figures: figures["seconds"]) for name, each in runs.items()}
    reference = best["torch"]
    lines = [f"convert of a {size:.2f} GiB distributed checkpoint (Trainer layout, AdamW state), best of 2 each, "
             f"fresh interpreters; python {sys.version.split()[0]}"]  # fmt: skip
    for name, figures in best.items():
        lines.append(
            f"{name:22s} {figures['seconds']:7.1f} s ({figures['seconds'] / reference['seconds']:.2f}x)   "
            f"peak {figures['peak_mb']:8.0f} MB ({figures['peak_mb'] / reference['peak_mb']:.2f}x)"
        )
    mb = 2**20
    lines.append(
        f"convert's estimate before loading (from .metadata): checkpoint {estimated / mb:.0f} MB; needs "
        f"{estimated / mb:.0f} MB with --no-verify (measured peak {best['convert --no-verify']['peak_mb']:.0f} MB), "
        f"{2 * estimated / mb:.0f} MB verified (measured peak {best['convert']['peak_mb']:.0f} MB); the peaks include "
        "the interpreter's own resident memory"
    )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    RESULTS.write_text(text, encoding="utf-8")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
