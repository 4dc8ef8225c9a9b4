"""A differential sweep of the guards against real runs: what they refuse that trains, and what they let through
that fails.

Each sampled configuration (a preset that trains on CPU × Trainer arguments × overrides × model and loop; see
``sweep/space.py``) is asked of the guards (``Trainer(...)`` and a dry ``fit`` with the guards on, and
``lightning-presets check`` without and with ``--model``: the job's own module, where what only a training step
reveals, such as a parameter DDP waits for, is decided), then run for real with every guard off
(``LIGHTNING_PRESETS_SKIP=all``): a 2-process gloo ``Trainer.fit`` of 3 steps with a timeout, classified against a
single-process plain-Lightning reference as ``trains``, ``crashes``, ``hangs`` or ``trains_wrong``
(``sweep/classify.py``). Writes ``benchmarks/results/guard_sweep.json``: ``runs``, ``false_rejections`` (a guard
error, the run trains), ``missed_failures`` (no guard error, the run crashes, hangs or trains wrong) and
``missed_warnings`` (the run trains what the reference trains but silently without a setting it asked for, such as
offload or a DDP flag, and no guard warned: legal, so the severity policy owes a warning, not an error).

    python benchmarks/bench_guard_sweep.py --sample 300 --seed 0
    python benchmarks/bench_guard_sweep.py --preset ddp_static_graph --sample 10 --out /tmp/sweep.json
    python benchmarks/bench_guard_sweep.py --sample 300 --seed 0 --update --only tp2d_hybrid-005

``--update`` keeps the recorded runs (their outcome does not depend on the guards, which they run without), gives each
the current guards' verdicts, and repeats for real only the ``--only`` ids.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # benchmarks/, for `sweep`

from sweep import classify, runner, space

RESULT = Path(__file__).resolve().parent / "results" / "guard_sweep.json"
SCHEMA = "lightning-presets/guard-sweep"
METHOD = {
    "run": "guards off (LIGHTNING_PRESETS_SKIP=all); Trainer(accelerator='cpu', max_steps=3, ...).fit on 2 "
    "processes (gloo), started like torchrun (LOCAL_RANK/MASTER_PORT) from a fork server that imported torch and "
    "Lightning once (--launch lightning: Lightning's own launcher instead); 4 samples per rank per batch",
    "reference": "plain Lightning, one process, no strategy, same Trainer arguments, seed and initial weights, the "
    "global batch of the run's data-parallel ranks in the order of Lightning's distributed sampler; BatchNorm over "
    "each rank's share unless sync_batchnorm; precision preset bf16-fp32-reduce as precision='bf16-mixed'",
    "outcomes": "crashes: a rank raised or died (its error's last line; the first rank's own error, not a peer's "
    "disconnect), or Lightning raised in Trainer(...) with the guards off (stage 'construction'); hangs: no result "
    "before the timeout; trains_wrong: a difference from the reference beyond the tolerance (samples per batch, "
    "mean loss per batch, norm of the gradients each optimizer step applied, learning rates, optimizer steps, "
    "validation, dtypes and modes, final parameters) or a requested setting missing from what really trained "
    "(DDP flags and communication hook, SyncBatchNorm, the preset's offload and checkpointing, the mesh); trains: "
    "none of these",
    "tolerances": {tol.name: {**tol.limits(), "why": tol.why} for tol in classify.TOLERANCES},
    "verdict": "guards on: lightning_presets.strategy(...) when overridden, Trainer(...), then fit under the "
    "package's dry run (trainer, model and setup stages on the real module); PresetConfigError codes are errors, "
    "PresetWarning codes warnings; `check` is run_check on the same arguments (no model), `check_model` the same "
    "with model='sweep_worker:check_model' (the job's module, one training step under fake tensors)",
    "judgement": runner.judge.__doc__,
}


def _environment(options: runner.Options) -> dict[str, Any]:
    import lightning
    import torch

    import lightning_presets

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "lightning_presets": lightning_presets.__version__,
        "cpus": os.cpu_count(),
        "launch": options.launch,
        "timeout_s": options.timeout,
    }


def sweep(
    configs: list[dict[str, Any]], options: runner.Options, jobs: int = 1, log: Any = None
) -> list[dict[str, Any]]:
    """Run every configuration (``jobs`` at a time); the records in the order of ``configs``."""
    records: list[dict[str, Any] | None] = [None] * len(configs)
    cache = runner.References()

    def one(index: int) -> None:
        record = runner.run(configs[index], options, cache)
        records[index] = record
        if log is not None:
            judged = runner.judge(record) or ""
            print(f"{index + 1:4d}/{len(configs)} {record['id']:24s} {record['outcome']:12s} "
                  f"errors={','.join(record['verdict']['errors']) or '-':14s} {judged:24s} {record['seconds']:5.1f}s  "
                  f"{record['detail'][:110]}", file=log, flush=True)  # fmt: skip

    with cache, ThreadPoolExecutor(max_workers=jobs) as pool:
        list(pool.map(one, range(len(configs))))
    return [record for record in records if record is not None]


def report(records: list[dict[str, Any]], configs: list[dict[str, Any]], command: str, seconds: float,
           options: runner.Options) -> dict[str, Any]:  # fmt: skip
    judged: dict[str, list[dict[str, Any]]] = {}
    for record in records:
        kind = runner.judge(record)
        if kind is not None:
            judged.setdefault(kind, []).append(_entry(record))
    disagreements = [
        {"id": r["id"], "call": r["call"], "api": r["verdict"]["errors"], "check": r["check"]["errors"]}
        for r in records
        if _check_disagrees(r)
    ]
    per_run = [r["seconds"] for r in records]
    return {
        "schema": SCHEMA,
        "schema_version": 1,
        "command": command,
        "environment": _environment(options),
        "method": METHOD,
        "summary": {
            "runs": len(records),
            "outcomes": dict(Counter(r["outcome"] for r in records)),
            "guard_errors": sum(bool(r["verdict"]["errors"]) for r in records),
            "check_model_errors": sum(bool(r.get("check_model", {}).get("errors")) for r in records),
            "false_rejections": len(judged.get("false_rejection", [])),
            "missed_failures": len(judged.get("missed_failure", [])),
            "missed_warnings": len(judged.get("missed_warning", [])),
            "plain_lightning_failures": len(judged.get("plain_lightning_failure", [])),
            "check_disagreements": len(disagreements),
            "harness_errors": [r["id"] for r in records if r["outcome"] == runner.HARNESS_ERROR],
            "check_model_not_run": [r["id"] for r in records if _not_run(r.get("check_model", {}))],
            "seconds": round(seconds, 1),
            "median_seconds_per_run": round(statistics.median(per_run), 2) if per_run else None,
        },
        "numerics": numerics(records),
        "groups": {kind: groups(entries) for kind, entries in sorted(judged.items())},
        "false_rejections": judged.get("false_rejection", []),
        "missed_failures": judged.get("missed_failure", []),
        "missed_warnings": judged.get("missed_warning", []),
        "plain_lightning_failures": judged.get("plain_lightning_failure", []),
        "check_disagreements": disagreements,
        "coverage": space.coverage(configs),
        "runs": [_without_messages(record) for record in records],
    }


def groups(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Judged entries grouped by preset, guard error codes and what happened (a crash's error with its numbers and
    paths cut, or a wrong run's first reason), most frequent first: one line per work item."""
    table: dict[tuple[str, str, str], list[str]] = {}
    for entry in entries:
        what = re.sub(r"\[.*|\b\d[\d.e+-]*|\(.*", "…", entry["detail"])[:120]
        codes = ",".join(entry["verdict"]["errors"]) or "-"
        table.setdefault((entry["config"]["preset"], codes, what), []).append(entry["id"])
    rows = [{"preset": preset, "guard_errors": codes, "what": what, "count": len(ids), "ids": ids}
            for (preset, codes, what), ids in table.items()]  # fmt: skip
    return sorted(rows, key=lambda row: (-row["count"], row["preset"]))


def numerics(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per tolerance class: the tolerance, the largest deviation among the runs that trained, and the smallest
    deviation that exceeded it: how far the tolerances sit from both sides."""
    table: dict[str, Any] = {}
    for tol in classify.TOLERANCES:
        mine = [r for r in records if r.get("measures", {}).get("tolerance") == tol.name]
        measures = [r["measures"] for r in mine]
        good = [r["measures"] for r in mine if r["outcome"] == "trains"]
        table[tol.name] = {
            "runs": len(measures),
            "tolerance": tol.limits(),
            "largest_when_trained": {key: max((m[key] for m in good), default=None) for key in tol.limits()},
            "smallest_beyond": {  # finite: a loss gone NaN is reported as such, not as a deviation
                key: min((m[key] for m in measures if limit < m.get(key, 0) < math.inf), default=None)
                for key, limit in tol.limits().items()
            },
        }
    return table


def _without_messages(record: dict[str, Any]) -> dict[str, Any]:
    """A run as listed in ``runs``: codes only (the messages are in the judged lists)."""
    slim = dict(record)
    slim["verdict"] = {key: value for key, value in record["verdict"].items() if key != "messages"}
    for key in ("check", "check_model"):
        if key in record:
            slim[key] = {name: value for name, value in record[key].items() if name != "messages"}
    return slim


def _not_run(check: dict[str, Any]) -> bool:
    """``check`` could not run at all (a usage error): it decided nothing, which must not read as a pass."""
    return (check.get("lightning_error") or "").startswith("check could not run")


def _check_disagrees(record: dict[str, Any]) -> bool:
    """``check`` and the API disagree on whether the construction is rejected (the API's errors at ``fit`` and
    Lightning's own errors, which ``check`` reports as LP700, aside)."""
    api = record["verdict"]
    if api["lightning_error"] is not None:
        return False
    api_rejects = bool(api["errors"]) and api["stage"] == "construction"
    check_rejects = any(not code.startswith("LP7") for code in record["check"]["errors"])
    return api_rejects != check_rejects


def _entry(record: dict[str, Any]) -> dict[str, Any]:
    keep = ("id", "call", "outcome", "detail", "stage", "reasons", "verdict", "check_model", "config")
    return {key: record[key] for key in keep if key in record}


def update(path: Path, configs: list[dict[str, Any]], rerun: set[str], options: runner.Options,
           command: str) -> dict[str, Any]:  # fmt: skip
    """The result at ``path`` with every run's verdicts recomputed and the ``rerun`` ids run again for real."""
    before = json.loads(path.read_text())
    recorded = {record["id"]: record for record in before["runs"]}
    if set(recorded) != {config["id"] for config in configs}:
        raise SystemExit(f"{path} holds other configurations than this sample: pass its --sample/--seed/--preset")
    unknown = rerun - set(recorded)
    if unknown:
        raise SystemExit(f"--only {sorted(unknown)}: not in this sample")
    start = time.monotonic()
    records = sweep([config for config in configs if config["id"] in rerun], options, log=sys.stderr)
    fresh = {record["id"]: record for record in records}
    merged = []
    for index, config in enumerate(configs):
        record = fresh.get(config["id"]) or {**recorded[config["id"]], **runner.verdicts(config)}
        merged.append(record)
        print(f"{index + 1:4d}/{len(configs)} {config['id']:24s} verdict {','.join(record['verdict']['errors']) or '-'}"
              f"  check --model {','.join(record['check_model']['errors']) or '-'}  {runner.judge(record) or ''}",
              file=sys.stderr, flush=True)  # fmt: skip
    environment = before["environment"]
    recorded_options = runner.Options(timeout=environment["timeout_s"], launch=environment["launch"])
    result = report(merged, configs, f"{before['command']}; updated: {command}", before["summary"]["seconds"],
                    recorded_options)  # fmt: skip
    result["summary"]["update"] = {"reran": sorted(rerun), "verdicts_recomputed": len(configs) - len(fresh),
                                   "seconds": round(time.monotonic() - start, 1)}  # fmt: skip
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", type=int, default=60, help="configurations to draw (default 60)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--preset", action="append", choices=sorted(space.PRESETS), help="only these presets")
    parser.add_argument("--jobs", type=int, default=1, help="configurations run at the same time (default 1)")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a run counts as a hang")
    parser.add_argument("--launch", choices=("fork", "lightning"), default="fork")
    parser.add_argument("--only", action="append", help="run only these configuration ids of the sample")
    parser.add_argument("--keep", type=Path, help="keep each run's logs and results under this folder")
    parser.add_argument("--out", type=Path, default=RESULT)
    parser.add_argument("--update", action="store_true",
                        help="keep the runs recorded in --out (the same --sample, --seed and --preset): give every "
                        "one the current guards' verdicts (in this process; the runs have every guard off, so none "
                        "is repeated) and run again for real only the --only ids")  # fmt: skip
    args = parser.parse_args(argv)
    configs = space.sample(args.sample, args.seed, tuple(args.preset) if args.preset else None)
    command = "python benchmarks/bench_guard_sweep.py " + " ".join(argv if argv is not None else sys.argv[1:])
    options = runner.Options(timeout=args.timeout, launch=args.launch, keep=args.keep)
    if args.update:
        result = update(args.out, configs, set(args.only or ()), options, command)
    else:
        if args.only:
            configs = [config for config in configs if config["id"] in set(args.only)]
        start = time.monotonic()
        records = sweep(configs, options, args.jobs, log=sys.stderr)
        result = report(records, configs, command, time.monotonic() - start, options)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["summary"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
