"""docs/scaling-out.md: every ``lightning-presets check`` line on the page runs, with the exit code and the codes the
page writes after it (``# exit 1: LP705``); the page's YAML files are written where the commands read them."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from harness import run_job
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


def kubeflow_pod(preset: str) -> None:
    """One pod of a PyTorchJob of 2 replicas, one process each (the harness sets RANK, WORLD_SIZE=2 and MASTER_*, as
    the operator does): KubeflowEnvironment, devices=1 and no num_nodes, as the page's LP725 example writes it."""
    import warnings

    import lightning.pytorch as pl
    import torch
    from lightning.pytorch.plugins.environments import KubeflowEnvironment
    from torch.utils.data import DataLoader, TensorDataset

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.blocks = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(2))

        def training_step(self, batch: Any, _: int) -> Any:
            features = batch[0]
            for block in self.blocks:
                features = block(features)
            return features.pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.1)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = pl.Trainer(strategy=preset, accelerator="cpu", devices=1, plugins=[KubeflowEnvironment()],
                             max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                             enable_model_summary=False)  # fmt: skip
        trainer.fit(Model(), DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4))
    codes = sorted({each.message.finding.code for each in caught if hasattr(each.message, "finding")})
    print("RESULT " + json.dumps({"world": trainer.world_size, "codes": codes, "steps": trainer.global_step}))


def test_the_kubeflow_example_runs_as_the_page_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The page's 2-pod PyTorchJob with KubeflowEnvironment, devices=1 and num_nodes=1, run for real on 2 processes:
    fsdp2 lays its mesh on the operator's world of 2 and trains (no LP211: the guards read that world), while DDP
    splits the data among devices × num_nodes = 1 and its sampler refuses rank 1, in the words LP725 quotes."""
    pods = {"KUBERNETES_PORT": "tcp://10.0.0.1:443"}
    job = run_job("test_scaling_out:kubeflow_pod", "fsdp2", path=(str(Path(__file__).parent),), env=pods)
    assert job.outcome == "trained", job.describe()
    assert job.reports() == [{"world": 2, "codes": [], "steps": 2}] * 2
    job = run_job("test_scaling_out:kubeflow_pod", "ddp_static_graph", path=(str(Path(__file__).parent),), env=pods)
    refused = job.errors()[1]["message"]
    assert refused == "Invalid rank 1, rank should be in the interval [0, 0]", job.describe()
    args = "--config kubeflow.yaml --num-nodes 1 --strategy ddp_static_graph --cluster kubeflow --env PET_NNODES=2"
    assert any(line.startswith(f"lightning-presets check {args}  # exit 0: LP725") for line in _page_lines())
    for match in FILE.finditer(PAGE.read_text(encoding="utf-8")):
        (tmp_path / match["name"]).write_text(match["text"], encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    main(["check", *shlex.split(args), "--json"])
    (finding,) = json.loads(capsys.readouterr().out)["findings"]
    assert f"refuses rank 1: {refused!r}" in finding["message"], finding


def _page_lines() -> list[str]:
    return PAGE.read_text(encoding="utf-8").splitlines()
