"""acme-presets' own tests, written with lightning-presets' pytest plugin: no conftest, no GPU.

The fixtures ``simulated_gpus`` and ``simulated_cluster`` come from the plugin; ``check_examples`` runs every
documented example of a preset's rules (ours and the built-in ones ``acme_fsdp`` inherits from ``fsdp2``).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from lightning.pytorch import Trainer

import lightning_presets
from lightning_presets.testing import check_examples

QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}


@pytest.mark.parametrize("name", ["acme_fsdp", "acme-bf16"])
def test_every_documented_example_behaves_as_documented(name: str) -> None:
    report = check_examples(name)
    assert report.failures == ()
    assert report.checked > 0


def test_acme_fsdp_on_a_full_acme_node(simulated_gpus, simulated_cluster) -> None:
    simulated_gpus(8, capability=(9, 0))
    simulated_cluster("slurm", nodes=4, tasks_per_node=8)
    trainer = Trainer(strategy="acme_fsdp", accelerator="cuda", devices=8, num_nodes=4, precision="bf16-mixed", **QUIET)
    context = trainer.strategy._lp_context
    assert (context.world_size, context.cluster_environment) == (32, "SLURMEnvironment")
    assert trainer.strategy._lp_preset.distribution == "acme-presets"


def test_more_devices_than_an_acme_node_is_refused(simulated_gpus) -> None:
    simulated_gpus(16)
    with pytest.raises(lightning_presets.PresetConfigError) as excinfo:
        Trainer(strategy="acme_fsdp", accelerator="cuda", devices=16, **QUIET)
    (finding,) = excinfo.value.findings
    assert finding.code == "LP901"
    assert "local ranks 8 to 15" in finding.message
    assert finding.hint == "use devices=8, num_nodes=2 for the same 16 processes"


def test_half_a_node_is_a_warning(simulated_gpus) -> None:
    simulated_gpus(8)
    with pytest.warns(lightning_presets.PresetWarning, match=r"\[LP902\].*4 GPU\(s\) per node would sit idle"):
        Trainer(strategy="acme_fsdp", accelerator="cuda", devices=4, **QUIET)


def test_the_built_in_guards_still_run(simulated_gpus) -> None:
    """``acme_fsdp`` keeps fsdp2's own rules: ModelParallelStrategy takes no 16-mixed (LP205)."""
    simulated_gpus(8)
    with pytest.raises(lightning_presets.PresetConfigError) as excinfo:
        Trainer(strategy="acme_fsdp", accelerator="cuda", devices=8, precision="16-mixed", **QUIET)
    assert "LP205" in excinfo.value.codes


def test_acme_fsdp_on_cpu_for_local_runs() -> None:
    """The node policy is about Acme's GPUs: a CPU run on a laptop (FSDP2 over gloo) is not refused."""
    trainer = Trainer(strategy="acme_fsdp", accelerator="cpu", devices=2, **QUIET)
    assert trainer.strategy._lp_context.world_size == 2


def test_acme_bf16_on_an_a100_and_refused_on_a_v100(simulated_gpus) -> None:
    simulated_gpus(8, capability=(8, 0))
    plugin = lightning_presets.precision("acme-bf16")
    assert plugin.precision == "bf16-mixed"
    simulated_gpus(8, capability=(7, 0))
    with pytest.raises(lightning_presets.PresetConfigError) as excinfo:
        lightning_presets.precision("acme-bf16")
    assert excinfo.value.codes == ("LP604",)
    assert "Acme's nodes are A100s and H100s" in str(excinfo.value)


def test_lightning_presets_list_shows_where_acme_presets_come_from() -> None:
    listing = subprocess.run(
        [sys.executable, "-m", "lightning_presets", "list", "--json"], capture_output=True, text=True, check=True
    )
    rows = {row["name"]: row for row in json.loads(listing.stdout)["presets"]}
    for name, kind in (("acme_fsdp", "strategy"), ("acme-bf16", "precision")):
        assert rows[name]["kind"] == kind
        assert (rows[name]["distribution"], rows[name]["version"], rows[name]["status"]) == (
            "acme-presets", "1.0.0", "ok",
        )  # fmt: skip
