"""docs/scaling-out.md: every ``lightning-presets check`` line on the page runs, with the exit code and the codes the
page writes after it (``# exit 1: LP705``); the page's YAML files are written where the commands read them."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from lightning_presets.cli import main

PAGE = Path(__file__).resolve().parents[1] / "docs" / "scaling-out.md"
COMMAND = re.compile(
    r"^lightning-presets check (?P<args>.+?)\s+# exit (?P<code>\d)(?:: (?P<codes>LP\d{3}(?:, LP\d{3})*))?$"
)
FILE = re.compile(r"```yaml\n# (?P<name>[\w.-]+\.yaml)\n(?P<text>.*?)```", re.DOTALL)


def examples() -> list[tuple[str, int, set[str]]]:
    found = []
    for line in PAGE.read_text(encoding="utf-8").splitlines():
        if line.startswith("lightning-presets check"):
            match = COMMAND.match(line)
            assert match, f"docs/scaling-out.md: a check line without its '# exit N' outcome: {line}"
            codes = set(match["codes"].split(", ")) if match["codes"] else set()
            found.append((match["args"], int(match["code"]), codes))
    return found


def test_the_page_has_an_example_for_every_engine() -> None:
    clusters = {arg for args, _, _ in examples() for arg in re.findall(r"--cluster (\S+)", args)}
    assert {"slurm", "torchelastic", "kubeflow", "trainjob", "ray"} <= clusters


def _id(value: object) -> str:
    """A test id that is the same in every process (a set's order follows string hashes, which differ)."""
    return ",".join(sorted(value)) if isinstance(value, set) else str(value)[:60]


@pytest.mark.parametrize(("args", "code", "codes"), examples(), ids=_id)
def test_each_example_runs_as_the_page_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: str, code: int,
    codes: set[str],
) -> None:  # fmt: skip
    for match in FILE.finditer(PAGE.read_text(encoding="utf-8")):
        (tmp_path / match["name"]).write_text(match["text"], encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    try:
        exit_code = main(["check", *shlex.split(args), "--json"])
    except SystemExit as exit_:
        exit_code = int(exit_.code or 0)
    report = json.loads(capsys.readouterr().out)
    found = {finding["code"] for finding in report["findings"]}
    assert exit_code == code, report["findings"]
    assert found == codes, report["findings"]
