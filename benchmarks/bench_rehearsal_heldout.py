"""Held-out set of ``check --model`` (issue 35, item 9): real set-up and first-step failures from public threads, of
classes the project had no rule for, and legal configurations; see ``benchmarks/rehearsal_heldout/cases.py``.

Each case is checked with ``run_check`` (the job on its simulated hardware, ``--model`` the thread's model). A
misconfiguration is *caught* when the check reports an error; a legal configuration is *refused* when it does.
``--verify`` first runs every case for real (one CPU process, ``Trainer.fit`` for one step with one validation batch)
and says whether the thread's failure happens: the expected outcomes are confirmed by execution, not assumed (the
DeepSpeed cases need a GPU for a real run and say so).

    python benchmarks/bench_rehearsal_heldout.py --verify --out rehearsal_heldout_first_contact.txt
    python benchmarks/bench_rehearsal_heldout.py --out rehearsal_heldout.txt
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
HERE = ROOT / "benchmarks" / "rehearsal_heldout"
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(HERE))

from cases import LEGAL, MISCONFIGURATIONS, Case  # noqa: E402

MODULE = "rehearsal_models"


def verify(case: Case) -> str:
    """Run the case for real on one CPU process; the exception it ends with, or ``ran``."""
    if case.job.get("strategy", "").startswith("deepspeed"):
        return "not run (DeepSpeed needs a GPU)"
    import logging

    import rehearsal_models
    from lightning.pytorch import Trainer

    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    model = getattr(rehearsal_models, case.model)()
    trainer = Trainer(accelerator="cpu", devices=1, max_steps=1, limit_val_batches=1, num_sanity_val_steps=1,
                      logger=False, enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      **case.real)  # fmt: skip
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer.fit(model)
    except Exception as error:
        return f"{type(error).__name__}: {str(error).strip().splitlines()[0][:160] if str(error).strip() else ''}"
    return "ran"


def check(case: Case) -> dict[str, Any]:
    from lightning_presets.core.findings import UsageError
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    started = time.perf_counter()
    request = CheckRequest(arguments=dict(case.job), gpus=case.gpus, model=f"{MODULE}:{case.model}")
    try:
        report = run_check(request)
    except UsageError as error:
        return {"usage_error": str(error), "seconds": round(time.perf_counter() - started, 2)}
    except Exception as error:  # a crash of the package: reported
        return {"crash": "".join(traceback.format_exception(error)[-3:]),
                "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip
    findings = [{"code": each.finding.code, "severity": each.finding.severity, "message": each.finding.message}
                for each in report.reported]  # fmt: skip
    return {
        "findings": findings,
        "notes": list(report.request.notes),
        "seconds": round(time.perf_counter() - started, 2),
    }


def judge(case: Case, result: dict[str, Any]) -> str:
    errors = [each for each in result.get("findings", ()) if each["severity"] == "error"]
    if case.expected == "flag":
        return ("stale, " if case.stale else "") + ("caught" if errors else "missed")
    return "refused" if errors or "crash" in result else "accepted"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--verify", action="store_true", help="run each case for real first (one CPU process)")
    parser.add_argument("--out", default="rehearsal_heldout.txt")
    parser.add_argument("--only", nargs="*")
    args = parser.parse_args(argv)
    os.chdir(HERE)  # --model imports from the current directory
    cases = [each for each in (*MISCONFIGURATIONS, *LEGAL) if not args.only or each.id in args.only]
    started = time.perf_counter()
    records = []
    for case in cases:
        record: dict[str, Any] = {"id": case.id, "source": case.source, "expected": case.expected,
                                  "model": case.model, "job": case.job, "stage": case.stage}  # fmt: skip
        if args.verify:
            record["real_run"] = verify(case)
        record["check"] = check(case)
        record["verdict"] = judge(case, record["check"])
        records.append(record)
        print(case.id, record["verdict"], record.get("real_run", ""), flush=True)
    flags = [r for r in records if r["expected"] == "flag" and not r["verdict"].startswith("stale")]
    stale = [r for r in records if r["verdict"].startswith("stale")]
    legal = [r for r in records if r["expected"] == "accept"]
    caught = sum(r["verdict"] == "caught" for r in flags)
    refused = sum(r["verdict"] == "refused" for r in legal)
    lines = [
        f"python benchmarks/bench_rehearsal_heldout.py {' '.join(argv if argv is not None else sys.argv[1:])}",
        f"{len(flags)} misconfigurations that fail for real: {caught} caught "
        f"({100 * caught / max(len(flags), 1):.0f} %)"
        f" ({len(stale)} stale, counted apart); "
        f"{len(legal)} legal configurations: {refused} refused; {time.perf_counter() - started:.0f} s in all",
        "",
    ]
    for r in records:
        errors = [
            f"{f['code']}: {f['message'][:150]}" for f in r["check"].get("findings", ()) if f["severity"] == "error"
        ]
        other = r["check"].get("usage_error") or r["check"].get("crash")
        lines.append(f"{r['id']} {r['verdict']:<8} expected {r['expected']:<6} {r['model']} ({r['stage'] or 'legal'}) "
                     f"{r['source']}")  # fmt: skip
        if r["verdict"].startswith("stale"):
            lines.append(f"    stale: {next(c.stale for c in cases if c.id == r['id'])}")
        if "real_run" in r:
            lines.append(f"    real run (1 CPU process): {r['real_run']}")
        lines += [f"    check error {each}" for each in errors]
        if other:
            lines.append(f"    check: {other.strip()[:300]}")
    text = "\n".join(lines) + "\n"
    (RESULTS / args.out).write_text(text)
    (RESULTS / Path(args.out).with_suffix(".json").name).write_text(json.dumps(records, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
