"""The resume matrix (``benchmarks/results/resume_matrix.json``, real runs): the guards agree with every cell, and a
small real sample, run again here, agrees with the guards and with the recorded facts."""

from __future__ import annotations

import dataclasses
import functools
import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest

from lightning_presets.checkpoints import CheckpointFacts, read_checkpoint
from lightning_presets.core.context import Context
from lightning_presets.core.rules import run_rules
from lightning_presets.guards.resume import RESUME_RULES, Resume, command_line, conversion_for

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_resume_matrix as bench  # noqa: E402

MATRIX = json.loads((ROOT / "benchmarks" / "results" / "resume_matrix.json").read_text())
PRESETS = [strategy for strategy in bench.STRATEGIES if strategy != "ddp"]  # Lightning's own ddp has no guards


@functools.cache
def job(strategy: str, devices: int) -> Context:
    """The context the preset's guards see in ``Trainer(strategy=..., accelerator="cpu", devices=...)``."""
    from lightning.pytorch import Trainer

    context = Trainer(strategy=strategy, accelerator="cpu", devices=devices, logger=False).strategy._lp_context
    assert context is not None
    return context


def recorded(facts: dict[str, Any]) -> CheckpointFacts:
    """The facts as JSON recorded them (lists) back into the frozen dataclass (tuples)."""
    return CheckpointFacts(**{key: tuple(value) if isinstance(value, list) else value for key, value in facts.items()})


def refused(checkpoint: CheckpointFacts, strategy: str, devices: int) -> list[str]:
    """The codes of the resume rules that refuse the checkpoint for ``fit(ckpt_path=...)``."""
    state = Resume(path=checkpoint.path, checkpoint=checkpoint)
    findings = run_rules(RESUME_RULES, "resume", job(strategy, devices), state)
    return [finding.code for finding in findings if finding.severity == "error"]


def test_the_matrix_covers_every_pair_from_real_runs() -> None:
    names = {bench._name(strategy, devices) for strategy in bench.STRATEGIES for devices in bench.WORLD_SIZES}
    assert set(MATRIX["writers"]) == names
    assert {(cell["writer"], cell["reader"]) for cell in MATRIX["cells"]} == {(w, r) for w in names for r in names}
    assert all(not writer.get("error") for writer in MATRIX["writers"].values())
    assert MATRIX["environment"]["torch"]
    assert MATRIX["environment"]["lightning"]


def test_the_loss_comparison_detects_a_lost_optimizer_state() -> None:
    control = MATRIX["control"]
    assert control["error"] is None
    assert control["max_relative_loss_difference"] > 100 * MATRIX["settings"]["tolerance"], control


@pytest.mark.parametrize("cell", MATRIX["cells"], ids=lambda cell: f"{cell['writer']}->{cell['reader']}")
def test_every_recorded_cell_agrees_with_the_guards(cell: dict[str, Any]) -> None:
    if cell["reader_strategy"] not in PRESETS:
        return  # Lightning's own strategy: its outcome is recorded, nothing guards it
    facts = recorded(MATRIX["writers"][cell["writer"]]["facts"])
    codes = refused(facts, cell["reader_strategy"], cell["reader_devices"])
    assert bool(codes) == (cell["outcome"] != "resumes"), (codes, cell["outcome"], cell["error"])
    if codes:
        conversion = cell["conversion"]
        assert conversion["ran"], conversion
        assert conversion["outcome"] == "resumes", conversion


def named_commands(facts: CheckpointFacts, strategy: str, devices: int) -> list[str]:
    """The command lines (without the interpreter) of the conversion the first refusal of ``facts`` names today."""
    state = Resume(path=facts.path, checkpoint=facts)
    (code, *_) = refused(facts, strategy, devices)
    conversion = conversion_for(code, job(strategy, devices), state)
    assert conversion is not None, code
    return [shlex.join(command_line(step, "python")[1:]) for step in conversion.steps]


def test_every_conversion_the_matrix_ran_is_the_line_its_hint_names() -> None:
    """Each refused cell ran its hint's command lines verbatim (the recorded hint quotes them), and the guards name
    the same lines today: a hint that changes its command without the matrix rerun fails here."""
    ran = [cell for cell in MATRIX["cells"] if cell.get("conversion", {}).get("commands")]
    assert ran
    for cell in ran:
        commands = [each["command"] for each in cell["conversion"]["commands"]]
        assert all(f"`python {each}`" in cell["hint"] for each in commands), cell
        facts = recorded(MATRIX["writers"][cell["writer"]]["facts"])  # its path relative to the run's folder
        where = cell["hint"].index(f"/{facts.path} ")  # the run's folder, as the hint quotes the checkpoint
        work = cell["hint"][: where + 1].rpartition(" ")[2].lstrip("`'")
        facts = dataclasses.replace(facts, path=f"{work}{facts.path}")
        assert named_commands(facts, cell["reader_strategy"], cell["reader_devices"]) == commands, cell


def test_the_agreement_check_can_fail() -> None:
    facts = recorded(MATRIX["writers"]["fsdp2-2"]["facts"])
    assert refused(facts, "ddp_static_graph", 2) == ["LP801"]
    assert refused(dataclasses.replace(facts, format="file"), "ddp_static_graph", 2) == []


@pytest.mark.distributed
def test_a_real_sample_agrees_with_the_matrix(tmp_path: Path) -> None:
    """fsdp2 on 2 processes saves; ddp_static_graph on 2 processes is refused on every rank before loading;
    tp2d_hybrid on 1 process resumes it with the uninterrupted run's losses; the facts match the recorded ones."""
    path = tmp_path / "fsdp2-2.ckpt"
    saved, _ = bench.run(["save", "--strategy", "fsdp2", "--devices", "2", "--out", str(path)])
    assert saved["error"] is None, saved
    assert dataclasses.replace(read_checkpoint(path), path=path.name) == recorded(MATRIX["writers"]["fsdp2-2"]["facts"])
    arguments = ["resume", "--strategy", "ddp_static_graph", "--devices", "2", "--ckpt", str(path)]
    ranks, _ = bench.run_ranks(arguments, guards=True)
    assert sorted(report["rank"] for report in ranks) == [0, 1]
    assert all(report["error"]["codes"] == ["LP801"] and report["losses"] == {} for report in ranks), ranks
    resumed, _ = bench.run(["resume", "--strategy", "tp2d_hybrid", "--devices", "1", "--ckpt", str(path)], guards=True)
    assert bench._outcome(resumed, saved["losses"])[0] == "resumes", resumed
