"""``.ci/run`` tests what the package records and declares, and the README's test command is its main leg."""

from __future__ import annotations

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


def _readme_command(after: str) -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return readme.split(after, 1)[1].split("```bash\n", 1)[1].split("```", 1)[0].strip()


def test_the_readme_commands_are_what_ci_runs_verbatim() -> None:
    """The two README commands are lines of `.ci/run`: quick-start in leg 0, tests in the main leg."""
    quickstart = _readme_command("Quick-start (installs torch")
    tests = _readme_command("Tests (the main leg of what CI runs")
    legs = {leg.split('"', 1)[0]: leg for leg in CI.split('leg "')[1:]}
    assert quickstart in legs["0. the README's quick-start command, verbatim, in a fresh .venv"].splitlines()
    main_leg = next(body for name, body in legs.items() if name.startswith("1. main"))
    assert tests in main_leg.splitlines()
    assert tests.endswith("&& python -m pytest -q -n 2 --dist loadfile")
    assert quickstart.endswith("&& python examples/quickstart.py")
    # each starts from nothing: the virtual environment is removed before the command makes it again
    for command, leg in (
        (quickstart, legs["0. the README's quick-start command, verbatim, in a fresh .venv"]),
        (tests, main_leg),
    ):
        before = leg.split(command, 1)[0]
        assert "rm -rf .venv" in before
        assert command.startswith("python3 -m venv .venv && . .venv/bin/activate")


def test_the_suites_budget_fails_a_slow_session(tmp_path: Path) -> None:
    """The budget check of ``tests/conftest.py`` (a fresh pytest session: the check is a hook of the session's end)."""
    import os
    import subprocess
    import sys

    def session(budget: str) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "LIGHTNING_PRESETS_SUITE_BUDGET": budget}
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/test_ci.py::test_ci_installs_every_recorded_torch_and_lightning"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip

    slow = session("0")
    assert slow.returncode == 1, slow.stdout[-2000:]
    assert "1 passed" in slow.stdout
    assert "its budget is 0 s" in slow.stdout
    assert "over budget" in slow.stdout
    fast = session("600")
    assert fast.returncode == 0, fast.stdout[-2000:]
    assert "its budget is 600 s" in fast.stdout
    assert "over budget" not in fast.stdout
