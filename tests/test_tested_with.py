"""Every built-in preset records the versions its tests ran on, and they are the versions installed now."""

from __future__ import annotations

from typing import Any

import lightning
import pytest
import torch

from lightning_presets.tools.docs import builtin_presets


@pytest.mark.parametrize("preset", builtin_presets(), ids=lambda preset: preset.name)
def test_tested_with_matches_this_environment(preset: Any) -> None:
    tested_with = preset.tested_with
    assert tested_with.get("lightning") == lightning.__version__, "re-record tested_with after upgrading Lightning"
    assert tested_with.get("torch") == torch.__version__.split("+")[0], "re-record tested_with after upgrading torch"
    evidence = tested_with.get("evidence", "")
    assert evidence.split(":")[0].split(" ")[0] in ("runtime", "construction", "syntax", "import"), evidence
