"""The pytest plugin platform teams test their presets with: registered by entry point, cheap to load, its fixtures
build real Trainers on simulated GPUs and clusters and undo everything after the test."""

from __future__ import annotations

import os
import textwrap
from importlib import metadata
from typing import Any

import pytest
import torch
from errors_doc import builtin_presets

from helpers import QUIET, run_python
from lightning_presets.core.hardware import SimulatedGPU
from lightning_presets.testing import check_examples
from lightning_presets.tools.examples import rules_of

pytest_plugins = ("pytester",)


def test_the_plugin_is_registered_by_entry_point(pytestconfig: pytest.Config) -> None:
    (entry,) = [each for each in metadata.entry_points(group="pytest11") if each.name == "lightning_presets"]
    assert entry.value == "lightning_presets.testing.plugin"
    assert entry.dist is not None
    assert entry.dist.name == "lightning-presets"
    plugin = pytestconfig.pluginmanager.get_plugin("lightning_presets")
    assert plugin is not None
    assert plugin.__name__ == "lightning_presets.testing.plugin"


def test_loading_the_plugin_imports_neither_torch_nor_lightning() -> None:
    """pytest loads it in every session of the environment, tests of other projects included."""
    result = run_python(
        """
        import sys
        import lightning_presets.testing.plugin
        import lightning_presets.testing
        print(sorted(name for name in ("torch", "lightning", "pytorch_lightning") if name in sys.modules))
        """
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
