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
    """The budget check of ``tests/conftest.py`` (a fresh pytest session: the check is a hook of the session's end):
    a forced budget of 0 fails whatever the machine's calibrated slowness; the budget scales with the slowness."""
    import os
    import subprocess
    import sys

    def session(budget: str, **extra: str) -> subprocess.CompletedProcess[str]:
        env = {key: value for key, value in os.environ.items() if key != "LIGHTNING_PRESETS_SUITE_SPEED"}
        env.update({"LIGHTNING_PRESETS_SUITE_BUDGET": budget, **extra})
        return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/test_ci.py::test_ci_installs_every_recorded_torch_and_lightning"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)  # fmt: skip

    slow = session("0")  # calibrated: the workload really runs
    assert slow.returncode == 1, slow.stdout[-2000:]
    assert "1 passed" in slow.stdout
    assert "its budget is 0 s" in slow.stdout
    assert "a calibration workload took" in slow.stdout
    assert "over budget" in slow.stdout
    scaled = session("0.001", LIGHTNING_PRESETS_SUITE_SPEED="1000000")  # over 0.001 s, under 1000 s
    assert scaled.returncode == 0, scaled.stdout[-2000:]
    assert "its budget is 1000 s: 0 s (tests/conftest.py SUITE_BUDGET_SECONDS) x 1000000.00" in scaled.stdout
    assert "over budget" not in scaled.stdout


def test_the_budget_scales_with_the_machine_and_never_below_the_reference() -> None:
    from calibration import REFERENCE_SECONDS, scale

    assert scale(1.5 * REFERENCE_SECONDS) == 1.5  # a machine 1.5 times slower: 1,080 s instead of 720 s
    assert scale(0.5 * REFERENCE_SECONDS) == 1.0  # a faster one keeps the reference budget
    assert scale(2.0, reference=1.0) == 2.0
