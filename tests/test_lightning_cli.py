"""LightningCLI names a preset in YAML (``trainer.strategy: fsdp2``): a real 2-process ``fit`` on CPU, and
``lightning-presets check --config`` on the same file agrees with what LightningCLI itself builds.

Needs the ``cli`` extra (``pip install 'lightning-presets[cli]'``: jsonargparse), which ``.ci/run`` installs."""

from __future__ import annotations

import json
import re
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness import run_job
from helpers import SCRIPTS, run
from lightning_presets import PresetConfigError, PresetWarning

pytest.importorskip("jsonargparse", reason="LightningCLI needs the cli extra: pip install 'lightning-presets[cli]'")
# Lightning 2.6.6's cli.py still calls jsonargparse APIs that 4.49+ deprecates; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning:lightning.pytorch.cli")

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


def _config(tmp_path: Path, **trainer: Any) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump({"seed_everything": 0, "trainer": {**trainer, **QUIET}, "data": {"batch_size": 4}}))
    return path


def _check(capsys: pytest.CaptureFixture[str], config: Path) -> dict[str, Any]:
    code, out = run(capsys, "check", "--config", str(config), "--json")
    data: dict[str, Any] = json.loads(out)
    assert code == data["exit_code"]
    return data


def _lightning_cli(config: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """What LightningCLI builds from the file, in this process (no fit): the Trainer, or the guards' error."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        from cli_fit import CountingData, TinyModel
    finally:
        sys.path.remove(str(SCRIPTS))
    from lightning.pytorch.cli import LightningCLI

    monkeypatch.setattr(sys, "argv", ["cli_fit.py"])  # LightningCLI reads sys.argv unless told
    return LightningCLI(TinyModel, CountingData, run=False, save_config_callback=None, args=["--config", str(config)])


@pytest.mark.distributed
def test_lightning_cli_fit_with_a_preset_from_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two CPU processes (gloo); the preset shards the model with FSDP2."""
    config = _config(tmp_path, strategy="fsdp2", accelerator="cpu", devices=2, max_steps=3)
    process = run_job(SCRIPTS / "cli_fit.py", "fit", "--config", str(config), cwd=tmp_path, timeout=300)
    assert process.returncode == 0, process.describe()
    reports = sorted(
        (json.loads(line) for line in re.findall(r"^RESULT (.*)$", process.stdout, re.MULTILINE)),
        key=lambda report: report["rank"],
    )
    assert [report["rank"] for report in reports] == [0, 1]
    for report in reports:
        assert (report["world_size"], report["strategy"], report["preset"]) == (2, "ModelParallelStrategy", "fsdp2")
        assert report["dtensor_parameters"] == report["parameters"]  # every parameter sharded
        assert len(report["losses"]) == 3
    assert sum(report["local_numel"] for report in reports) < 2 * reports[0]["local_numel"] + 1
    # the same file through the check: accepted, as LightningCLI accepted it
    data = _check(capsys, config)
    assert data["valid"] is True
    assert data["evidence"]["constructed"] is True
    assert [f["code"] for f in data["findings"] if f["severity"] == "error"] == []


@pytest.mark.parametrize(
    ("trainer", "errors"),
    [
        ({"strategy": "fsdp2", "accelerator": "cpu", "devices": 2}, []),
        ({"strategy": "fsdp2", "accelerator": "cpu", "devices": 1}, []),  # LP212 is a warning: still valid
        ({"strategy": "fsdp_offload_ckpt", "accelerator": "cpu", "devices": 2}, ["LP101"]),
        ({"strategy": "tp2d_hybrid", "accelerator": "cpu", "devices": 2, "detect_anomaly": True}, ["LP216"]),
        ({"strategy": "tp2d_hybrid", "accelerator": "cpu", "devices": 2, "precision": "64-true"}, []),  # it trains
    ],
    ids=["fsdp2", "fsdp2-one-device", "fsdp-on-cpu", "tp2d-anomaly", "tp2d-64-true"],
)
def test_check_config_gives_lightning_clis_verdict(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch, trainer: dict[str, Any],
                                                    errors: list[str]) -> None:  # fmt: skip
    config = _config(tmp_path, **trainer)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PresetWarning)  # the verdict is about errors
        try:
            cli = _lightning_cli(config, monkeypatch)
        except PresetConfigError as error:
            real = sorted(finding.code for finding in error.findings if finding.severity == "error")
        else:
            assert cli.trainer.strategy._lp_preset.name == trainer["strategy"]
            real = []
    data = _check(capsys, config)
    checked = sorted(finding["code"] for finding in data["findings"] if finding["severity"] == "error")
    assert real == checked == errors
    assert data["valid"] is (errors == [])
