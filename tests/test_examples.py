"""Every rule's documented examples execute as documented, and every error says how we know it fails.

``check_examples`` (``lightning_presets.tools.examples``) runs each rule's ``fails`` and ``fixed`` example under the
hardware, cluster and modules the rule declares; the severity policy (``docs/errors.md``) is checked as data.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from typing import Any

import errors_doc as _docs
import pytest

import lightning_presets
from lightning_presets.core.codes import EVIDENCE_KINDS, Setting
from lightning_presets.core.findings import UsageError
from lightning_presets.core.preset import Preset
from lightning_presets.core.rules import Problem, rule
from lightning_presets.registry.catalog import precision_catalog
from lightning_presets.tools import examples as _examples
from lightning_presets.tools.examples import check_examples, rules_of

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = sorted(preset.name for preset in _docs.builtin_presets())
_EVIDENCE = re.compile(r"(\w+): (.+)$", re.DOTALL)
_PROOF = re.compile(r"([\w/]+\.py)::(\w+)$")
PROOFS: dict[str, str] = _docs.references().PROOFS
GPU_CHECKS = ROOT / "benchmarks" / "gpu" / "gpu_checks.py"
NOT_EXECUTED = {
    "LP502": "a torch_xla wheel built for another torch release: neither this machine, CI nor the GPU machine has one "
    "(CI's torch_xla leg installs the matching pair)",
    "LP503": "XLA FSDP launched on CUDA devices needs a real torch_xla and a GPU; torch_xla is only installed in CI's "
    "CPU leg",
    "LP720": "a Lightning release outside the supported range: CI installs only the supported ones",
    "LP802": "DeepSpeed's ZeRO checkpoints are written and loaded on CUDA only; benchmarks/gpu/resume_checks.py "
    "(prepared) writes and resumes real ones, never run: no GPU was lent to the session that wrote it",
    "LP803": "as LP802: a ZeRO checkpoint of another stage needs CUDA; benchmarks/gpu/resume_checks.py (prepared)",
    "LP807": "as LP802: DeepSpeed's load of a tag folder needs CUDA; benchmarks/gpu/resume_checks.py (prepared)",
    "LP730": "the failure is a CUDA out-of-memory error; tests/test_plan_trace.py proves the traced peak equals a real "
    "step's on CPU, no GPU check limits the memory yet",
}
"""Errors with no executed proof yet, and why: each still cites the code that fails (``source: ...``). The list may
only shrink: an entry whose code gained executed evidence fails the test below."""


@pytest.mark.parametrize("name", BUILTIN)
def test_every_documented_example_of_every_builtin_preset_behaves(name: str) -> None:
    report = check_examples(name)
    preset = lightning_presets.get_preset(name) if name in lightning_presets.presets() else None
    rules = rules_of(preset or precision_catalog().presets[name])
    assert report.checked == 2 * len(rules)
    assert report.failures == ()
    assert report.ok


def test_the_builtin_catalog_is_covered() -> None:
    assert len(BUILTIN) == len(lightning_presets.presets()) + len(precision_catalog().presets)


# --- the engine itself: it reports what does not behave, for a third party's preset too ---------------------


@rule(
    "LP901", "error", "construction", "a rule whose failing example does not fail",
    fails='Trainer(strategy="ddp", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="ddp", accelerator="cpu", devices=2)',
    evidence="runtime: by design, the examples do not behave",
)  # fmt: skip
def never_fires(ctx: Any) -> Problem | None:
    return None


@rule(
    "LP902", "warning", "options", "a rule whose example is not valid code",
    fails="lightning_presets.strategy(",
    fixed="1 +",
    setting=Setting(gpus=0),
)  # fmt: skip
def broken_examples(options: Any) -> Problem | None:
    return None


def test_the_engine_reports_examples_that_do_not_behave(monkeypatch: pytest.MonkeyPatch) -> None:
    acme = Preset(
        name="acme_ddp",
        description="a third party's preset",
        family="ddp",
        strategy={"trainer": "DDPStrategy"},
        rules=(never_fires, broken_examples),
    )
    monkeypatch.setattr(_examples, "_find", lambda name: acme)
    report = check_examples("acme_ddp")
    assert report.checked == 4
    assert not report.ok
    assert report.failures[0] == "acme_ddp: LP901 fails example did not raise or warn LP901 (got none)"
    assert report.failures[1].startswith("acme_ddp: LP902 fails example raised SyntaxError")
    assert report.failures[2].startswith("acme_ddp: LP902 fixed example raised SyntaxError")
    assert len(report.failures) == 3


def test_an_unknown_preset_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="no strategy or precision preset is called 'fsdp_ofload'"):
        check_examples("fsdp_ofload")


def test_examples_never_leave_the_simulation_behind() -> None:
    import torch

    from lightning_presets.core import hardware

    check_examples("fsdp_hybrid_shard")
    check_examples("xla_fsdp_ckpt")
    assert hardware.current() is None
    assert torch.cuda.device_count() == 0
    assert "torch_xla" not in __import__("sys").modules


# --- the severity policy, as data -------------------------------------------------------------------------------


def _documented() -> list[Any]:
    return [*_docs._documented_codes(), *_docs._rule_entries()]


def _evidence_tests() -> dict[str, set[str]]:
    """``tests/PATH.py::test`` of every test marked ``proves``, with its codes (``tests/references.py`` reads them)."""
    return {node: set(codes) for node, codes in _docs.references().proving_tests().items()}


def _gpu_proofs() -> dict[str, tuple[str, ...]]:
    spec = importlib.util.spec_from_file_location("gpu_checks_for_evidence", GPU_CHECKS)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the file executes
    spec.loader.exec_module(module)
    return {check.name: check.proves for check in module.CHECKS}


def evidence_problem(
    code: str, evidence: str, proof: str, tests: dict[str, set[str]], gpu: dict[str, tuple[str, ...]]
) -> str:
    """Why ``evidence`` (the declaration's) and ``proof`` (its node id in ``tests/references.py``, derived from the
    ``proves`` marks) are not an executed proof of ``code``; empty when they are."""
    found = _EVIDENCE.match(evidence)
    if found is None or found.group(1) not in EVIDENCE_KINDS:
        return f"{code}: evidence must be 'runtime: what fails' or 'gpu: what fails', got {evidence!r}"
    kind, what = found.groups()
    if "::" in what or ".py" in what:
        return f"{code}: the declaration names a file ({what!r}): mark its test @pytest.mark.proves(...)"
    if len(what) < 15:
        return f"{code}: say in a few words what fails"
    named = _PROOF.match(proof)
    if named is None:
        return f"{code}: no test is marked @pytest.mark.proves({code!r}) (FILE.py::test), got {proof!r}"
    path, name = named.groups()
    if kind == "runtime":
        codes = tests.get(f"{path}::{name}")
        if codes is None:
            return f"{code}: {path}::{name} is not a test marked @pytest.mark.proves(...)"
        return "" if code in codes else f"{code}: {path}::{name} proves {sorted(codes)}, not {code}"
    if path != GPU_CHECKS.relative_to(ROOT).as_posix() or name not in gpu:
        return f"{code}: {path}::{name} is not a check of {GPU_CHECKS.relative_to(ROOT)}"
    return "" if code in gpu[name] else f"{code}: the GPU check {name} proves {list(gpu[name])}, not {code}"


_ERRORS = [e for e in _documented() if e.severity == "error"]


@pytest.mark.parametrize("entry", _ERRORS, ids=lambda e: e.code)
def test_every_error_names_an_executed_proof(entry: Any) -> None:
    problem = evidence_problem(entry.code, entry.evidence, PROOFS.get(entry.code, ""), _evidence_tests(), _gpu_proofs())
    if entry.code in NOT_EXECUTED:
        assert problem, f"{entry.code} has an executed proof now: remove it from NOT_EXECUTED"
        assert entry.evidence.startswith("source: "), f"{entry.code}: cite the code that fails"
        return
    assert problem == ""


def test_every_proof_proves_a_declared_error() -> None:
    """A ``proves`` mark names error codes: a code that became a warning or went leaves a stale proof."""
    errors = {entry.code for entry in _ERRORS}
    for test, codes in _evidence_tests().items():
        assert codes <= errors, f"{test} proves {sorted(codes - errors)}, which are not declared errors"
    for check, codes in _gpu_proofs().items():
        assert set(codes) <= errors, f"the GPU check {check} proves {sorted(set(codes) - errors)}"
    assert set(NOT_EXECUTED) <= errors


def test_the_evidence_check_can_fail() -> None:
    tests, gpu = _evidence_tests(), _gpu_proofs()
    test = PROOFS["LP101"]
    real = "runtime: FSDP raises on CPU"
    assert evidence_problem("LP101", real, test, tests, gpu) == ""
    assert "say in a few words" in evidence_problem("LP101", "runtime: x fails", test, tests, gpu)
    assert "proves ['LP101'], not LP104" in evidence_problem("LP104", real, test, tests, gpu)
    assert "no test is marked" in evidence_problem("LP101", real, "", tests, gpu)
    assert "names a file" in evidence_problem("LP101", f"runtime: {test} (FSDP raises on CPU)", test, tests, gpu)
    ghost = test.split("::")[0] + "::test_that_does_not_exist"
    assert "is not a test marked" in evidence_problem("LP101", real, ghost, tests, gpu)
    source = "source: lightning/fabric/strategies/fsdp.py, _init_sharding_strategy raises KeyError (lightning 2.6.6)"
    assert "evidence must be" in evidence_problem("LP104", source, test, tests, gpu)
    untested = "tests/test_fsdp2.py::test_fsdp2_trainer_fit_computes_the_losses_of_ddp"
    assert "is not a test marked" in evidence_problem("LP210", real, untested, tests, gpu)
    gpu_check = "benchmarks/gpu/gpu_checks.py::proof_lp412_deepspeed_closure"
    assert evidence_problem("LP412", "gpu: training_step never runs", gpu_check, tests, gpu) == ""
    assert "proves ['LP412'], not LP607" in evidence_problem(
        "LP607", "gpu: training_step never runs", gpu_check, tests, gpu
    )


def test_the_policy_opens_docs_errors_md() -> None:
    text = (ROOT / "docs" / "errors.md").read_text(encoding="utf-8")
    head = text.split("\n## Codes\n")[0]
    assert "## Severity policy" in head
    assert "would fail, hang, or train silently wrong" in head
    assert "A false rejection is worse than a miss" in head
    assert text.count("How we know: ") == sum(1 for e in _documented() if e.evidence)


@pytest.mark.parametrize("name", ["fsdp_hybrid_shard", "deepspeed_zero2_offload", "fp8-torchao"])
def test_constructing_every_example_creates_no_cuda_context(forbid_cuda_init: list[str], name: str) -> None:
    _examples.run_example.cache_clear()  # construct for real under the guard, not from the cache
    assert check_examples(name).ok
    assert forbid_cuda_init == []
