"""One reading of a strategy's keyword arguments (``registry.overrides``) for the API, registered names and ``check``:
its constructor's, and those of the torch wrapper it forwards ``**kwargs`` to, less the ones Lightning passes itself."""

from __future__ import annotations

from typing import Any

import pytest

import lightning_presets
from lightning_presets import PresetConfigError
from lightning_presets.tools.check import CheckRequest
from lightning_presets.tools.verdict import run_check


@pytest.mark.parametrize("keyword", ["init_sync", "skip_all_reduce_unused_params", "broadcast_buffers", "dim"])
def test_torch_ddp_keywords_are_taken_by_the_ddp_presets(keyword: str) -> None:
    strategy = lightning_presets.strategy("ddp_static_graph", **{keyword: False})
    assert strategy._ddp_kwargs[keyword] is False


@pytest.mark.parametrize(
    ("preset", "keyword"), [("ddp_static_graph", "device_ids"), ("fsdp_offload_ckpt", "device_id")]
)
def test_a_wrapper_argument_lightning_passes_itself_is_refused(preset: str, keyword: str) -> None:
    """Lightning passes ``device_ids``/``device_id`` to the wrapper itself: a second one is a TypeError at wrapping."""
    with pytest.raises(PresetConfigError) as caught:
        lightning_presets.strategy(preset, **{keyword: 0})
    assert caught.value.codes == ("LP006",)


def test_a_typo_is_refused_with_the_closest_key() -> None:
    with pytest.raises(PresetConfigError) as caught:
        lightning_presets.strategy("ddp_static_graph", init_synk=False)
    assert "did you mean 'init_sync'?" in caught.value.findings[0].hint


def test_torch_fsdp_keywords_are_taken_by_the_fsdp_presets() -> None:
    strategy = lightning_presets.strategy("fsdp_grad_op", limit_all_gathers=False, forward_prefetch=True)
    assert (strategy.kwargs["limit_all_gathers"], strategy.kwargs["forward_prefetch"]) == (False, True)


@pytest.mark.parametrize(("strategy", "overrides", "refused"), [
    ("ddp", {"init_sync": False}, False),
    ("ddp", {"device_ids": [0]}, True),
    ("ddp_static_graph", {"init_sync": False}, False),
    ("ddp_static_graph", {"init_synk": False}, True),
])  # fmt: skip
def test_check_reads_the_same_keywords(strategy: str, overrides: dict[str, object], refused: bool) -> None:
    arguments = {"strategy": strategy, "accelerator": "cpu", "devices": 2}
    report = run_check(CheckRequest(arguments=arguments, overrides=overrides))
    codes = set(report.codes)
    assert bool(codes & {"LP006", "LP715"}) is refused, report.codes


def test_a_trainer_with_a_preset_reads_no_signature_once_warm(
    simulated_gpus: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The keys a strategy class takes and the Trainer's parameter names are read once per class, not on every
    Trainer/Fabric (``inspect.signature`` was most of what a preset added to construction)."""
    import inspect
    import sys

    from lightning.fabric import Fabric
    from lightning.pytorch import Trainer

    simulated_gpus(8)
    quiet = {
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
    }

    def build() -> None:
        Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, **quiet)
        Fabric(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8)

    build()  # warm: the first construction reads each class once
    ours: list[str] = []
    signature = inspect.signature

    def counted(*args: Any, **kwargs: Any) -> inspect.Signature:
        caller = sys._getframe(1).f_code
        if "lightning_presets" in caller.co_filename:
            ours.append(f"{caller.co_filename}:{caller.co_name}")
        return signature(*args, **kwargs)

    monkeypatch.setattr(inspect, "signature", counted)
    build()
    assert ours == []
