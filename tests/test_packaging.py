"""The installed package's metadata agrees with what the code assumes; the sources parse on Python 3.10."""

from __future__ import annotations

import shutil
import subprocess
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from lightning_presets import __version__
from lightning_presets.tools import doctor as _doctor

SRC = Path(__file__).resolve().parents[1] / "src"


def _requirements() -> dict[str, Requirement]:
    parsed = [Requirement(line) for line in metadata.requires("lightning-presets") or []]
    return {requirement.name: requirement for requirement in parsed if requirement.marker is None}


def test_doctor_checks_the_declared_lightning_range() -> None:
    assert _requirements()["lightning"].specifier == _doctor.SUPPORTED_LIGHTNING


def test_torch_requirement_stays_open_and_is_the_tested_range() -> None:
    from lightning_presets.core import versions

    assert str(_requirements()["torch"].specifier) == versions.SUPPORTED_TORCH == ">=2.7"
    assert versions.TORCH_TESTED[0] == "2.7.0"  # CI tests the oldest torch it declares


def test_installed_version_is_the_source_version() -> None:
    assert metadata.version("lightning-presets") == __version__


def _python310() -> str | None:
    candidates = [shutil.which("python3.10"), *map(str, Path("/root/.pyenv/versions").glob("3.10*/bin/python3.10"))]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "pass"], capture_output=True, check=False).returncode == 0:
            return candidate
    return None


def test_sources_parse_on_the_oldest_declared_python() -> None:
    assert metadata.metadata("lightning-presets")["Requires-Python"] == ">=3.10"
    python310 = _python310()
    if python310 is None:
        pytest.skip("no Python 3.10 interpreter here; only the declaration was checked")
    files = [str(path) for path in SRC.rglob("*.py")]
    result = subprocess.run(
        [python310, "-c", "import ast, sys\nfor f in sys.argv[1:]: ast.parse(open(f).read(), f)", *files],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
