"""check --model's rehearsal (``tools.check.rehearsal``): a factory that exits, hangs or starts helpers cannot end,
hang or outlive the check (issue 38 items 5 and 6); what one CPU process cannot run is a warning, never an error; the
stages completed are said."""

from __future__ import annotations

import os
import signal
import textwrap
import threading
import time
from pathlib import Path

import pytest

from lightning_presets.core.findings import UsageError
from lightning_presets.tools.check import CheckRequest, rehearsal
from lightning_presets.tools.verdict import run_check

MODELS = """
import os, signal, subprocess, sys, time
import torch
from torch import nn
from torch.nn import functional as F
from lightning.pytorch import LightningModule


def exits():
    os._exit(0)


def hangs():
    helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    with open(os.environ["REHEARSAL_PIDS"], "w") as pids:
        pids.write(f"{os.getpid()} {helper.pid}")
    time.sleep(600)


class Tiny(LightningModule):
    def __init__(self):
        super().__init__()
        self.net = nn.Linear(4, 2)
        self.example_input_array = (torch.zeros(2, 4), torch.zeros(2, dtype=torch.long))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


class NeedsCuda(Tiny):
    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.net(x.cuda()), y.cuda())


class NoBatch(Tiny):
    def __init__(self):
        super().__init__()
        self.example_input_array = None


class SetupData(Tiny):
    # Lightning's usual pattern: setup() makes the dataset its train_dataloader() serves

    def setup(self, stage):
        self.data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randint(0, 2, (8,)))

    def train_dataloader(self):
        return torch.utils.data.DataLoader(self.data, batch_size=4)


class DataElsewhere(Tiny):
    # data that lives where the job runs, not here

    def train_dataloader(self):
        return torch.utils.data.DataLoader(torch.load("/cluster/datasets/train.pt"), batch_size=4)


class UsesDist(Tiny):
    # the step's own collectives and world size, as a DDP job runs them
    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        total = loss.detach().clone()
        torch.distributed.all_reduce(total)
        if torch.distributed.get_world_size() != 2:
            raise RuntimeError("rehearsed at the wrong world size")
        return loss


class ExitsInStep(Tiny):
    def training_step(self, batch, batch_idx):
        os._exit(3)


class CrashesOnce(Tiny):
    def training_step(self, batch, batch_idx):
        marker = os.environ["REHEARSAL_PIDS"] + ".crashed"
        if not os.path.exists(marker):
            open(marker, "w").close()
            os.kill(os.getpid(), signal.SIGSEGV)
        return super().training_step(batch, batch_idx)


class TwoSchedulers(Tiny):
    # legal for Lightning's own strategies; DeepSpeed's reads one optimizer and at most one scheduler
    def configure_optimizers(self):
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1), torch.optim.lr_scheduler.StepLR(opt, 2)]


class CrashesAlways(Tiny):
    def training_step(self, batch, batch_idx):
        os.kill(os.getpid(), signal.SIGSEGV)
"""


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "rehearsal_models_t.py").write_text(textwrap.dedent(MODELS))
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("REHEARSAL_PIDS", str(tmp_path / "pids"))
    return tmp_path


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state in ("Z", "X")


def _wait_gone(*pids: int, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if all(_gone(pid) for pid in pids):
            return True
        time.sleep(0.05)
    return False


def _check(spec: str, timeout_s: float | None = None) -> list[tuple[str, str]]:
    request = CheckRequest(arguments={"strategy": "ddp_static_graph", "accelerator": "cpu", "devices": 2},
                           model=f"rehearsal_models_t:{spec}")  # fmt: skip
    report = run_check(request, timeout_s)
    return [(each.code, each.severity) for each in report.findings]


def test_a_factory_calling_os_exit_is_an_error_not_a_silent_exit(models: Path) -> None:
    with pytest.raises(UsageError, match=r"os\._exit\(0\)"):
        _check("exits")


def test_a_model_that_ends_the_process_in_its_step_is_an_error(models: Path) -> None:
    with pytest.raises(UsageError, match=r"exit code 3"):
        _check("ExitsInStep")


def test_a_rehearsal_ended_by_a_signal_is_tried_once_more(models: Path) -> None:
    """A signal nobody sent may be the fork's (a lock another thread held), not the model's: one more try; a model
    that crashes every time is still an error, said with the signal."""
    assert ("LP741", "error") not in _check("CrashesOnce")
    assert (models / "pids.crashed").exists()  # it did crash the first time
    with pytest.raises(UsageError, match=r"SIGSEGV twice"):
        _check("CrashesAlways")


def test_a_factory_that_never_returns_is_stopped_with_its_helpers(models: Path) -> None:
    started = time.monotonic()
    with pytest.raises(UsageError, match=r"longer than 3 s"):
        _check("hangs", timeout_s=3)
    assert time.monotonic() - started < 60
    pids = [int(each) for each in (models / "pids").read_text().split()]
    assert _wait_gone(*pids), pids  # the factory's process and the helper it started


def test_sigterm_to_the_check_ends_the_rehearsal_and_its_helpers(models: Path) -> None:
    """SIGTERM (or SIGHUP) to the checking process: its child's whole group is killed before it ends."""
    deadline = time.monotonic() + 60

    def send() -> None:
        while not (models / "pids").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    timer = threading.Timer(0, send)
    timer.start()
    with pytest.raises(KeyboardInterrupt, match="SIGTERM"):
        rehearsal.rehearse("rehearsal_models_t:hangs", {}, None, timeout_s=120)
    timer.join()
    pids = [int(each) for each in (models / "pids").read_text().split()]
    assert _wait_gone(*pids), pids
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # restored


def test_what_a_cpu_cannot_run_is_a_warning_and_the_stages_are_said(models: Path) -> None:
    result = rehearsal.rehearse("rehearsal_models_t:NeedsCuda", {}, None)
    assert result.stage is None, result
    assert "cuda" in result.limitation.lower(), result
    assert result.completed == ("set-up",)
    findings = rehearsal.findings(result, "rehearsal_models_t:NeedsCuda", "Trainer()")
    assert [(each.code, each.severity) for each in findings] == [("LP743", "warning")]
    legal = rehearsal.rehearse("rehearsal_models_t:Tiny", {"precision": "16-mixed"}, None)
    assert legal.completed == ("set-up", "first training step"), legal
    assert not legal.limitation, legal
    assert any("rehearsed as bf16-mixed" in note for note in legal.notes), legal.notes
    assert any("example_input_array" in note for note in legal.notes), legal.notes


def test_a_model_without_a_batch_is_a_usage_error_naming_both_sources(models: Path) -> None:
    with pytest.raises(UsageError, match=r"neither a train_dataloader\(\) nor an example_input_array"):
        _check("NoBatch")


def test_sighup_interrupts_the_wait_and_the_handlers_come_back() -> None:
    """What ``plan --model`` and ``check --model`` wait in: SIGHUP (a closed terminal) becomes an interrupt, so the
    caller's ``finally`` kills the child's group; outside the block the previous handler is back."""
    from lightning_presets.tools.simulation.processes import terminated_as_interrupt

    def hang_up() -> None:
        with terminated_as_interrupt():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)

    before = signal.getsignal(signal.SIGHUP)
    with pytest.raises(KeyboardInterrupt, match="SIGHUP"):
        hang_up()
    assert signal.getsignal(signal.SIGHUP) is before


def test_data_made_in_setup_is_rehearsed_and_data_not_here_is_a_warning(models: Path) -> None:
    """The loaders come from Lightning's own calls (after prepare_data and setup), as in the job; data this machine
    lacks is the rehearsal's limit, never an error of the job."""
    assert _check("SetupData") == []
    legal = rehearsal.rehearse("rehearsal_models_t:SetupData", {}, None)
    assert legal.completed == ("set-up", "first training step"), legal
    assert _check("DataElsewhere") == [("LP743", "warning")]


def test_the_steps_own_collectives_run_in_a_fake_world_of_the_jobs_size(models: Path) -> None:
    request = CheckRequest(arguments={"strategy": "ddp_static_graph", "accelerator": "cpu", "devices": 2},
                           model="rehearsal_models_t:UsesDist")  # fmt: skip
    report = run_check(request)
    assert report.findings == ()
    said = [note for note in report.request.notes if note.startswith("rehearsal (")]  # text and --json say it
    assert len(said) == 1, report.request.notes
    assert "completed set-up, first training step" in said[0], said


def test_a_process_that_ran_autograd_rehearses_in_a_fresh_interpreter(
    models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """torch refuses the backward pass in a child forked after the parent ran autograd (seen on torch 2.15): that
    limitation sends the rehearsal to a fresh interpreter, which completes it."""
    from lightning_presets.tools.check.rehearsal import runner

    forked = rehearsal.Rehearsal(completed=("set-up",), limitation=f"{rehearsal.FORKED_AUTOGRAD} (RuntimeError: ...)")
    fresh: list[int] = []
    rehearse_fresh = runner._rehearse_fresh

    def counted(payload: dict[str, object], timeout_s: float) -> rehearsal.Rehearsal:
        fresh.append(int(payload["rank"]))  # type: ignore[call-overload]
        return rehearse_fresh(payload, timeout_s)

    monkeypatch.setattr(runner, "result_of", lambda *arguments: forked)  # what each forked rank would report
    monkeypatch.setattr(runner, "_rehearse_fresh", counted)
    result = rehearsal.rehearse("rehearsal_models_t:Tiny", {}, None, timeout_s=120, world_size=2)
    assert fresh == [0, 1]  # each rank's child, run again in a fresh interpreter as that rank
    assert result.limitation == ""
    assert "first training step" in result.completed
    assert result.ranks == (0, 1)


def test_a_family_whose_rehearsal_is_deepspeeds_engine_reads_its_optimizers(models: Path) -> None:
    """The family's declared ``rehearsal`` field, not its name, decides DeepSpeed's reading of the optimizers and
    schedulers (one of each): two schedulers are a set-up error under the DeepSpeed family, legal under DDP's."""
    from lightning_presets.strategies.deepspeed.family import DEEPSPEED_FAMILY

    assert DEEPSPEED_FAMILY.rehearsal == "deepspeed_engine"
    refused = rehearsal.rehearse("rehearsal_models_t:TwoSchedulers", {}, DEEPSPEED_FAMILY)
    assert refused.stage == "set-up", refused
    assert "single optimizer" in refused.exception.lower() or "scheduler" in refused.exception.lower(), refused
    legal = rehearsal.rehearse("rehearsal_models_t:TwoSchedulers", {}, "ddp")
    assert legal.stage is None, legal
    assert legal.completed == ("set-up", "first training step"), legal
