"""Real DeepSpeed and FSDP1 checkpoints on GPUs: what Lightning does with them, what the resume guards say.

    python benchmarks/gpu/resume_checks.py [--only NAME,NAME] [--budget 300] [--out DIR]

**Prepared, not run yet**: it was written where there is no GPU. DeepSpeed and FSDP1 (``FSDPStrategy``) save only on
CUDA, so the CPU tests build their checkpoints from the documented layout (``tests/scripts/checkpoint_layouts.py``);
this script writes real ones and checks each claim the resume rules make about them:

- ``deepspeed_layout``: ``deepspeed_zero2_offload`` saves on N GPUs (N = 2 when 2 are visible, else 1); the reader's
  facts (format, ZeRO stage, ``dp_world_size``, one shard per rank, the ``latest`` tag) match what the CPU tests build;
- ``deepspeed_same``: the same preset resumes it with the uninterrupted run's losses (the accepted neighbour);
- ``deepspeed_stage`` (LP803), ``deepspeed_into_fsdp2`` (LP801): with the resume guards off Lightning fails; with them
  on the refusal comes before anything loads;
- ``deepspeed_world`` (LP802, needs 2 GPUs): resumed on 1 GPU Lightning fails with DeepSpeed's "DP world size"
  error; the refusal's ``ds_to_universal`` step, run as its conversion holds it, and ``load_universal`` resume it;
- ``fsdp1_into_fsdp2`` and ``fsdp2_into_fsdp1`` (LP805): the Trainer's sharded layouts of the two FSDP strategies
  do not load into each other; the conversion the refusal names, its steps run, resumes each.

Every run is ``tests/scripts/resume_run.py --accelerator cuda`` (bf16-mixed) in its own process group with a timeout.
Writes ``resume_checks.json`` under ``$OUT`` when set, else under ``benchmarks/results/gpu/``. Exit code: 0 when every
check that ran passed, 1 when one failed, 2 without a CUDA device (nothing ran: not a pass).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "benchmarks" / "gpu"))

import bench_resume_matrix as bench  # noqa: E402

RUN_TIMEOUT_S = 150
EXIT_NO_GPU = 2


class Failed(Exception):
    """A check whose claim did not hold."""


class Checks:
    """The checks, sharing the checkpoints they write (in order: a later check reuses an earlier one's)."""

    def __init__(self, work: Path, gpus: int) -> None:
        self.work = work
        self.gpus = min(gpus, 2)
        self.saved: dict[str, dict[str, Any]] = {}

    def _run(self, mode: str, strategy: str, devices: int, path: Path, *extra: str, guards: bool) -> dict[str, Any]:
        flag = "--out" if mode == "save" else "--ckpt"
        arguments = [mode, "--strategy", strategy, "--devices", str(devices), flag, str(path), *extra]
        report, _ = bench.run([*arguments, "--accelerator", "cuda"], guards=guards, timeout_s=RUN_TIMEOUT_S)
        return report

    def save(self, strategy: str, devices: int) -> dict[str, Any]:
        name = f"{strategy}-{devices}"
        if name not in self.saved:
            path = self.work / f"{name}.ckpt"
            report = self._run("save", strategy, devices, path, guards=True)
            if report.get("error"):
                raise Failed(f"{name} could not save: {report['error']}")
            self.saved[name] = {"path": path, "losses": report["losses"], "facts": bench._facts(str(path))}
        return self.saved[name]

    def refused_then(self, code: str, saved: dict[str, Any], strategy: str, devices: int) -> dict[str, Any]:
        """Lightning fails without the guards; with them, ``code`` refuses before anything loads."""
        unguarded = self._run("resume", strategy, devices, saved["path"], guards=False)
        if not unguarded.get("error"):
            raise Failed(f"Lightning resumed it without the guards: {unguarded}")
        guarded = self._run("resume", strategy, devices, saved["path"], guards=True)
        codes = (guarded.get("error") or {}).get("codes", [])
        if code not in codes or guarded.get("losses"):
            raise Failed(f"the guards did not refuse it with {code} before training: {guarded}")
        return {"lightning_error": unguarded["error"], "refusal": codes}

    def converted(self, code: str, saved: dict[str, Any], strategy: str, devices: int, *extra: str) -> dict[str, Any]:
        """Run the steps of the conversion the refusal names (the object its hint renders), then resume from its
        result with the guards on (from the checkpoint itself when the job resumes it with a setting changed)."""
        from lightning.pytorch import Trainer

        from lightning_presets.guards.resume import resume_findings

        trainer = Trainer(strategy=strategy, accelerator="cuda", devices=devices, logger=False)
        findings = resume_findings(saved["path"], trainer.strategy._lp_context, strategy=trainer.strategy)
        refusal = next((f for f in findings if f.code == code), None)
        if refusal is None:
            raise Failed(f"no {code} for it here: {[f.code for f in findings]}")
        conversion = bench.conversion_of(code, str(saved["path"]), trainer.strategy)
        if conversion is None:
            raise Failed(f"{code} names no conversion: {refusal.hint}")
        for command in bench.command_lines(conversion):
            done = subprocess.run(
                command, cwd=self.work, env=bench._child_environment(True), text=True, capture_output=True
            )
            if done.returncode:
                raise Failed(f"the conversion {command[1:]} failed: {done.stderr.strip()[-500:]}")
        universal = "--load-universal" in extra  # LP802: the job loads the converted copy with load_universal set
        target = conversion.result if conversion.resumes or universal else str(saved["path"])
        report = self._run("resume", strategy, devices, Path(target), *extra, guards=True)
        outcome, difference = bench._outcome(report, saved["losses"])
        if outcome != "resumes":
            raise Failed(f"after the conversion: {outcome} ({difference}), {report.get('error')}")
        return {"hint": refusal.hint, "outcome": outcome, "max_relative_loss_difference": difference}

    # --- the checks ------------------------------------------------------------------------------------------

    def deepspeed_layout(self) -> dict[str, Any]:
        saved = self.save("deepspeed_zero2_offload", self.gpus)
        facts = saved["facts"]
        expected = {"format": "deepspeed", "zero_stage": 2, "data_parallel_size": self.gpus, "tag": "checkpoint"}
        found = {key: facts[key] for key in expected}
        files = sorted(os.listdir(saved["path"] / "checkpoint"))
        if found != expected or facts["zero_shards"] != self.gpus:
            raise Failed(f"facts {found}, {facts['zero_shards']} shards; expected {expected}; files {files}")
        return {"facts": facts, "files": files}

    def deepspeed_same(self) -> dict[str, Any]:
        saved = self.save("deepspeed_zero2_offload", self.gpus)
        report = self._run("resume", "deepspeed_zero2_offload", self.gpus, saved["path"], guards=True)
        outcome, difference = bench._outcome(report, saved["losses"])
        if outcome != "resumes":
            raise Failed(f"{outcome} ({difference}): {report.get('error')}")
        return {"max_relative_loss_difference": difference}

    def deepspeed_stage(self) -> dict[str, Any]:
        saved = self.save("deepspeed_zero2_offload", self.gpus)
        return self.refused_then("LP803", saved, "deepspeed_zero3_offload_ckpt", self.gpus)

    def deepspeed_into_fsdp2(self) -> dict[str, Any]:
        saved = self.save("deepspeed_zero2_offload", self.gpus)
        return self.refused_then("LP801", saved, "fsdp2", self.gpus)

    def deepspeed_world(self) -> dict[str, Any]:
        if self.gpus < 2:
            raise Skipped("needs 2 GPUs: a checkpoint of data-parallel size 2 resumed on 1")
        saved = self.save("deepspeed_zero2_offload", 2)
        result = self.refused_then("LP802", saved, "deepspeed_zero2_offload", 1)
        if "DP world size" not in result["lightning_error"]["message"]:
            raise Failed(f"Lightning failed otherwise than DeepSpeed's world-size check: {result['lightning_error']}")
        result["conversion"] = self.converted("LP802", saved, "deepspeed_zero2_offload", 1, "--load-universal")
        return result

    def fsdp1_into_fsdp2(self) -> dict[str, Any]:
        saved = self.save("fsdp_offload_ckpt", self.gpus)
        if saved["facts"]["model_key"] != "model":
            raise Failed(f"FSDPStrategy's sharded checkpoint keeps its weights elsewhere: {saved['facts']}")
        result = self.refused_then("LP805", saved, "fsdp2", self.gpus)
        result["conversion"] = self.converted("LP805", saved, "fsdp2", self.gpus)
        return result

    def fsdp2_into_fsdp1(self) -> dict[str, Any]:
        saved = self.save("fsdp2", self.gpus)
        result = self.refused_then("LP805", saved, "fsdp_offload_ckpt", self.gpus)
        result["conversion"] = self.converted("LP805", saved, "fsdp_offload_ckpt", self.gpus)
        return result


class Skipped(Exception):
    """A check that cannot run on this machine."""


ORDER = (
    "deepspeed_layout", "deepspeed_same", "deepspeed_stage", "deepspeed_into_fsdp2", "deepspeed_world",
    "fsdp1_into_fsdp2", "fsdp2_into_fsdp1",
)  # fmt: skip


def _environment() -> dict[str, Any]:
    import torch

    found: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": torch.cuda.device_count()}
    for module in ("lightning", "deepspeed"):
        try:
            found[module] = __import__(module).__version__
        except Exception as error:  # reported, the checks that need it fail with the reason
            found[module] = f"not importable: {type(error).__name__}: {error}"
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="comma-separated check names")
    parser.add_argument("--budget", type=float, default=300.0, help="seconds; no check starts with under 40 s left")
    parser.add_argument("--out", default=os.environ.get("OUT") or str(ROOT / "benchmarks" / "results" / "gpu"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    environment = _environment()
    records: list[dict[str, Any]] = []
    started = time.monotonic()
    if not environment["gpus"]:
        records = [{"name": name, "status": "skipped", "reason": "no CUDA device"} for name in ORDER]
    else:
        import gpu_checks  # the GPU harness: metadata for the entry points when lightning-presets is not installed

        metadata = gpu_checks.source_metadata(Path(tempfile.mkdtemp(prefix="lp-metadata-")))
        if metadata is not None:
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(metadata), os.environ.get("PYTHONPATH")]))
        checks = Checks(Path(tempfile.mkdtemp(prefix="lp-resume-gpu-")), environment["gpus"])
        for name in [each for each in ORDER if not args.only or each in args.only.split(",")]:
            left = args.budget - (time.monotonic() - started)
            record: dict[str, Any] = {"name": name}
            check: Callable[[], dict[str, Any]] = getattr(checks, name)
            if left < 40:
                record.update(status="skipped", reason=f"budget: {left:.0f} s left")
            else:
                begin = time.monotonic()
                try:
                    record.update(status="passed", details=check())
                except Skipped as why:
                    record.update(status="skipped", reason=str(why))
                except Failed as why:
                    record.update(status="failed", reason=str(why))
                except Exception as error:  # the harness itself: reported as a failure with its traceback
                    record.update(
                        status="failed", reason=f"{type(error).__name__}: {error}", trace=traceback.format_exc()
                    )
                record["duration_s"] = round(time.monotonic() - begin, 1)
            records.append(record)
            print(f"{name}: {record['status']} {record.get('reason', '')}", flush=True)
    summary = {status: sum(r["status"] == status for r in records) for status in ("passed", "failed", "skipped")}
    result = {"environment": environment, "checks": records, "summary": summary}
    (out / "resume_checks.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(json.dumps(summary))
    if not environment["gpus"]:
        return EXIT_NO_GPU
    return 1 if summary["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
