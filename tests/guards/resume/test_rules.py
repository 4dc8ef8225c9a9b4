"""``lightning_presets.guards.resume.rules``: each error rule's executed proof and its accepted neighbours (run, and
each rule widened, by ``neighbours.neighbour_tests``).

Each checkpoint, refused by its guard before Lightning reads a byte of it, then
resumed for real with the resume guards switched off (``tests/scripts/resume_run.py``, one CPU process), fails in
Lightning's or torch's own code. Where the refusal names a conversion, the converted checkpoint resumes with the
uninterrupted run's losses.

DeepSpeed's ZeRO folders (LP802, LP803, LP807) cannot be written or loaded without CUDA: their proof is the GPU
check ``benchmarks/gpu/resume_checks.py`` (prepared, see ``tests/test_examples.py``'s ``NOT_EXECUTED``).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from proof import Proof

from harness import run_command
from lightning_presets.guards.resume import resume_findings
from neighbours import (
    BLOCKS,
    CPU,
    FIT,
    MODEL_PARALLEL_FOLDER,
    Neighbour,
    _t,
    adder,
    n,
    neighbour_tests,
    trainer_file,
    zero_checkpoint,
)

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "tests" / "scripts"))
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_resume_matrix as bench  # noqa: E402
from checkpoint_layouts import fsdp_folder  # noqa: E402

pytestmark = pytest.mark.distributed

# --- accepted neighbours ------------------------------------------------------------------------------------------

NEIGHBOURS: dict[str, tuple[Neighbour, ...]] = {}
"""This module's error rules' accepted neighbours, by code (``tests/neighbours.py`` explains them)."""
_add = adder(NEIGHBOURS)

_add(
    "LP801",
    n(MODEL_PARALLEL_FOLDER + _t('"fsdp2"', "cpu", "", 2) + FIT, "fsdp2 loads its own DCP folder", CPU),
    n(MODEL_PARALLEL_FOLDER + _t('"fsdp2_offload_ckpt"', "cpu", "", 2) + FIT, "the other fsdp2 preset", CPU),
    n(trainer_file() + _t('"ddp_static_graph"', "cpu", "", 2) + FIT, "DDP loads a single file", CPU),
    n(trainer_file() + _t('"fsdp2"', "cpu", "", 2) + FIT, "fsdp2 loads a single file too", CPU),
)
_add(
    "LP802",
    n(zero_checkpoint() + _t('"deepspeed_zero2_offload"') + FIT, "8 shards, 8 GPUs"),
    n(zero_checkpoint() + _t('"deepspeed_zero2_offload"', "cuda", ", num_nodes=2", 4) + FIT, "8 = 4 × 2 nodes"),
    n(zero_checkpoint(world=4) + _t('"deepspeed_zero2_offload"', "cuda", "", 4) + FIT, "4 shards, 4 GPUs"),
)
_add(
    "LP803",
    n(zero_checkpoint(stage=2) + _t('"deepspeed_zero2_offload"') + FIT, "ZeRO-2 into ZeRO-2"),
    n(zero_checkpoint(stage=1) + _t('"deepspeed_zero2_offload"') + FIT, "ZeRO-1 into ZeRO-2: the same files"),
    n(zero_checkpoint(stage=3) + _t('"deepspeed_zero3_offload_ckpt"') + FIT, "ZeRO-3 into ZeRO-3"),
)
_FABRIC_LOAD = (
    BLOCKS + "torch.save({'model': model.state_dict()}, 'run.ckpt')   # weights only\n"
    "optimizer = torch.optim.Adam(model.parameters())\n"
    'fabric = Fabric(strategy="ddp_static_graph", accelerator="cpu", devices=1)\n'
    "fabric.launch()   # one process: a gloo group of one in this process, destroyed below\n"
    "try:\n"
    '    fabric.load("run.ckpt", {"model": model, "optimizer": optimizer}%s)\n'
    "finally:\n"
    "    torch.distributed.destroy_process_group()\n"
)
_add(
    "LP804",
    n(trainer_file() + _t('"ddp_static_graph"', "cpu", "", 2) + FIT, "the optimizer state saved", CPU),
    n(
        BLOCKS + "torch.save({'state_dict': model.state_dict(), 'optimizer_states': [], 'lr_schedulers': [], "
        "'pytorch-lightning_version': '2.6.6'}, 'run.ckpt')   # a fit without an optimizer\n"
        + _t('"ddp_static_graph"', "cpu", "", 2)
        + FIT,
        "an empty optimizer list loads",
        CPU,
    ),
    n(
        _FABRIC_LOAD % ", strict=False",
        "Fabric.load(strict=False) of a weights-only file skips the missing optimizer (the review's false rejection; "
        "the load runs for real here, in a gloo group of one)",
        CPU,
    ),
    n(
        _FABRIC_LOAD.replace(', "optimizer": optimizer', "") % "",
        "Fabric.load of the weights into a state without optimizer",
        CPU,
    ),
)
_add(
    "LP805",
    n(MODEL_PARALLEL_FOLDER + _t('"fsdp2"', "cpu", "", 2) + FIT, "ModelParallel's layout into fsdp2", CPU),
    n(MODEL_PARALLEL_FOLDER + _t('"fsdp2_offload_ckpt"', "cpu", "", 2) + FIT, "the same into fsdp2_offload_ckpt", CPU),
    n(trainer_file() + _t('"fsdp2"', "cpu", "", 2) + FIT, "one file loads in both", CPU),
)
_add(
    "LP806",
    n(MODEL_PARALLEL_FOLDER + _t('"fsdp2"', "cpu", "", 2) + FIT, "optimizer state keyed by name", CPU),
    n(trainer_file() + _t('"fsdp2"', "cpu", "", 2) + FIT, "a plain optimizer's state in one file: re-keyed", CPU),
    n(MODEL_PARALLEL_FOLDER + _t('"fsdp2_offload_ckpt"', "cpu", "", 2) + FIT, "the same, fsdp2_offload_ckpt", CPU),
)
_add(
    "LP807",
    n(zero_checkpoint() + _t('"deepspeed_zero2_offload"') + FIT, "the folder with 'latest'"),
    n(zero_checkpoint() + _t('"deepspeed_zero2_offload"') + '.fit(model, ckpt_path="run.ckpt/")', "a trailing slash"),
    n(zero_checkpoint(stage=3) + _t('"deepspeed_zero3_offload_ckpt"') + FIT, "ZeRO-3's root folder"),
)
_add(
    "LP808",
    n(trainer_file() + _t('"ddp_static_graph"', "cpu", "", 2) + FIT, "the Trainer's own file", CPU),
    n(
        trainer_file("'epoch': 3, 'global_step': 30, ") + _t('"ddp_static_graph"', "cpu", "", 2) + FIT,
        "with the loops' counters",
        CPU,
    ),
    n(MODEL_PARALLEL_FOLDER + _t('"fsdp2"', "cpu", "", 2) + FIT, "the Trainer's sharded folder", CPU),
)


(
    test_the_neighbour_is_accepted,
    test_a_rule_widened_to_always_fire_is_noticed,
    test_a_rule_widened_at_one_neighbour_is_noticed_by_that_neighbour,
) = neighbour_tests(NEIGHBOURS)


# --- executed proofs ----------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ddp_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A real 1-process ddp_static_graph run: the checkpoint after step 3 and its uninterrupted losses."""
    path = tmp_path_factory.mktemp("resume") / "ddp.ckpt"
    report, _ = bench.run(["save", "--strategy", "ddp_static_graph", "--devices", "1", "--out", str(path)])
    assert report["error"] is None, report
    return path, report["losses"]


def refused(proof: Proof, code: str, strategy: str, path: Path) -> None:
    """The guard refuses ``path`` in ``strategy``'s own ``load_checkpoint`` (what ``fit(ckpt_path=...)`` calls)."""
    from lightning.pytorch import Trainer

    def build() -> None:
        Trainer(strategy=strategy, accelerator="cpu", devices=1, logger=False).strategy.load_checkpoint(str(path))

    proof.refused(code, build)


def fails_unguarded(proof: Proof, code: str, strategy: str, path: Path, kind: str, match: str) -> None:
    """A real resume of ``path`` with ``strategy``, the resume guards off, fails with ``kind`` matching ``match``."""
    report, _ = bench.run(["resume", "--strategy", strategy, "--devices", "1", "--ckpt", str(path)])
    error = report["error"]
    assert error is not None, report
    assert error["type"] == kind, error
    where = re.search(r'File "(.+?)", line (\d+)', error["where"])
    assert where, error
    proof.record_raised((code,), kind, error["message"], f"{where[1]}:{where[2]}", match, guard_off=True)


def resumes_converted(code: str, path: Path, strategy: str, losses: dict[str, float]) -> str:
    """Run the steps of the conversion the refusal ``code`` names (the object its hint renders) and resume from its
    result with the guards on: the outcome against ``losses``, the uninterrupted run's."""
    from lightning.pytorch import Trainer

    from lightning_presets.guards.resume import render

    job = Trainer(strategy=strategy, accelerator="cpu", devices=1, logger=False).strategy
    (finding,) = resume_findings(path, job._lp_context, strategy=job)
    assert finding.code == code
    conversion = bench.conversion_of(code, str(path), job)
    assert conversion is not None
    assert conversion.resumes, conversion
    assert render(conversion) in finding.hint
    assert repr(conversion.result) in finding.hint
    for command in bench.command_lines(conversion):
        done = run_command(command, cwd=path.parent)  # the hint's step, in a process forked by the harness
        assert done.returncode == 0, done.describe()
    report, _ = bench.run(
        ["resume", "--strategy", strategy, "--devices", "1", "--ckpt", conversion.result], guards=True
    )
    return bench._outcome(report, losses)[0]


@pytest.mark.proves("LP801")
def test_lp801_sharded_folder_into_ddp_fails_in_torch_load(tmp_path: Path, proof: Proof) -> None:
    folder = tmp_path / "fsdp2.ckpt"
    report, _ = bench.run(["save", "--strategy", "fsdp2", "--devices", "1", "--out", str(folder)])
    assert report["error"] is None, report
    assert folder.is_dir()
    refused(proof, "LP801", "ddp_static_graph", folder)
    fails_unguarded(proof, "LP801", "ddp_static_graph", folder, "IsADirectoryError", "Is a directory")


@pytest.mark.proves("LP804")
def test_lp804_weights_only_checkpoint_fails_in_lightning(
    ddp_checkpoint: tuple[Path, dict[str, Any]], proof: Proof
) -> None:
    path, _ = ddp_checkpoint
    weights = torch.load(path, weights_only=False)
    del weights["optimizer_states"]
    torch.save(weights, path.with_name("weights.ckpt"))
    refused(proof, "LP804", "ddp_static_graph", path.with_name("weights.ckpt"))
    fails_unguarded(proof, "LP804", "ddp_static_graph", path.with_name("weights.ckpt"), "KeyError",
                    "contains only the model")  # fmt: skip


@pytest.mark.proves("LP808")
def test_lp808_fabric_checkpoint_fails_in_trainer_fit(
    ddp_checkpoint: tuple[Path, dict[str, Any]], proof: Proof
) -> None:
    path, _ = ddp_checkpoint
    full = torch.load(path, weights_only=False)
    fabric = {"model": full["state_dict"], "optimizer": full["optimizer_states"][0], "step": 3}
    torch.save(fabric, path.with_name("fabric.ckpt"))
    refused(proof, "LP808", "ddp_static_graph", path.with_name("fabric.ckpt"))
    fails_unguarded(
        proof, "LP808", "ddp_static_graph", path.with_name("fabric.ckpt"), "KeyError", "pytorch-lightning_version"
    )


@pytest.mark.proves("LP808")
def test_lp808_every_key_fit_reads_but_the_version_fails_and_with_it_resumes(
    ddp_checkpoint: tuple[Path, dict[str, Any]], proof: Proof
) -> None:
    """fit reads ``pytorch-lightning_version`` before anything else: weights, optimizer and scheduler states without it
    still fail; the same file with it (what the rule's fixed example writes) resumes with the guards on."""
    path, _ = ddp_checkpoint
    full = torch.load(path, weights_only=False)
    fit_reads = {key: full[key] for key in ("state_dict", "optimizer_states", "lr_schedulers")}
    torch.save(fit_reads, path.with_name("unversioned.ckpt"))
    refused(proof, "LP808", "ddp_static_graph", path.with_name("unversioned.ckpt"))
    fails_unguarded(
        proof, "LP808", "ddp_static_graph", path.with_name("unversioned.ckpt"), "KeyError", "pytorch-lightning_version"
    )
    torch.save({**fit_reads, "pytorch-lightning_version": full["pytorch-lightning_version"]}, path.with_name("ok.ckpt"))
    report, _ = bench.run(
        ["resume", "--strategy", "ddp_static_graph", "--devices", "1", "--ckpt", str(path.with_name("ok.ckpt"))],
        guards=True,
    )
    assert report["error"] is None, report


@pytest.mark.proves("LP805")
def test_lp805_fsdp_layout_fails_in_fsdp2(ddp_checkpoint: tuple[Path, dict[str, Any]], proof: Proof) -> None:
    path, losses = ddp_checkpoint
    folder = fsdp_folder(path.with_name("fsdp.ckpt"), torch.load(path, weights_only=False))
    refused(proof, "LP805", "fsdp2", folder)
    fails_unguarded(
        proof, "LP805", "fsdp2", folder, "CheckpointException", "Missing key in checkpoint state_dict: state_dict"
    )
    assert resumes_converted("LP805", folder, "fsdp2", losses) == "resumes"


@pytest.mark.proves("LP806")
def test_lp806_id_keyed_sharded_optimizer_fails_in_fsdp2(
    ddp_checkpoint: tuple[Path, dict[str, Any]], proof: Proof
) -> None:
    import torch.distributed.checkpoint as dcp

    path, losses = ddp_checkpoint
    full = torch.load(path, weights_only=False)
    folder = path.with_name("ids.ckpt")
    dcp.save(
        {"state_dict": full.pop("state_dict"), "optimizer_0": full.pop("optimizer_states")[0]},
        checkpoint_id=str(folder),
    )
    torch.save(full, folder / "meta.pt")
    refused(proof, "LP806", "fsdp2", folder)
    fails_unguarded(
        proof, "LP806", "fsdp2", folder, "CheckpointException", "Missing key in checkpoint state_dict: optimizer_0"
    )
    assert resumes_converted("LP806", folder, "fsdp2", losses) == "resumes"
