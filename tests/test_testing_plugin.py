"""The pytest plugin platform teams test their presets with: registered by entry point, cheap to load, its fixtures
build real Trainers on simulated GPUs and clusters and undo everything after the test."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import sysconfig
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tomllib
import torch
from errors_doc import builtin_presets

from _dists import build_wheel
from helpers import QUIET, Fresh, Started, run_python
from lightning_presets.core.hardware import SimulatedGPU
from lightning_presets.testing import check_examples
from lightning_presets.tools.examples import rules_of

pytest_plugins = ("pytester",)

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = ROOT / "pyproject.toml"
PLUGIN = "lightning_presets_pytest"


def test_the_entry_point_is_named_after_its_module() -> None:
    """``-p lightning_presets_pytest`` and ``pytest_plugins`` then name the plugin the entry point registers, instead
    of registering the module a second time ("Plugin already registered under a different name", issue 16)."""
    with PYPROJECT.open("rb") as file:
        declared = tomllib.load(file)["project"]["entry-points"]["pytest11"]
    assert declared == {PLUGIN: PLUGIN}
    assert importlib.import_module(PLUGIN).__name__ == PLUGIN


@pytest.mark.parametrize("autoload", ["0", "1"])
def test_loading_the_plugin_imports_nothing_heavy_and_registers_nothing(autoload: str) -> None:
    """pytest loads it in every session of the environment, tests of other projects included. Before (issue 16):
    with ``LIGHTNING_PRESETS_AUTOLOAD=0`` it imported torch, Lightning and every preset, and registered them."""
    result = run_python(
        f"""
        import sys
        import {PLUGIN}
        heavy = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_presets")
        print(sorted(name for name in heavy if name in sys.modules))
        """,
        env={"LIGHTNING_PRESETS_AUTOLOAD": autoload},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


def test_simulated_gpus_builds_a_cuda_trainer(simulated_gpus: object) -> None:
    from lightning.pytorch import Trainer

    gpu = simulated_gpus(8, capability=(8, 0), memory=80 * 2**30)  # type: ignore[operator]
    assert gpu == SimulatedGPU(8, (8, 0), 80 * 2**30)
    trainer = Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, precision="bf16-mixed", **QUIET)
    context = trainer.strategy._lp_context
    assert (context.accelerator, context.world_size, context.gpu_capability) == ("cuda", 8, (8, 0))
    assert torch.cuda.is_initialized() is False  # type: ignore[no-untyped-call]


def test_simulated_cluster_is_what_lightning_detects(simulated_cluster: object) -> None:
    from lightning.pytorch import Trainer

    variables = simulated_cluster("slurm", nodes=2, tasks_per_node=4)  # type: ignore[operator]
    assert (variables["SLURM_NTASKS"], variables["SLURM_NNODES"]) == ("8", "2")
    assert os.environ["SLURM_NTASKS_PER_NODE"] == "4"
    trainer = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=4, num_nodes=2, **QUIET)
    assert type(trainer.strategy.cluster_environment).__name__ == "SLURMEnvironment"
    assert trainer.strategy._lp_context.world_size == 8


def test_simulated_cluster_refuses_an_unknown_kind(simulated_cluster: object) -> None:
    with pytest.raises(ValueError, match=r"simulated_cluster\('pbs'\): the kind is one of none, slurm, torchelastic"):
        simulated_cluster("pbs")  # type: ignore[operator]


def test_fixtures_undo_everything_after_the_test(pytester: pytest.Pytester) -> None:
    """In a session of its own, as a platform team's suite would use them: no conftest, no import of the plugin."""
    pytester.makepyfile(
        textwrap.dedent(
            """
            import os

            import torch
            from lightning.pytorch import Trainer

            QUIET = dict(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False)


            def test_a_uses_the_fixtures(simulated_gpus, simulated_cluster):
                simulated_gpus(4)
                simulated_cluster("torchelastic", nodes=2, tasks_per_node=4)
                trainer = Trainer(strategy="fsdp2", accelerator="cuda", devices=4, num_nodes=2, **QUIET)
                assert trainer.strategy._lp_context.world_size == 8
                assert torch.cuda.device_count() == 4


            def test_b_runs_after_and_sees_the_real_machine():
                assert torch.cuda.device_count() == 0
                assert "TORCHELASTIC_RUN_ID" not in os.environ and "WORLD_SIZE" not in os.environ
            """
        )
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    # pytest marks the distribution's top-level modules for assertion rewriting; the start-up hook is imported
    # before pytest runs and says PYTEST_DONT_REWRITE, so no session of the environment gets a warning about it
    assert "PytestAssertRewriteWarning" not in result.stdout.str()


# --- check_examples: the plugin's name for the examples engine (lightning_presets.tools.examples) -----------------


@pytest.mark.parametrize("preset", builtin_presets(), ids=lambda preset: preset.name)
def test_every_documented_example_of_every_builtin_preset_is_executed(preset: Any) -> None:
    rules = rules_of(preset)
    report = check_examples(preset.name)
    assert list(report.failures) == []
    assert report.checked == 2 * len(rules)  # a failing and a fixed example per rule, none skipped


def test_check_examples_is_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    """No second engine: the plugin's function returns what ``tools.examples.check_examples`` returns."""
    from lightning_presets.tools import examples

    monkeypatch.setattr(examples, "check_examples", lambda name: ("the engine's report for", name))
    assert check_examples("acme_fsdp") == ("the engine's report for", "acme_fsdp")


def test_check_examples_reports_a_failing_example(monkeypatch: pytest.MonkeyPatch) -> None:
    """A documented ``fails`` example that no longer fails is reported, not passed over."""
    import dataclasses

    from lightning_presets.registry import catalog

    fsdp2 = catalog.strategy_catalog().presets["fsdp2"]
    (first, *rest) = fsdp2.rules
    broken = dataclasses.replace(first, fails=first.fixed)
    monkeypatch.setitem(catalog.strategy_catalog().presets, "fsdp2", dataclasses.replace(fsdp2, rules=(broken, *rest)))
    report = check_examples("fsdp2")
    assert report.failures == (f"fsdp2: {first.code} fails example did not raise or warn {first.code} (got none)",)


# --- the plugin as an installed wheel meets another project's test session (issue 16, item 3) ---------------------


@pytest.fixture(scope="module")
def installed_wheel(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """This tree built as a wheel and installed into a directory of its own, beside a mirror of this environment's
    site-packages without lightning-presets: what pytest sees of the distribution (entry points, files it marks for
    assertion rewriting) is then exactly what ``pip install lightning-presets`` gives. Runs with ``python -S``. Other
    distributions' pytest plugins are left out of the mirror (their own modules may be imported before pytest too)."""
    root = tmp_path_factory.mktemp("wheel")
    wheel = build_wheel(ROOT, root / "wheels")
    target = root / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--target", str(target),
         str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    mirror = root / "environment"
    mirror.mkdir()
    ours = ("lightning_presets", "_lightning_presets")
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if entry.suffix != ".pth" and not entry.name.startswith(ours) and not _pytest_plugin(entry):
            (mirror / entry.name).symlink_to(entry)
    return {"site": str(target), "environment": str(mirror)}


def _pytest_plugin(entry: Path) -> bool:
    """Whether ``entry`` is the metadata of another distribution's pytest plugin (anyio's, ...): left out, so what
    a session shows is ours alone (their packages stay importable)."""
    entry_points = entry / "entry_points.txt"
    return entry.suffix == ".dist-info" and entry_points.is_file() and "[pytest11]" in entry_points.read_text()


def start_session(wheel: dict[str, str], project: Path, *args: str, before: str = "", autoload: str = "0") -> Started:
    """Start ``pytest.main`` over ``project`` in a fresh ``python -S`` that sees only the installed wheel and this
    environment's other packages (the wheel's ``.pth`` start-up hook included)."""
    runner = f"""
import site, sys
sys.path.insert(0, {wheel["environment"]!r})
site.addsitedir({wheel["site"]!r})  # its .pth files too: the start-up hook, as in site-packages
{before}
import pytest
sys.exit(pytest.main(["-p", "no:cacheprovider", "-q", *{list(args)!r}, {str(project)!r}]))
"""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["LIGHTNING_PRESETS_AUTOLOAD"] = autoload
    return Started([sys.executable, "-S", "-c", runner], cwd=project, env=env, timeout=480)


def session(started: Started) -> str:
    """The output of a session started by ``start_session``, which must have passed."""
    result = started.result()
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    return output


def project_with(root: Path, tests: str, ini: str = "", conftest: str = "") -> Path:
    root.mkdir()
    (root / "pytest.ini").write_text("[pytest]\n" + ini)
    (root / "test_project.py").write_text(textwrap.dedent(tests))
    if conftest:
        (root / "conftest.py").write_text(conftest)
    return root


UNRELATED = f"""
        import sys


        def test_nothing_heavy_was_imported(request):
            assert request.config.pluginmanager.has_plugin({PLUGIN!r})
            heavy = ("torch", "lightning", "pytorch_lightning", "lightning_fabric", "lightning_presets")
            assert [name for name in heavy if name in sys.modules] == []
        """
WARNED = """
        from lightning.pytorch import Trainer


        def test_the_fixture_builds_a_cuda_trainer(simulated_gpus):
            simulated_gpus(4)
            trainer = Trainer(strategy="fsdp2", accelerator="cuda", devices=4, logger=False, enable_checkpointing=False,
                              enable_progress_bar=False, enable_model_summary=False)
            assert trainer.strategy._lp_context.world_size == 4
        """
NAMED = """
        def test_the_fixtures_are_there(simulated_gpus, simulated_cluster):
            assert callable(simulated_gpus) and callable(simulated_cluster)
        """
NAMINGS = {
    "-p": (("-p", PLUGIN), ""),
    "pytest_plugins": ((), f"pytest_plugins = [{PLUGIN!r}]\n"),
    "-p package path": (("-p", "lightning_presets.testing.plugin"), ""),
}
NAMING_TEST = "test_naming_the_plugin_explicitly_does_not_register_it_twice"


@pytest.fixture(scope="module")
def sessions(
    request: pytest.FixtureRequest, installed_wheel: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Fresh]:
    """The sessions of the selected tests below, started side by side: each is a fresh interpreter of its own (what
    is imported before pytest starts, the plugin's registration and the start-up hook are the claims), in a project
    of its own; none depends on another."""
    root = tmp_path_factory.mktemp("sessions")

    def named(id_: str) -> Started:
        args, conftest = NAMINGS[id_]
        project = project_with(root / f"named{list(NAMINGS).index(id_)}", NAMED, conftest=conftest)
        return start_session(installed_wheel, project, *args)

    runs = Fresh(request, {
        "unrelated": (lambda: start_session(installed_wheel, project_with(root / "other", UNRELATED), autoload="0"),
                      ("test_an_unrelated_session_imports_nothing_of_ours_with_autoload_off",)),
        "warned": (lambda: start_session(
            installed_wheel,
            project_with(root / "warned", WARNED, ini="filterwarnings =\n    error\n    default::DeprecationWarning\n"),
            before="import lightning.pytorch", autoload="1",
        ), ("test_a_session_after_import_lightning_with_warnings_as_errors_runs_and_the_fixtures_work",)),
        **{id_: ((lambda id_=id_: named(id_)), (f"{NAMING_TEST}[{id_}]",)) for id_ in NAMINGS},
    })  # fmt: skip
    yield runs
    runs.close()


@pytest.mark.install
def test_an_unrelated_session_imports_nothing_of_ours_with_autoload_off(sessions: Fresh) -> None:
    assert "1 passed" in session(sessions["unrelated"])


@pytest.mark.install
def test_a_session_after_import_lightning_with_warnings_as_errors_runs_and_the_fixtures_work(sessions: Fresh) -> None:
    """Before: ``PytestAssertRewriteWarning: Module already imported so cannot be rewritten; lightning_presets``
    aborted the session (pytest marks the top-level packages of every distribution with a pytest plugin)."""
    output = session(sessions["warned"])
    assert "1 passed" in output
    assert "PytestAssertRewriteWarning" not in output


@pytest.mark.install
@pytest.mark.parametrize("naming", list(NAMINGS))
def test_naming_the_plugin_explicitly_does_not_register_it_twice(sessions: Fresh, naming: str) -> None:
    """Before: "Plugin already registered under a different name" aborted the session."""
    assert "1 passed" in session(sessions[naming])
