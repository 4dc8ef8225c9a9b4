"""``LIGHTNING_PRESETS_SKIP``: the guards of the named rules (or of all rules) do not run."""

from __future__ import annotations

import pytest
from lightning.pytorch import Trainer

from lightning_presets import PresetConfigError


def test_a_rejected_job_is_rejected_without_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LIGHTNING_PRESETS_SKIP", raising=False)
    with pytest.raises(PresetConfigError) as caught:
        Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, precision="64-true", logger=False)
    assert caught.value.codes == ("LP205",)


@pytest.mark.parametrize("value", ["LP205", "lp205", "LP999, LP205", "all"])
def test_the_named_rule_or_all_rules_do_not_run(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", value)
    trainer = Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, precision="64-true", logger=False)
    assert trainer.strategy._lp_preset.name == "tp2d_hybrid"


def test_other_codes_still_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "LP201")
    with pytest.raises(PresetConfigError) as caught:
        Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, precision="64-true", logger=False)
    assert caught.value.codes == ("LP205",)
