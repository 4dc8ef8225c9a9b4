"""The "What has been run" table (docs/evidence.md) is generated from the presets' claims; each claim names a test."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import evidence_table as evidence
import pytest
from errors_doc import builtin_presets

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = [claim for claim in evidence.claims(builtin_presets()) if claim.what or claim.test]
SIMULATION = ("cuda8", "simulated_cuda", "simulated_gpus", "SimulatedGPU")


@functools.cache
def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.name: node for node in tree.body if isinstance(node, ast.FunctionDef)}


def _marks(function: ast.FunctionDef) -> set[str]:
    return {ast.unparse(decorator) for decorator in function.decorator_list}


def test_the_evidence_page_table_is_the_generated_one() -> None:
    page = (ROOT / "docs" / "evidence.md").read_text(encoding="utf-8")
    assert evidence.replace(page, evidence.generate()) == page, (
        "run `python scripts/evidence_table.py --write docs/evidence.md`"
    )


def test_every_preset_has_a_row_per_claim_and_a_construction_claim() -> None:
    rows = evidence.claims(builtin_presets())
    assert len(rows) == 3 * len(builtin_presets())
    constructed = {claim.preset for claim in rows if claim.level.startswith("construction") and claim.what}
    assert constructed == {preset.name for preset in builtin_presets()}


@pytest.mark.parametrize("claim", CLAIMS, ids=lambda claim: f"{claim.preset}:{claim.level}")
def test_a_claim_names_the_test_that_makes_it(claim: evidence.Claim) -> None:
    assert claim.what, f"{claim.preset}: a test without a claim"
    assert claim.test, f"{claim.preset}: '{claim.level}' says what ran but names no test"
    file, _, name = claim.test.partition("::")
    path = ROOT / file
    assert path.is_file(), claim.test
    function = _functions(path).get(name)
    assert function is not None, f"{claim.test} does not exist"
    source = ast.unparse(function)
    if claim.level == "runtime on CPU":
        assert "pytest.mark.distributed" in _marks(function), f"{claim.test}: a runtime claim starts real processes"
    if "simulated CUDA" in claim.what:
        assert any(word in source for word in SIMULATION), f"{claim.test} does not simulate CUDA"


def test_a_claim_without_its_test_is_reported() -> None:
    """The check above can fail: a claim naming a test that is not there."""
    ghost = evidence.Claim("fsdp2", "runtime on CPU", "a run", "tests/test_fsdp2.py::test_that_does_not_exist")
    with pytest.raises(AssertionError, match="does not exist"):
        test_a_claim_names_the_test_that_makes_it(ghost)
    table = evidence.table([ghost, evidence.Claim("fsdp2", "runtime on GPU", "", "")])
    assert "| `fsdp2` | runtime on GPU | not run | - | - |" in table


def test_show_prints_the_claims(capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import run_cli

    code, out, _ = run_cli(capsys, "show", "fsdp2")
    assert code == 0
    assert "the losses equal ddp_static_graph's" in " ".join(out.split())
    assert "runtime_gpu" in out
    assert "tests/" not in out, "the package names no test file: docs/evidence.md's table does"
