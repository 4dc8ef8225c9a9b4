"""The resume matrix, from real runs: save with one strategy, resume with another, on CPU (gloo), 1 or 2 processes.

    python benchmarks/bench_resume_matrix.py [--only fsdp2,ddp] [--work DIR] [--continue]

For every writer (``ddp``, ``ddp_static_graph``, ``fsdp2``, ``fsdp2_offload_ckpt``, ``tp2d_hybrid`` × 1 and 2
processes) ``tests/scripts/resume_run.py save`` trains 5 steps uninterrupted and saves after step 3; for every reader
(the same 10) ``resume`` calls ``Trainer.fit(ckpt_path=...)`` with the resume guards switched off
(``LIGHTNING_PRESETS_SKIP``), so the outcome is Lightning's own: ``resumes`` (it loads, starts at step 3 and steps 4
and 5 have the losses of the uninterrupted run within ``TOLERANCE``), ``diverges`` (it loads but the losses differ)
or ``fails`` (an exception). Beside each outcome it records what the resume guards say for that checkpoint and job
(read here from the real files), and for a refused cell it runs the conversion the refusal names (the
``Conversion`` its hint renders, step by step: no text is parsed back) and resumes from its result. A control
resumes one checkpoint without its optimizer state: the losses must then differ.

Writes ``benchmarks/results/resume_matrix.json`` (every cell, the checkpoints' facts, the losses, the errors) and
``benchmarks/results/resume_matrix.md`` (the table for the README). ``tests/test_resume_matrix.py`` checks that the
guards agree with every recorded cell. One run at a time (each uses up to 2 processes); ``--continue`` keeps the
cells already in the JSON of an interrupted run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import platform
import shlex
import shutil
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lightning_presets.guards.resume import Conversion

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "scripts" / "resume_run.py"
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "tests"))  # the harness that forks the ranks
STRATEGIES = ("ddp", "ddp_static_graph", "fsdp2", "fsdp2_offload_ckpt", "tp2d_hybrid")
WORLD_SIZES = (1, 2)
SAVE_STEP, TOTAL_STEPS = 3, 5
TOLERANCE = 1e-4
"""A resumed step's loss equals the uninterrupted run's within ``TOLERANCE × max(1, |loss|)``."""
RUN_TIMEOUT_S = 300
SCHEMA = "lightning-presets/resume-matrix"


def _environment() -> dict[str, Any]:
    import lightning
    import torch

    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "cpus": os.cpu_count(),
        "platform": platform.platform(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _resume_rules_off() -> str:
    """``LIGHTNING_PRESETS_SKIP``'s value that switches every resume rule off (what happens is then Lightning's)."""
    from lightning_presets.guards.resume import RESUME_RULES

    return ",".join(each.code for each in RESUME_RULES)


def _child_environment(guards: bool) -> dict[str, str]:
    """A fresh interpreter's environment (the GPU check's commands): this checkout's package first."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH", "")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    for name in ("LOCAL_RANK", "NODE_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    if not guards:
        env["LIGHTNING_PRESETS_SKIP"] = _resume_rules_off()
    return env


def run(
    arguments: list[str], *, guards: bool = False, timeout_s: float = RUN_TIMEOUT_S
) -> tuple[dict[str, Any], float]:
    """One run of the worker script: (the first failed rank's report, else rank 0's; seconds)."""
    reports, seconds = run_ranks(arguments, guards=guards, timeout_s=timeout_s)
    failed = [each for each in reports if each.get("error")]
    return (failed or reports)[0], seconds


def run_ranks(
    arguments: list[str], *, guards: bool = False, timeout_s: float = RUN_TIMEOUT_S
) -> tuple[list[dict[str, Any]], float]:
    """One run of the worker script on ``--devices`` ranks forked by the tests' harness (``tests/harness.py``: each
    rank a process of its own session, killed with its session on timeout): (the ranks' reports, seconds).
    ``guards=False`` switches the resume rules off, so that what happens is Lightning's own doing."""
    from harness import run_job

    devices = int(arguments[arguments.index("--devices") + 1])
    env = {} if guards else {"LIGHTNING_PRESETS_SKIP": _resume_rules_off()}
    job = run_job(SCRIPT, *arguments, world_size=devices, env=env, cwd=ROOT, timeout=timeout_s)
    if job.outcome == "hung":
        report = {"error": {"type": "Timeout", "message": f"no result within {timeout_s} s", "codes": []}}
        return [report], job.seconds
    output = job.stdout
    reports = [json.loads(line[7:]) for line in output.splitlines() if line.startswith("RESULT ")]
    if not reports:
        tail = " | ".join(output.strip().splitlines()[-3:])[:500]
        reports = [{"error": {"type": "NoResult", "message": tail, "codes": []}}]
    return reports, job.seconds


def _name(strategy: str, devices: int) -> str:
    return f"{strategy}-{devices}"


def _guard(path: str, strategy: str, devices: int) -> tuple[list[dict[str, str]], Conversion | None] | None:
    """The resume guards' findings for loading ``path`` into ``Trainer(strategy=strategy, devices=devices)`` and the
    conversion the first refusal names; ``None`` for a strategy that is no preset (Lightning's own ``ddp``: nothing
    guards it)."""
    from lightning.pytorch import Trainer

    import lightning_presets
    from lightning_presets.guards.resume import resume_findings

    if strategy not in lightning_presets.presets():
        return None
    trainer = Trainer(strategy=strategy, accelerator="cpu", devices=devices, logger=False)
    findings = resume_findings(path, trainer.strategy._lp_context, strategy=trainer.strategy)
    refusal = next((finding for finding in findings if finding.severity == "error"), None)
    conversion = conversion_of(refusal.code, path, trainer.strategy) if refusal is not None else None
    return [finding.as_dict() for finding in findings], conversion


def conversion_of(code: str, path: str, strategy: Any) -> Conversion | None:
    """The conversion the refusal ``code`` names for loading ``path`` with ``strategy`` (a preset's Lightning
    strategy): the object its hint renders."""
    from lightning_presets.guards.resume import conversion_for, resume_facts

    state = resume_facts(path, strategy=strategy)
    return conversion_for(code, strategy._lp_context, state) if state is not None else None


def command_lines(conversion: Conversion) -> list[list[str]]:
    """The conversion's steps as argument vectors for this interpreter, in order."""
    from lightning_presets.guards.resume import command_line

    return [command_line(step, sys.executable) for step in conversion.steps]


def _compare(reference: dict[str, float], losses: dict[str, float]) -> float | None:
    steps = [str(step) for step in range(SAVE_STEP + 1, TOTAL_STEPS + 1)]
    if any(step not in losses or step not in reference for step in steps):
        return None
    return max(abs(losses[step] - reference[step]) / max(1.0, abs(reference[step])) for step in steps)


def _outcome(report: dict[str, Any], reference: dict[str, float]) -> tuple[str, float | None]:
    if report.get("error"):
        return "fails", None
    difference = _compare(reference, report.get("losses", {}))
    started = report.get("started_at") == [SAVE_STEP]
    if difference is not None and difference <= TOLERANCE and started:
        return "resumes", difference
    return "diverges", difference


def _facts(path: str) -> dict[str, Any]:
    from lightning_presets.checkpoints import read_checkpoint

    return dataclasses.asdict(read_checkpoint(path))


def save_all(writers: list[tuple[str, int]], work: Path, previous: dict[str, Any]) -> dict[str, dict[str, Any]]:
    saved = {}
    for strategy, devices in writers:
        name = _name(strategy, devices)
        path = work / f"{name}.ckpt"
        if name in previous and path.exists():  # kept from an interrupted run; its facts read again by this code
            saved[name] = {**previous[name], "facts": {**_facts(str(path)), "path": path.name}}
            continue
        report, seconds = run(["save", "--strategy", strategy, "--devices", str(devices), "--out", str(path)])
        entry = {"strategy": strategy, "devices": devices, "checkpoint": path.name, "seconds": round(seconds, 1)}
        if report.get("error"):
            entry["error"] = report["error"]
        else:
            entry.update(losses=report["losses"], facts={**_facts(str(path)), "path": path.name})
        saved[name] = entry
        print(f"saved {name}: {'failed' if report.get('error') else 'ok'} ({seconds:.0f} s)", flush=True)
    return saved


def resume_cell(writer: dict[str, Any], strategy: str, devices: int, work: Path) -> dict[str, Any]:
    path = str(work / writer["checkpoint"])
    report, seconds = run(["resume", "--strategy", strategy, "--devices", str(devices), "--ckpt", path])
    outcome, difference = _outcome(report, writer["losses"])
    cell: dict[str, Any] = {
        "writer": _name(writer["strategy"], writer["devices"]),
        "reader": _name(strategy, devices),
        "reader_strategy": strategy,
        "reader_devices": devices,
        "outcome": outcome,
        "max_relative_loss_difference": difference,
        "losses": report.get("losses", {}),
        "started_at": report.get("started_at"),
        "error": report.get("error"),
        "seconds": round(seconds, 1),
    }
    guarded = _guard(path, strategy, devices)
    findings, conversion = guarded if guarded is not None else (None, None)
    cell["guard"] = None if findings is None else [f["code"] for f in findings if f["severity"] == "error"]
    refusal = next((f for f in findings or () if f["severity"] == "error"), None)
    if refusal is not None:
        cell["hint"] = refusal["hint"]
        cell["conversion"] = convert(conversion, writer, strategy, devices, work)
    return cell


def convert(
    conversion: Conversion | None, writer: dict[str, Any], strategy: str, devices: int, work: Path
) -> dict[str, Any]:
    """Run the steps of the conversion a refusal names (the object its hint renders) on the checkpoint; resume from
    what they write."""
    if conversion is None or not conversion.resumes or not conversion.steps:
        return {"ran": False, "why": "the hint names no conversion to a checkpoint path"}
    from harness import run_command

    target = conversion.result
    commands = command_lines(conversion)

    results = []
    for command in commands:
        done = run_command(command, cwd=work)
        results.append({"command": shlex.join(command[1:]), "returncode": done.returncode})
        if done.returncode:
            results[-1]["stderr"] = done.stdout.strip().splitlines()[-1:]
            return {"ran": True, "commands": results, "outcome": "conversion failed"}
    path = str(work / target)
    report, seconds = run(["resume", "--strategy", strategy, "--devices", str(devices), "--ckpt", path], guards=True)
    outcome, difference = _outcome(report, writer["losses"])
    if os.path.isdir(path):
        shutil.rmtree(path)
    elif os.path.exists(path):
        os.remove(path)  # converted again for the next reader: each cell runs the hint it got
    return {
        "ran": True,
        "commands": results,
        "outcome": outcome,
        "max_relative_loss_difference": difference,
        "error": report.get("error"),
        "seconds": round(seconds, 1),
    }


def control(work: Path, writer: dict[str, Any]) -> dict[str, Any]:
    """The same resume without the optimizer state: the losses must differ by far more than ``TOLERANCE``."""
    path = str(work / writer["checkpoint"])
    strategy, devices = writer["strategy"], writer["devices"]
    report, _ = run(["resume", "--strategy", strategy, "--devices", str(devices), "--ckpt", path, "--weights-only"])
    return {
        "writer": _name(strategy, devices),
        "what": "the weights alone, a fresh optimizer (Adam): step 4 equal, step 5 not",
        "losses": report.get("losses", {}),
        "reference": {step: writer["losses"][step] for step in report.get("losses", {}) if step in writer["losses"]},
        "max_relative_loss_difference": _compare(writer["losses"], report.get("losses", {})),
        "error": report.get("error"),
    }


def markdown(data: dict[str, Any]) -> str:
    names = [_name(strategy, devices) for strategy in STRATEGIES for devices in WORLD_SIZES]
    cells = {(cell["writer"], cell["reader"]): cell for cell in data["cells"]}
    lines = [
        "Resume matrix: rows save (strategy-processes), columns resume with `Trainer.fit(ckpt_path=...)`, CPU, gloo "
        f"(torch {data['environment']['torch']}, Lightning {data['environment']['lightning']}).",
        "",
        "✓ Lightning resumes it and steps 4-5 have the uninterrupted run's losses; ✗ Lightning fails; "
        "LP8xx: the guard that refuses it before loading; → ✓: resumes after the conversion that refusal names.",
        "",
        "| saved by ↓ / resumed by → | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for writer in names:
        row = []
        for reader in names:
            cell = cells.get((writer, reader))
            if cell is None:
                row.append("")
                continue
            mark = {"resumes": "✓", "fails": "✗", "diverges": "≠"}[cell["outcome"]]
            codes = cell.get("guard")
            if codes:
                mark += " " + ",".join(codes)
                conversion = cell.get("conversion") or {}
                if conversion.get("outcome") == "resumes":
                    mark += " → ✓"
            elif codes is None and cell["outcome"] != "resumes":
                mark += " (no guard)"
            row.append(mark)
        lines.append(f"| {writer} | " + " | ".join(row) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated strategies (writers and readers)")
    parser.add_argument("--work", default="", help="where the checkpoints go (default: a temporary folder)")
    parser.add_argument("--output", default=str(RESULTS / "resume_matrix.json"))
    parser.add_argument("--continue", dest="resume", action="store_true", help="keep the cells already recorded")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "src"))
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # the guards' Trainers need no banner
    strategies = [s for s in STRATEGIES if not args.only or s in args.only.split(",")]
    pairs = [(strategy, devices) for strategy in strategies for devices in WORLD_SIZES]
    output = Path(args.output)
    previous = json.loads(output.read_text()) if args.resume and output.exists() else {}
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="lp-resume-matrix-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    data: dict[str, Any] = {
        "schema": SCHEMA,
        "version": 1,
        "command": shlex.join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "environment": _environment(),
        "settings": {"save_step": SAVE_STEP, "total_steps": TOTAL_STEPS, "tolerance": TOLERANCE},
    }
    data["writers"] = save_all(pairs, work, previous.get("writers", {}))
    done = {(cell["writer"], cell["reader"]): cell for cell in previous.get("cells", [])}
    cells = []
    for writer in data["writers"].values():
        if writer.get("error"):
            continue
        for strategy, devices in pairs:
            key = (_name(writer["strategy"], writer["devices"]), _name(strategy, devices))
            cell = done.get(key) or resume_cell(writer, strategy, devices, work)
            cells.append(cell)
            data["cells"] = cells
            output.write_text(json.dumps(data, indent=1) + "\n")  # progress survives an interruption
            print(f"{key[0]} -> {key[1]}: {cell['outcome']}, guard {cell['guard']} ({cell['seconds']} s)", flush=True)
    first = next((w for w in data["writers"].values() if not w.get("error")), None)
    data["control"] = previous.get("control") or (control(work, first) if first else None)
    outcomes = [cell["outcome"] for cell in cells]
    data["summary"] = {
        "cells": len(cells),
        **{outcome: outcomes.count(outcome) for outcome in ("resumes", "fails", "diverges")},
        "refused_by_guards": sum(bool(cell["guard"]) for cell in cells),
        "converted_and_resumed": sum((cell.get("conversion") or {}).get("outcome") == "resumes" for cell in cells),
        "wall_s": round(time.monotonic() - started + previous.get("summary", {}).get("wall_s", 0), 1),
    }
    if previous:
        data["continued_from"] = {"command": previous.get("command"), "date": previous["environment"].get("date")}
    output.write_text(json.dumps(data, indent=1) + "\n")
    output.with_suffix(".md").write_text(markdown(data))
    print(json.dumps(data["summary"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
