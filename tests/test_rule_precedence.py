"""A rule's declared precedence (``Rule.supersedes``), applied by the rule engine (``core.rules.run_rules``).

LP418 (DeepSpeed's own parser refuses the config) stays quiet when a rule that names the same fault more precisely
fires: those rules declare that they supersede it, and LP418 no longer calls them itself.
"""

from __future__ import annotations

import pytest

from lightning_presets.core.context import Context
from lightning_presets.core.rules import Problem, Rule, rule, run_rules
from lightning_presets.strategies.deepspeed import config_rules

JOB = Context(
    preset="p", target="trainer", kind="trainer", accelerator="cuda", devices_per_node=2, num_nodes=1,
    precision="bf16-mixed", precision_plugin="MixedPrecision", cluster_environment="LightningEnvironment",
)  # fmt: skip


def _always(code: str, stage: str = "construction", supersedes: tuple[Rule, ...] = ()) -> Rule:
    @rule(code, "error", stage, f"{code} fires", fails="x", fixed="y", supersedes=supersedes)  # type: ignore[arg-type]
    def fires(ctx: Context) -> Problem | None:
        return Problem(f"{code} says", "fix")

    return fires


BROAD = _always("LP990")
PRECISE = _always("LP991", supersedes=(BROAD,))
LATER = _always("LP992", stage="trainer", supersedes=(BROAD,))


def codes(rules: tuple[Rule, ...], stage: str = "construction") -> list[str]:
    return [each.code for each in run_rules(rules, stage, JOB)]  # type: ignore[arg-type]


def test_a_rule_that_fires_silences_the_rules_it_supersedes() -> None:
    assert codes((BROAD,)) == ["LP990"]
    assert codes((BROAD, PRECISE)) == ["LP991"]
    assert codes((PRECISE, BROAD)) == ["LP991"]  # whatever the declaration order


def test_a_superseding_rule_of_another_stage_or_skipped_still_silences(monkeypatch: pytest.MonkeyPatch) -> None:
    assert codes((BROAD, LATER)) == []  # LATER is checked at construction for its precedence, reported at its stage
    assert codes((BROAD, LATER), "trainer") == ["LP992"]
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "LP991")
    assert codes((BROAD, PRECISE)) == []  # as LP418 stayed quiet when the precise rule it called was skipped


def test_the_deepspeed_rules_that_name_a_parser_refusal_more_precisely_supersede_lp418() -> None:
    precise = {"LP405", "LP406", "LP407", "LP408", "LP409"}
    declared = {each.code for each in vars(config_rules).values() if isinstance(each, Rule)
                and config_rules.deepspeed_accepts_the_config in each.supersedes}  # fmt: skip
    assert declared == precise
