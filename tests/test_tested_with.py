"""Every built-in preset records the versions its tests ran on, and they are the versions installed now."""

from __future__ import annotations

import lightning
import pytest
import torch

from lightning_presets import _bridge, _catalog


def _builtin_presets() -> list[object]:
    presets: list[object] = list(_bridge.strategy_catalog().presets.values())
    from lightning_presets._precision import precision_catalog

    presets += list(precision_catalog().presets.values())
    return [p for p in presets if _catalog.normalize_distribution(p.distribution or "") == _catalog.OWN_DISTRIBUTION]  # type: ignore[attr-defined]


@pytest.mark.parametrize("preset", _builtin_presets(), ids=lambda preset: preset.name)  # type: ignore[attr-defined]
def test_tested_with_matches_this_environment(preset: object) -> None:
    tested_with = preset.tested_with  # type: ignore[attr-defined]
    assert tested_with.get("lightning") == lightning.__version__, "re-record tested_with after upgrading Lightning"
    assert tested_with.get("torch") == torch.__version__.split("+")[0], "re-record tested_with after upgrading torch"
    evidence = tested_with.get("evidence", "")
    assert evidence.split(":")[0].split(" ")[0] in ("runtime", "construction", "syntax", "import"), evidence
