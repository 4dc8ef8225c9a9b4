"""Rules that need the model, before it exists: the Context's vocabulary they read, their conditional warnings at
construction and in ``check``, and ``check --model`` deciding them (FSDP1 included, on simulated CUDA)."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from lightning_presets import Context, PresetWarning
from lightning_presets.cli import main
from lightning_presets.core.rules import Problem, conditional_findings, rule
from lightning_presets.strategies import fsdp, model_parallel
from lightning_presets.tools.simulation import simulated_cuda

BASE = Context(
    preset="fsdp_offload_ckpt", target="trainer", kind="trainer", accelerator="cuda", devices_per_node=8,
    num_nodes=1, precision="bf16-mixed", precision_plugin="FSDPPrecision", cluster_environment="LightningEnvironment",
    family="fsdp",
)  # fmt: skip

MODELS = """
import torch
from torch import nn
from lightning.pytorch import LightningModule


class Plain(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
        self.example_input_array = torch.zeros(4, 32)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, index):
        return self(batch).sum()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())


class Clipper(Plain):
    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        self.trainer.model.clip_grad_norm_(gradient_clip_val)


class Configured(Plain):
    def configure_model(self):
        pass
"""


def with_arguments(**arguments: Any) -> Context:
    return dataclasses.replace(BASE, arguments=arguments)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({}, None),
        ({"gradient_clip_val": 0}, None),
        ({"gradient_clip_val": None, "gradient_clip_algorithm": "norm"}, None),
        ({"gradient_clip_val": True}, None),  # not a number Lightning clips with
        ({"gradient_clip_val": 1.0}, (1.0, "norm")),
        ({"gradient_clip_val": 2, "gradient_clip_algorithm": "VALUE"}, (2.0, "value")),
        ({"gradient_clip_val": 0.5, "gradient_clip_algorithm": "elementwise"}, None),
    ],
)
def test_clipping_is_read_once_from_the_trainer_arguments(arguments: dict[str, Any], expected: Any) -> None:
    context = with_arguments(**arguments)
    assert context.clipping == expected
    assert context.clips_by_norm == (expected is not None and expected[1] == "norm")
    assert context.clips_by_value == (expected is not None and expected[1] == "value")


def test_clipping_reads_lightnings_enum_and_means_nothing_for_fabric() -> None:
    from lightning.pytorch.utilities import GradClipAlgorithmType

    by_value = with_arguments(gradient_clip_val=1.0, gradient_clip_algorithm=GradClipAlgorithmType.VALUE)
    assert by_value.clipping == (1.0, "value")
    assert by_value.clip_algorithm_requested == "value"
    assert with_arguments(gradient_clip_algorithm="value").clip_algorithm_requested == "value"  # no value needed
    fabric = dataclasses.replace(by_value, kind="fabric")
    assert fabric.clipping is None
    assert fabric.clip_algorithm_requested is None
    assert not dataclasses.replace(with_arguments(sync_batchnorm=True), kind="fabric").sync_batchnorm
    assert with_arguments(sync_batchnorm=True).sync_batchnorm
    assert not with_arguments(sync_batchnorm=1).sync_batchnorm


def test_a_model_rule_says_its_condition_before_the_model_exists() -> None:
    (finding,) = conditional_findings(fsdp.FSDP_OFFLOAD_CKPT.rules, with_arguments(gradient_clip_val=1.0))
    assert (finding.code, finding.severity, finding.conditional) == ("LP118", "warning", True)
    assert "gradient_clip_val=1.0" in finding.message
    assert "unless your LightningModule overrides configure_gradient_clipping" in finding.message
    assert "--model" in finding.hint
    assert str(finding).startswith("[LP118] (conditional warning)")
    # its neighbours: nothing the model could change
    for quiet in (with_arguments(), with_arguments(gradient_clip_val=1.0, gradient_clip_algorithm="value"),
                  dataclasses.replace(with_arguments(gradient_clip_val=1.0), kind="fabric")):  # fmt: skip
        assert conditional_findings(fsdp.FSDP_OFFLOAD_CKPT.rules, quiet) == []


def test_skipping_a_rule_silences_its_condition_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "LP118")
    assert conditional_findings(fsdp.FSDP_OFFLOAD_CKPT.rules, with_arguments(gradient_clip_val=1.0)) == []


def test_a_condition_that_crashes_is_the_rules_lp012_not_the_users() -> None:
    @rule("LP901", "error", "model", "x", fails="x", fixed="x", unless="the model is fine", consequence="it fails",
          when=lambda ctx: 1 // 0 == 0)  # fmt: skip
    def broken(ctx: Context, model: Any) -> Problem | None:
        return None

    (finding,) = conditional_findings((broken,), BASE)
    assert finding.code == "LP012"
    assert "ZeroDivisionError" in finding.message


def test_a_condition_belongs_to_a_model_stage() -> None:
    with pytest.raises(ValueError, match=r"LP901.*model stage"):
        rule("LP901", "error", "construction", "x", fails="x", fixed="x", unless="y", consequence="z")


def test_tensor_parallel_clipping_condition_needs_a_tensor_dimension() -> None:
    tp = dataclasses.replace(
        with_arguments(gradient_clip_val=1.0), preset="tp2d_hybrid", family="model_parallel",
        options={"data_parallel_size": 2, "tensor_parallel_size": 4},
    )  # fmt: skip
    codes = [each.code for each in conditional_findings(model_parallel.TP2D_HYBRID.rules, tp)]
    assert "LP215" in codes
    flat = dataclasses.replace(tp, options={"data_parallel_size": 8, "tensor_parallel_size": 1})
    assert "LP215" not in [each.code for each in conditional_findings(model_parallel.TP2D_HYBRID.rules, flat)]


def test_the_trainer_warns_the_condition_at_construction() -> None:
    from lightning.pytorch import Trainer

    with simulated_cuda(8), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gradient_clip_val=1.0, logger=False,
                enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
    found = [w.message.finding for w in caught if isinstance(w.message, PresetWarning)]
    assert [(each.code, each.conditional) for each in found] == [("LP118", True)]


CHECK = "check --strategy fsdp_offload_ckpt --accelerator cuda --gpus 8 --devices 8 --gradient-clip-val 1.0 --json"


def _check(capsys: pytest.CaptureFixture[str], extra: list[str]) -> tuple[int, dict[str, Any]]:
    try:
        code = main([*CHECK.split(), *extra])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    return code, json.loads(capsys.readouterr().out)


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "conditional_models.py").write_text(MODELS)
    monkeypatch.chdir(tmp_path)  # --model imports from the current directory, as `python -m` would
    yield "conditional_models"
    sys.modules.pop("conditional_models", None)


def test_check_without_a_model_names_the_risk_and_with_one_decides_it(
    capsys: pytest.CaptureFixture[str], models: str
) -> None:
    code, report = _check(capsys, [])
    assert code == 0
    # LP118 from the construction (the preset's condition), LP733 from check (a model that optimizes manually)
    assert [(f["code"], f["severity"], f["source"]) for f in report["findings"]] == [
        ("LP118", "warning", "guard"), ("LP733", "warning", "model")
    ]  # fmt: skip
    code, report = _check(capsys, ["--model", f"{models}:Plain"])
    assert code == 1
    assert ("LP118", "error") in [(f["code"], f["severity"]) for f in report["findings"]]
    code, report = _check(capsys, ["--model", f"{models}:Clipper"])
    assert code == 0
    assert "LP118" not in [f["code"] for f in report["findings"]]


def test_check_model_says_which_setup_rules_wait_for_configure_model(
    capsys: pytest.CaptureFixture[str], models: str
) -> None:
    code, report = _check(capsys, ["--model", f"{models}:Configured"])
    assert code == 1  # LP118 is a model-stage rule: decided (Configured does not clip through the root)
    notes = " ".join(report["request"].get("notes", []) or report.get("notes", []))
    assert "configure_model" in notes
    assert "LP107" in notes


def _model_conditions(capsys: pytest.CaptureFixture[str], line: str) -> tuple[int, list[tuple[str, str]], list[Any]]:
    try:
        code = main(["check", *line.split(), "--accelerator", "cuda", "--gpus", "8", "--devices", "8", "--json"])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    report = json.loads(capsys.readouterr().out)
    findings = report["findings"]
    return code, [(f["code"], f["severity"]) for f in findings if f["source"] == "model"], findings


FORCED = '{"zero_optimization":{"stage":2,"offload_optimizer":{"device":"cpu"}},"zero_force_ds_cpu_optimizer":true}'


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("--strategy ddp_bf16_compress", ["LP732"]),  # DDP waits for a gradient of every trained parameter
        ("--strategy ddp_bf16_compress --set find_unused_parameters=True", []),
        ("--strategy ddp_static_graph", []),  # the static graph records the unused ones in its first step
        ("--strategy deepspeed_zero2_offload", ["LP422", "LP416"]),  # one optimizer; a torch one is slow
        (f"--strategy deepspeed_zero2_offload --set config={FORCED}", ["LP422", "LP417"]),  # DeepSpeed refuses it
        ("--strategy deepspeed_zero2_offload --set offload_optimizer=False", ["LP422"]),
        ("--strategy tp2d_hybrid", ["LP208"]),  # a Trainer needs configure_model
        ("--strategy ddp_bf16_compress --mode fabric", ["LP732"]),  # Fabric's DDP waits for every gradient too
        ("--strategy fsdp2 --accumulate-grad-batches 4", ["LP733"]),  # refused under manual optimization
        ("--strategy fsdp2 --accumulate-grad-batches 1", []),
        ("--strategy fsdp2", []),
    ],
)
def test_check_without_a_model_names_each_condition_of_the_model(
    capsys: pytest.CaptureFixture[str], line: str, expected: list[str]
) -> None:
    code, conditions, findings = _model_conditions(capsys, line)
    assert code == 0, findings
    assert conditions == [(each, "warning") for each in expected], findings
    for finding in findings:
        if finding["source"] == "model":
            assert ", unless " in finding["message"], finding
            assert "--model MODULE:FACTORY" in finding["hint"], finding
            # each repeats the call one way: the Trainer's/Fabric's, with the strategy first, in backticks
            assert re.match(r"`(Trainer|Fabric)\(strategy='[a-z0-9_]+'[^`]*\)`: ", finding["message"]), finding


def test_the_models_conditions_are_decided_by_check_model_and_never_repeated_at_construction(
    capsys: pytest.CaptureFixture[str], models: str
) -> None:
    from lightning.pytorch import Trainer

    code, conditions, findings = _model_conditions(capsys, f"--strategy ddp_bf16_compress --model {models}:Plain")
    assert (code, conditions) == (0, []), findings  # Plain uses every parameter: decided, nothing to say
    assert "LP732" not in [f["code"] for f in findings]
    for strategy in ("ddp_bf16_compress", "deepspeed_zero2_offload", "tp2d_hybrid"):
        with simulated_cuda(8), warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            Trainer(strategy=strategy, accelerator="cuda", devices=8, accumulate_grad_batches=4, logger=False,
                    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)  # fmt: skip
        said = [w.message.finding.code for w in caught if isinstance(w.message, PresetWarning)]
        assert not {"LP208", "LP416", "LP417", "LP422", "LP732", "LP733"} & set(said), (strategy, said)


def test_strict_lets_the_models_conditions_pass_but_not_other_warnings(capsys: pytest.CaptureFixture[str]) -> None:
    code, conditions, _ = _model_conditions(capsys, "--strategy ddp_bf16_compress --strict")
    assert conditions == [("LP732", "warning")]
    assert code == 0  # only the model's condition: --model decides it, --strict does not refuse the job for it
    code, conditions, findings = _model_conditions(
        capsys, "--strategy fsdp_offload_ckpt --gradient-clip-val 1 --strict"
    )
    assert ("LP118", "warning") in [(f["code"], f["severity"]) for f in findings]  # the preset's own condition
    assert code == 1  # a guard's warning, conditional or not, still rejects under --strict
