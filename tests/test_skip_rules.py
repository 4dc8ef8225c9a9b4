"""``LIGHTNING_PRESETS_SKIP``: the guards of the named rules (or of all rules) do not run."""

from __future__ import annotations

import pytest
from lightning.pytorch import Trainer

from lightning_presets import PresetConfigError

pytestmark = pytest.mark.usefixtures("cuda8")  # Lightning sees 8 CUDA devices; CUDA itself is never touched
# 16-mixed on CUDA: LP205, and the only finding (an fsdp2 Trainer on 2 simulated GPUs)
REFUSED = {"strategy": "fsdp2", "accelerator": "cuda", "devices": 2, "precision": "16-mixed", "logger": False}


def test_a_rejected_job_is_rejected_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIGHTNING_PRESETS_SKIP", raising=False)
    with pytest.raises(PresetConfigError) as caught:
        Trainer(**REFUSED)
    assert caught.value.codes == ("LP205",)


@pytest.mark.parametrize("value", ["LP205", "lp205", "LP999, LP205", "all"])
def test_the_named_rule_or_all_rules_do_not_run(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", value)
    trainer = Trainer(**REFUSED)
    assert trainer.strategy._lp_preset.name == "fsdp2"


def test_other_codes_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "LP201")
    with pytest.raises(PresetConfigError) as caught:
        Trainer(**REFUSED)
    assert caught.value.codes == ("LP205",)
