"""``matrix --output`` where an atomic replace is impossible (issue 27): the file is written in place, and the
command says so."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from helpers import run_cli


@pytest.mark.usefixtures("quick_matrix")
def test_a_file_with_hard_links_is_written_in_place_and_keeps_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Before: the rename left the other link pointing at the old text."""
    target = tmp_path / "matrix.md"
    target.write_text("old\n", encoding="utf-8")
    other = tmp_path / "docs-copy.md"
    os.link(target, other)
    code, _, err = run_cli(capsys, "matrix", "--output", str(target))
    assert code == 0
    assert other.read_text(encoding="utf-8").startswith("# Compatibility matrix")
    assert os.stat(target).st_ino == os.stat(other).st_ino
    assert "has 2 hard links: written in place" in err


@pytest.mark.usefixtures("quick_matrix")
def test_a_writable_file_in_a_folder_that_is_not_is_written_in_place(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: refused (the temporary file cannot be made beside it). The folder's refusal is simulated: this suite
    runs as root, whom no folder refuses."""
    target = tmp_path / "matrix.md"
    target.write_text("old\n", encoding="utf-8")

    def refused(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    code, _, err = run_cli(capsys, "matrix", "--output", str(target))
    assert code == 0
    assert target.read_text(encoding="utf-8").startswith("# Compatibility matrix")
    assert "is not writable: written in place" in err


@pytest.mark.usefixtures("quick_matrix")
def test_a_new_file_in_a_folder_that_refuses_is_still_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def refused(*args: object, **kwargs: object) -> tuple[int, str]:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refused)
    code, _, err = run_cli(capsys, "matrix", "--output", str(tmp_path / "new.md"))
    assert code == 2
    assert "cannot be written: Permission denied" in err
    assert not (tmp_path / "new.md").exists()


@pytest.mark.usefixtures("quick_matrix")
def test_an_ordinary_file_is_still_replaced_atomically(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "matrix.md"
    target.write_text("old\n", encoding="utf-8")
    before = os.stat(target).st_ino
    code, _, err = run_cli(capsys, "matrix", "--output", str(target))
    assert code == 0
    assert os.stat(target).st_ino != before  # a new file renamed over the old one
    assert "written in place" not in err
