"""The package's metadata agrees with what the code assumes."""

from __future__ import annotations

import tomllib
from pathlib import Path

from packaging.requirements import Requirement

from lightning_presets import __version__, _doctor

PYPROJECT = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))


def test_doctor_checks_the_declared_lightning_range() -> None:
    declared = {Requirement(line).name: Requirement(line).specifier for line in PYPROJECT["project"]["dependencies"]}
    assert declared["lightning"] == _doctor.SUPPORTED_LIGHTNING


def test_torch_requirement_stays_open() -> None:
    declared = {Requirement(line).name: str(Requirement(line).specifier) for line in PYPROJECT["project"]["dependencies"]}
    assert declared["torch"] == ">=2.4"


def test_version_is_single_sourced() -> None:
    assert PYPROJECT["project"]["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["hatch"]["version"]["path"] == "src/lightning_presets/_version.py"
    assert __version__.count(".") == 2
