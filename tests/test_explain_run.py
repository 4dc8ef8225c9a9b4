"""The README's example, for real: a 2-rank gloo job under ``torchrun --log-dir`` where rank 1 raises and rank 0
times out waiting in a collective; ``explain`` on the folder names rank 1's error first and rank 0's timeout as its
consequence, as it does on the committed folder of the same run (tests/explain_logs/rank1_raises, the README's)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness import free_port
from lightning_presets.tools.explain import explain

ROOT = Path(__file__).resolve().parents[1]
JOB = ROOT / "tests" / "scripts" / "explain_rank1_raises.py"
COMMITTED = ROOT / "tests" / "explain_logs" / "rank1_raises"


def _story(folder: Path) -> list[tuple[str, str, list[int], bool, str]]:
    return [(f.code, f.category, f.ranks, f.first, f.role) for f in explain([str(folder)]).failures]


@pytest.mark.distributed
def test_rank_1_raises_rank_0_times_out_and_explain_names_rank_1_first(tmp_path: Path) -> None:
    # One fresh torchrun launch, not the harness's fork server: what is under test is torchrun's own log folder
    # (per-rank stdout/stderr files, torchelastic error files written by @record, the failure summary), which only
    # torchrun writes. The process group's timeout is 2 s, so the run takes seconds (most of it two interpreters
    # importing torch).
    logs = tmp_path / "rank1_raises"
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port", str(free_port()),
        "--log-dir", str(logs), "--redirects", "3", "--tee", "3", str(JOB),
    ]  # fmt: skip
    environment = {**os.environ, "EXPLAIN_JOB_TIMEOUT": "2", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, env=environment, cwd=tmp_path)
    assert done.returncode != 0, done.stdout + done.stderr
    (logs / "torchrun.out").write_text(done.stdout + done.stderr, encoding="utf-8")  # the console, as the README's
    assert sorted(p.name for p in logs.rglob("error.json")) == ["error.json", "error.json"], done.stderr[-3000:]

    story = _story(logs)
    assert story == [
        ("LP089", "unknown", [1], True, "cause"),
        ("LP046", "collective_desync", [0], False, "consequence"),
    ], done.stderr[-3000:]
    first = explain([str(logs)]).failures[0]
    assert "ValueError: the batch of rank 1 has 0 samples" in first.cause
    assert _story(COMMITTED) == story  # the README's folder tells the same story as a fresh run
