"""``.ci/run`` tests what the package records and declares, and the README's test command is its main leg."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from lightning_presets.core import versions

ROOT = Path(__file__).resolve().parents[1]
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_ci_installs_every_recorded_torch_and_lightning() -> None:
    for torch in versions.TORCH_TESTED:
        assert f"torch=={torch}" in CI, torch
    for lightning in versions.LIGHTNING_TESTED:
        assert f"lightning=={lightning}" in CI or lightning == versions.LIGHTNING, lightning
    assert f"torch=={versions.TORCH}" in CI.split('leg "2.')[0]  # the main leg runs the primary torch
    assert "torch_xla==2.9.0" in CI


def test_readme_test_command_is_the_main_leg() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("Tests (the main leg of what CI runs", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    main_leg = CI.split('leg "1.', 1)[1].split('leg "2.', 1)[0]
    for command in block.strip().split(" && "):
        words = shlex.split(command)
        if words[:2] == ["pip", "install"]:
            for requirement in words[2:]:
                if requirement.startswith("."):  # '.[test,cli]' here, '.[dev,cli]' (test + linters) in CI
                    extras = set(re.findall(r"\w+", requirement.partition("[")[2]))
                    assert extras - {"test"} <= set(re.findall(r"\.\[([\w,]+)\]", main_leg)[0].split(","))
                elif not requirement.startswith("-"):  # pins: torch in the leg, the optional packages in a helper
                    assert requirement in (main_leg if requirement.startswith("torch==") else CI), requirement
    assert "python -m pytest -q\n" in main_leg
