"""Every rule's documented examples execute as documented, and every error says how we know it fails.

``check_examples`` (``lightning_presets.tools.examples``) runs each rule's ``fails`` and ``fixed`` example under the
hardware, cluster and modules the rule declares; the severity policy (``docs/errors.md``) is checked as data.
"""

from __future__ import annotations

import re
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
_RUNTIME = re.compile(r"runtime: (tests/[\w/]+\.py)::(\w+)")


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
    evidence="runtime: tests/test_examples.py::test_the_engine_reports_examples_that_do_not_behave (by design)",
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


@pytest.mark.parametrize("entry", [e for e in _documented() if e.severity == "error"], ids=lambda e: e.code)
def test_every_error_names_its_evidence(entry: Any) -> None:
    kind, _, detail = entry.evidence.partition(": ")
    assert kind in EVIDENCE_KINDS, f"{entry.code} has no evidence: an error must say how we know it fails"
    assert len(detail) > 20, entry.code
    if kind == "source":
        assert re.search(r"\(.*\d", detail) or "README" in detail, f"{entry.code}: name the version that fails"
    found = _RUNTIME.match(entry.evidence)
    if kind == "runtime":
        assert found, f"{entry.code}: runtime evidence names tests/<file>.py::<test>"
        path, test = found.groups()
        assert (ROOT / path).is_file(), f"{entry.code}: {path} does not exist"
        assert re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.MULTILINE), f"{entry.code}: no {test}"


def test_the_evidence_check_can_fail() -> None:
    """A runtime evidence naming a test that does not exist is caught by the same pattern the check uses."""
    found = _RUNTIME.match("runtime: tests/field/test_reproductions.py::test_that_does_not_exist (nothing)")
    assert found is not None
    path, test = found.groups()
    assert not re.search(rf"^def {test}\(", (ROOT / path).read_text(), re.MULTILINE)


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
