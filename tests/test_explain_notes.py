"""The explanation at the moment of failure: notes appended to an exception raised inside a preset's run (Trainer:
the head's ``on_exception``; Fabric: the head's methods), the message kept, and our own failures contained."""

from __future__ import annotations

import inspect
import os
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

import lightning_presets
from lightning_presets.failures import annotate, explained, explaining, explanation, notes, probes

SCRIPTS = Path(__file__).resolve().parent / "scripts"
OOM = "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 23.43 GiB of which 1 MiB is free."
UNUSED = (
    "Expected to have finished reduction in the prior iteration before starting a new one. This error indicates that "
    "your module has parameters that were not used in producing loss.\nParameter indices which did not receive grad "
    "for rank 0: 3 4"
)


def test_annotate_appends_notes_and_keeps_the_message_and_type() -> None:
    error = RuntimeError(OOM)
    annotate(error)
    assert str(error) == OOM
    assert type(error) is RuntimeError
    assert len(error.__notes__) == 1
    assert error.__notes__[0].startswith("lightning-presets explain [LP059 oom_config]: GPU 0 ran out of memory")
    assert "fix: lightning-presets plan" in error.__notes__[0]
    annotate(error)  # twice (nested hooks): once
    assert len(error.__notes__) == 1


def test_an_exception_no_signature_knows_gets_no_note() -> None:
    error = ValueError("the batch of rank 1 has 0 samples")
    annotate(error)
    assert not hasattr(error, "__notes__")


def test_the_cause_chain_is_read() -> None:
    outer = TypeError("wrapping failed")
    outer.__cause__ = RuntimeError("NCCL error in: ProcessGroupNCCL.cpp:1287, unhandled system error, NCCL 2.4.8")
    annotate(outer)
    assert "[LP040 nccl_network]" in outer.__notes__[0]


def test_our_own_failure_never_hides_or_changes_the_exception(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kwargs: Any) -> list[str]:
        raise KeyError("a bug of ours")

    monkeypatch.setattr(notes, "explanation", broken)
    error = RuntimeError(OOM)
    annotate(error)
    assert str(error) == OOM
    assert not hasattr(error, "__notes__")


def test_a_failing_probe_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(text: str) -> str:
        raise OSError("no /dev/shm here")

    monkeypatch.setattr(probes, "PROBES", {"boom": broken})
    assert probes.run_probe("boom", "x") is None
    assert probes.run_probe("no_such_probe", "x") is None
    assert probes.run_probe(None, "x") is None


def test_the_shared_memory_probe_reads_the_folder(tmp_path: Path) -> None:
    said = probes.shared_memory("", str(tmp_path))
    assert said is not None
    assert str(tmp_path) in said
    assert "free of" in said
    assert "cannot be read" in (probes.shared_memory("", str(tmp_path / "missing")) or "")


def test_the_interface_probe_names_a_missing_interface(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "ib-does-not-exist0")
    said = probes.PROBES["nccl_interfaces"]("")
    assert said is not None
    assert "ib-does-not-exist0" in said
    assert "does not have" in said
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "lo")
    assert "matches an interface" in (probes.PROBES["nccl_interfaces"]("") or "")
    monkeypatch.setenv("NCCL_SOCKET_IFNAME", "^docker,lo")  # exclusions name nothing that must exist
    assert "matches" in (probes.PROBES["nccl_interfaces"]("") or "")


def test_the_extension_probe_compares_build_and_torch_install_times(tmp_path: Path) -> None:
    library = tmp_path / "_ext.cpython-311-x86_64-linux-gnu.so"
    library.write_bytes(b"")
    os.utime(library, (1_000_000_000, 1_000_000_000))  # built in 2001: before this torch
    said = probes.extension_build(f"ImportError: {library}: undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSs")
    assert said is not None
    assert "before torch" in said
    assert "torch" in (probes.extension_build("undefined symbol: _ZN5torch3jit") or "")


def test_explanation_runs_the_signatures_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "eth-not-here9")
    (note,) = explanation(RuntimeError("Gloo connectFullMesh failed with [pair.cc:144] no error"))
    assert "[LP045 gloo_network]" in note
    assert "this machine: here GLOO_SOCKET_IFNAME=eth-not-here9" in note


# --- Trainer: Lightning's interrupt handling calls the head's on_exception ----------------------------------------


def test_lightning_calls_the_strategys_on_exception_for_every_exception_of_fit() -> None:
    """The contract the Trainer's hook relies on (lightning/pytorch/trainer/call.py)."""
    from lightning.pytorch.trainer import call

    assert "trainer.strategy.on_exception(exception)" in inspect.getsource(call._interrupt)
    assert "_interrupt(trainer, exception)" in inspect.getsource(call._call_and_handle_interrupt)


def test_the_trainer_head_keeps_the_message_lightnings_ddp_rewrite_drops() -> None:
    strategy = lightning_presets.strategy("ddp_static_graph")
    error = RuntimeError(UNUSED)
    strategy.on_exception(error)  # what Lightning's _interrupt does
    assert "ddp_find_unused_parameters_true" in str(error)  # Lightning's DDPStrategy rewrote the message ...
    assert "Parameter indices which did not receive grad for rank 0: 3 4" not in str(error)
    original, explained_note = error.__notes__
    assert "the original was:" in original
    assert "rank 0: 3 4" in original
    assert explained_note.startswith("lightning-presets explain [LP055 ddp_reducer]")


def test_explained_keeps_an_exception_whose_message_the_body_leaves_alone() -> None:
    error = RuntimeError(OOM)
    with explained(error):
        pass
    assert str(error) == OOM
    assert len(error.__notes__) == 1


def test_explained_annotates_even_when_the_body_raises() -> None:
    error = RuntimeError(OOM)
    with pytest.raises(KeyError), explained(error):
        raise KeyError("a logger's finalize failed")
    assert "[LP059 oom_config]" in error.__notes__[0]


# --- Fabric: the head's methods that run the user's work ------------------------------------------------------


class _RaisesInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor) -> torch.Tensor:
        return tensor.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        raise RuntimeError(OOM)


def test_fabric_backward_of_a_preset_annotates_the_exception_it_raises() -> None:
    from lightning.fabric import Fabric

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # LP305: one process
        fabric = Fabric(strategy="ddp_static_graph", accelerator="cpu", devices=1)
    loss = _RaisesInBackward.apply(torch.ones(2, requires_grad=True)).sum()
    with pytest.raises(RuntimeError) as raised:
        fabric.strategy.backward(loss, None)  # what fabric.backward(loss) calls
    assert str(raised.value) == OOM
    assert "[LP059 oom_config]" in raised.value.__notes__[0]


def test_explaining_wraps_own_and_inherited_methods_and_reraises_the_same_object() -> None:
    class Base:
        def step(self, value: int) -> int:
            if value:
                raise RuntimeError(OOM)
            return value

    @explaining("step", "own")
    class Head(Base):
        def own(self) -> None:
            raise RuntimeError("CUDA error: invalid device ordinal")

    error = RuntimeError(OOM)

    class Composed(Head):
        def step(self, value: int) -> int:
            raise error

    with pytest.raises(RuntimeError) as raised:
        Head().step(1)
    assert "[LP059" in raised.value.__notes__[0]
    with pytest.raises(RuntimeError) as raised:
        Head().own()
    assert "[LP052" in raised.value.__notes__[0]
    assert Head().step(0) == 0
    with pytest.raises(RuntimeError) as raised:
        Composed().step(1)  # a subclass's own override is not wrapped: only the head's
    assert raised.value is error
    assert not hasattr(error, "__notes__")


def test_the_fabric_head_wraps_the_methods_that_run_user_work() -> None:
    from lightning_presets.guards.strategy import GuardedFabricStrategy

    for name in ("setup_environment", "setup_module", "backward", "optimizer_step", "all_reduce", "load_checkpoint"):
        assert getattr(GuardedFabricStrategy.__dict__[name], "__wrapped__", None) is not None, name


@pytest.mark.distributed
def test_a_real_failure_in_a_trainer_fit_of_a_preset_gets_its_note_on_every_rank() -> None:
    """``tp2d_hybrid`` on 2 CPU ranks (the harness's fork server): the training step mixes a plain tensor with a
    DTensor weight; DTensor raises (torch's own text), Lightning's interrupt handling calls the head's
    ``on_exception``, and the exception that leaves ``fit`` carries the LP058 note with its message intact."""
    from harness import run_job

    job = run_job("explain_jobs:trainer_mixes_a_tensor_with_a_dtensor", path=(str(SCRIPTS),), timeout=120)
    assert job.outcome == "raised", job.describe()
    (report,) = job.reports("NOTES ")
    assert report["message"].startswith("aten.add.Tensor got mixed torch.Tensor and DTensor"), report
    assert len(report["notes"]) == 1, report
    assert report["notes"][0].startswith("lightning-presets explain [LP058 tp_first_step]: aten.add.Tensor received")
    assert "[LP058 tp_first_step]" in job.ranks[1].output  # rank 1's traceback shows the note too


def test_without_add_note_the_notes_list_is_filled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python 3.10 has no ``add_note``: the same ``__notes__`` list is filled."""

    class Old(RuntimeError):
        add_note = None  # type: ignore[assignment]

    error = Old(OOM)
    annotate(error)
    assert "[LP059 oom_config]" in error.__notes__[0]
    assert str(error) == OOM
