"""The strategy's set-up rehearsal (``tools/check/rehearsal/setup.py``): seconds and peak memory per family.

    python benchmarks/bench_rehearsal_setup.py [--output benchmarks/results/rehearsal_setup.txt]

Each case runs ``rehearse_setup`` (the strategy's set-up, the optimizers and one step, real CPU tensors, rank 0 of the
job's world) in a fresh child process, the way ``check --model``'s child runs it: the figure is the wall time of
that call alone (the child's imports of torch, Lightning and DeepSpeed are not counted: ``check`` forks its rehearsal
after them) and the child's peak resident memory (``ru_maxrss``). Cases: a 29k-parameter decoder under every family
on 8 ranks (tensor parallel on 2 nodes × 4), and a 92M-parameter decoder (just under the 100M parameters the
rehearsal runs with real tensors) under DDP and FSDP2 on 8 ranks and on 2 × 8.

Larger models (a 1.3B decoder, Llama-70B) are not rehearsed with real tensors: the child counts them under fake
tensors and says so; their wrapping and step under fake tensors at the real world size is ``plan``'s trace, which
``check --model`` runs for the memory verdict (timed in ``benchmarks/results/plan.txt``).
"""

from __future__ import annotations

import argparse
import json
import platform
import subprocess
import sys
import textwrap
import time
from importlib.metadata import version
from pathlib import Path

CHILD = textwrap.dedent(
    """
    import json, resource, sys, time, warnings
    warnings.simplefilter("ignore")
    import torch
    torch.set_num_threads(1)
    from lightning_presets.tools.plan import reference_models as rm
    from lightning_presets.tools.check.rehearsal.setup import SetupJob, rehearse_setup
    try:
        import deepspeed  # noqa: F401  (imported before the clock, as check's forked child has)
    except Exception:
        pass
    factory, strategy, devices, nodes = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    if factory == "decoder_92m":
        model = rm.DecoderModule(vocab=32_000, dim=768, heads=12, layers=6, sequence=512, batch=1)
    else:
        model = getattr(rm, factory)()
    numel = sum(p.numel() for p in model.parameters())
    started = time.perf_counter()
    records = rehearse_setup(model, SetupJob(strategy, {}, devices, nodes), {"precision": "bf16-mixed"})
    seconds = time.perf_counter() - started
    print("RESULT", json.dumps({"numel": numel, "seconds": seconds,
          "rss_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
          "records": [[r.outcome, r.name, r.exception] for r in records]}))
    """
)
CASES = (
    ("decoder_tiny", "ddp_static_graph", 8, 1),
    ("decoder_tiny", "ddp_bf16_compress", 8, 1),
    ("decoder_tiny", "fsdp2", 8, 1),
    ("decoder_tiny", "fsdp2_offload_ckpt", 8, 1),
    ("decoder_tiny", "tp2d_hybrid", 4, 2),
    ("decoder_tiny", "fsdp_grad_op", 8, 1),
    ("decoder_tiny", "deepspeed_zero2_offload", 8, 1),
    ("decoder_tiny", "deepspeed_zero3_offload_ckpt", 8, 1),
    ("decoder_92m", "ddp_static_graph", 8, 1),
    ("decoder_92m", "fsdp2", 8, 1),
    ("decoder_92m", "fsdp2", 8, 2),
)


def run(case: tuple[str, str, int, int]) -> dict[str, object]:
    factory, strategy, devices, nodes = case
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, factory, strategy, str(devices), str(nodes)],
                          capture_output=True, text=True, check=False, timeout=1200)  # fmt: skip
    wall = time.perf_counter() - started
    line = next((each for each in done.stdout.splitlines() if each.startswith("RESULT ")), None)
    if line is None:
        return {"case": case, "error": done.stderr[-2000:], "wall": wall}
    return {"case": case, "wall": wall, **json.loads(line[len("RESULT ") :])}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--output", default="benchmarks/results/rehearsal_setup.txt")
    args = parser.parse_args()
    lines = [f"bench_rehearsal_setup on {platform.node()} ({platform.processor() or platform.machine()}), "
             f"torch {version('torch')}, lightning {version('lightning')}, deepspeed "
             f"{version('deepspeed')}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
             "model | params | strategy | world | set-up rehearsal s | child peak RSS GiB | stages"]  # fmt: skip
    for case in CASES:
        result = run(case)
        factory, strategy, devices, nodes = case
        world = f"{nodes} x {devices}"
        if "error" in result:
            lines.append(f"{factory} | ? | {strategy} | {world} | failed | - | {str(result['error'])[-300:]}")
        else:
            records = result["records"]
            assert isinstance(records, list)
            stages = ", ".join(f"{name.split(' (')[0][:40]}: {outcome}" for outcome, name, _ in records)
            lines.append(f"{factory} | {result['numel']:,} | {strategy} | {world} | {result['seconds']:.2f} | "
                         f"{result['rss_gib']:.2f} | {stages}")  # fmt: skip
        print(lines[-1], flush=True)
    Path(args.output).write_text("\n".join(lines) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
