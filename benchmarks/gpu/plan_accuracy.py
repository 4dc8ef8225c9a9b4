"""``plan --model`` against real ``Trainer.fit`` runs on GPUs: ``torch.cuda.max_memory_allocated`` per step.

    python benchmarks/gpu/plan_accuracy.py [--precision bf16-mixed] [--models gpt2,llama] [--presets fsdp2]

**Not run yet**: it needs a machine with 2 or more CUDA GPUs (NCCL refuses two ranks on one device). It runs
``benchmarks/bench_plan_accuracy.py`` with ``--accelerator cuda --kernels cuda``: the same seven models
(``tests/scripts/hf_models.py``) and four presets, planned as ``lightning-presets plan --model`` plans them for
CUDA (attention as CUDA's fused kernels keep it), trained for 2 steps by ``Trainer(strategy=PRESET,
accelerator="cuda", devices=2)`` (``tests/scripts/plan_fit_run.py --accelerator cuda``), whose rank 0 reads
``torch.cuda.max_memory_allocated()`` over the last step after ``reset_peak_memory_stats()`` at its start,
and the model states and activations as on CPU. Here the planned figure is the GPU's share (offloaded state
lives in host memory). Results: ``plan_accuracy_gpu.txt`` and ``.json`` under ``$OUT`` when set, else
``benchmarks/results/``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> int:
    if "-h" in sys.argv or "--help" in sys.argv:
        print(__doc__)
        print("usage: plan_accuracy.py [options of benchmarks/bench_plan_accuracy.py]")
        return 0
    import torch

    if torch.cuda.device_count() < 2:
        print(f"plan_accuracy: {torch.cuda.device_count()} CUDA device(s) visible; 2 are needed", file=sys.stderr)
        return 2
    output = os.environ.get("OUT") or str(ROOT / "benchmarks" / "results")
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_plan_accuracy.py"), "--accelerator", "cuda",
               "--kernels", "cuda", "--output", output, *sys.argv[1:]]  # fmt: skip
    return subprocess.run(command, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
