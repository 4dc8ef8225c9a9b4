"""Every built-in preset records the versions its tests ran on, and they are the versions installed now."""

from __future__ import annotations

from typing import Any

import lightning
import pytest
import torch
from errors_doc import builtin_presets

from lightning_presets.core.versions import recorded


@pytest.mark.parametrize("preset", builtin_presets(), ids=lambda preset: preset.name)
def test_tested_with_matches_this_environment(preset: Any) -> None:
    tested_with = preset.tested_with
    assert lightning.__version__ in recorded(tested_with, "lightning"), (
        "re-record tested_with after upgrading Lightning"
    )
    assert torch.__version__.split("+")[0] in recorded(tested_with, "torch"), (
        "re-record tested_with after upgrading torch"
    )
    evidence = tested_with.get("evidence", "")
    assert evidence.split(":")[0].split(" ")[0] in ("runtime", "construction", "syntax", "import"), evidence


def test_every_supported_lightning_minor_is_tested() -> None:
    from packaging.specifiers import SpecifierSet
    from packaging.version import Version

    from lightning_presets.core import versions

    supported = SpecifierSet(versions.SUPPORTED_LIGHTNING)
    tested = [Version(each) for each in versions.LIGHTNING_TESTED]
    assert all(version in supported for version in tested)
    assert {(version.major, version.minor) for version in tested} == {(2, 5), (2, 6)}
    assert versions.LIGHTNING in versions.LIGHTNING_TESTED
    assert recorded(versions.tested("construction", construction=""), "lightning") == versions.LIGHTNING_TESTED
