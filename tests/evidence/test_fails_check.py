"""``lightning-presets check``'s codes: the same job given to Lightning on this CPU machine, with the cluster's
variables set as its launcher sets them (one process: the rank the job starts here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from jobs import trainer
from proof import Proof

pytestmark = pytest.mark.usefixtures("process_group")


@pytest.mark.proves("LP700", "LP701", "LP702", "LP703", "LP704")
def test_lp700_to_lp704_lightning_rejects_these_arguments_itself(proof: Proof) -> None:
    with proof.raises(Exception, r"devices", code="LP700"):
        trainer("ddp", devices=0)
    with proof.raises(ValueError, r"invalid strategy name: `strategy='fsdp_ofload_ckpt'`", code="LP701"):
        trainer("fsdp_ofload_ckpt")
    with proof.raises(ValueError, r"Precision 'bf16-mix' is invalid", code="LP702"):
        trainer("ddp", precision="bf16-mix")
    with proof.raises(ValueError, r"invalid accelerator name: `accelerator='cdua'`", code="LP703"):
        trainer("ddp", accelerator="cdua")
    with proof.raises(Exception, r"fp8_everything", code="LP704"):
        trainer("ddp", plugins=["fp8_everything"])  # a precision preset name given where Lightning reads plugins


def test_lp709_torchruns_world_trains_whatever_devices_per_node_says(two_ranks: dict[str, Any]) -> None:
    """Not a failure: torchrun started 2 nodes × 1 process (LOCAL_WORLD_SIZE=1) and the Trainer says devices=2 on 1
    node. Lightning takes the world and ranks from torchrun; both ranks trained 3 steps and ended with the same
    weights. LP709 is therefore a warning."""
    states = [two_ranks["states"][("lp709_elastic", rank)] for rank in (0, 1)]
    assert [state["environment"] for state in states] == ["TorchElasticEnvironment"] * 2
    assert [state["world"] for state in states] == [2, 2]
    for state in states:
        assert len(state["losses"]) == 3
        assert state["losses"][-1] < state["losses"][0]
    assert states[0]["losses"] != states[1]["losses"]  # each rank saw its own batches
    assert states[0]["checksum"] == states[1]["checksum"]  # and the gradients were reduced across them


_UNUSED = """
import sys
import torch
from torch.utils.data import DataLoader, TensorDataset
import lightning_presets
from lightning.pytorch import Trainer
from lightning_presets.tools.plan.reference_models import UnusedHeadModule
from proof import report

if __name__ == "__main__":
    overrides = dict(eval(sys.argv[2]))  # the preset's overrides, a Python literal
    module = UnusedHeadModule()
    if "frozen" in sys.argv[3:]:
        module.aux.requires_grad_(False)
    trainer = Trainer(strategy=lightning_presets.strategy(sys.argv[1], **overrides), accelerator="cpu", devices=2,
                      max_steps=3, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)
    try:
        trainer.fit(module, DataLoader(TensorDataset(torch.randn(32, 32)), batch_size=4,
                                       collate_fn=lambda rows: torch.stack([row[0] for row in rows])))
    except RuntimeError as error:
        report("lp732_unused_parameters", error)
        sys.exit(1)
    print("TRAINED", trainer.global_rank)
"""

_UNUSED_MODEL = "lightning_presets.tools.plan.reference_models:unused_head_tiny"
_GAN = """
import torch
from torch import nn
from lightning.pytorch import LightningModule


class Gan(LightningModule):
    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Linear(8, 32)
        self.discriminator = nn.Linear(32, 1)  # not in forward: its own optimizer steps it in training_step
        self.example_input_array = torch.zeros(4, 8)

    def forward(self, noise):
        return self.generator(noise)

    def training_step(self, batch, index):
        generator, discriminator = self.optimizers()
        loss = self.discriminator(self(batch)).mean()
        self.manual_backward(loss)
        generator.step()
        discriminator.step()

    def configure_optimizers(self):
        return [torch.optim.SGD(self.generator.parameters()), torch.optim.SGD(self.discriminator.parameters())]
"""


def _unused_job(tmp_path: Path, preset: str, overrides: str, *flags: str) -> Any:
    from harness import run_job

    script = tmp_path / "unused.py"
    script.write_text(_UNUSED)
    here = str(Path(__file__).resolve().parent)
    return run_job(script, preset, overrides, *flags, path=(here,), cwd=tmp_path, timeout=300)


def _check_codes(preset: str, model: str = "", **overrides: Any) -> list[str]:
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    request = CheckRequest(arguments={"strategy": preset, "accelerator": "cpu", "devices": 2},
                           overrides=overrides, model=model or _UNUSED_MODEL)  # fmt: skip
    return list(run_check(request).codes)


@pytest.mark.distributed
@pytest.mark.proves("LP732")
def test_lp732_a_parameter_without_a_gradient_fails_ddp_in_the_second_step(
    proof: Proof, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2 gloo processes: DDP without find_unused_parameters or a static graph, and a head the loss never reaches,
    fails on every rank; `check --model` says so before launch. Its neighbours train and pass the check: the static
    graph, find_unused_parameters=True, and the unused head frozen."""
    from proof import reports

    assert "LP732" in _check_codes("ddp_static_graph", static_graph=False)
    done = _unused_job(tmp_path, "ddp_static_graph", "{'static_graph': False}")
    assert "TRAINED" not in done.stdout, done.describe()
    proof.child(reports(done.stdout), "lp732_unused_parameters", "RuntimeError", "not used in producing the loss",
                code="LP732")  # fmt: skip
    for overrides, flags in (("{}", ()), ("{'static_graph': False, 'find_unused_parameters': True}", ()),
                             ("{'static_graph': False}", ("frozen",))):  # fmt: skip
        done = _unused_job(tmp_path, "ddp_static_graph", overrides, *flags)
        assert done.stdout.count("TRAINED") == 2, done.describe()
    assert "LP732" not in _check_codes("ddp_static_graph")
    assert "LP732" not in _check_codes("ddp_static_graph", static_graph=False, find_unused_parameters=True)
    # manual optimization: the forward alone is not the step (a GAN's discriminator is not in its forward)
    (tmp_path / "gan_model.py").write_text(_GAN)
    monkeypatch.chdir(tmp_path)  # `check --model` imports from the current directory, as `python -m` would
    assert "LP732" not in _check_codes("ddp_static_graph", static_graph=False, model="gan_model:Gan")


_MANUAL_MODEL = "lightning_presets.tools.plan.reference_models:manual_tiny"


def _model_check_codes(spec: str, **arguments: Any) -> list[str]:
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    request = CheckRequest(arguments={"strategy": "ddp_static_graph", "accelerator": "cpu", "devices": 2, **arguments},
                           model=spec)  # fmt: skip
    return list(run_check(request).codes)


@pytest.mark.proves("LP733")
def test_lp733_fit_refuses_clipping_by_the_trainer_under_manual_optimization(proof: Proof) -> None:
    """Lightning's fit (one CPU process here; every rank of a launched job) refuses the model before it runs a step;
    `check --model` runs the same validator first. Its neighbours pass both: no Trainer clipping (the model clips
    itself), automatic optimization with clipping, and manual optimization without accumulation."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from lightning_presets.tools.plan.reference_models import manual_tiny

    assert "LP733" in _model_check_codes(_MANUAL_MODEL, gradient_clip_val=1.0)
    data = DataLoader(TensorDataset(torch.randn(8, 32)), batch_size=4, collate_fn=lambda rows: torch.stack(
        [row[0] for row in rows]))  # fmt: skip
    with proof.raises(Exception, r"Automatic gradient clipping is not supported for manual optimization", code="LP733"):
        trainer("ddp", devices=1, max_steps=1, gradient_clip_val=1.0).fit(manual_tiny(), data)
    assert "LP733" not in _model_check_codes(_MANUAL_MODEL)
    assert "LP733" not in _model_check_codes(_MANUAL_MODEL, accumulate_grad_batches=1)
    assert "LP733" not in _model_check_codes("lightning_presets.tools.plan.reference_models:unused_head_tiny",
                                             gradient_clip_val=1.0)  # fmt: skip
    trainer("ddp", devices=1, max_steps=1).fit(manual_tiny(), data)  # the model's own clipping trains
