"""The Python API: ``strategy(name, target=..., **overrides)``, ``get_preset``, ``presets`` and ``__all__``."""

from __future__ import annotations

import importlib
import types
from typing import Any

import pytest

import lightning_presets
from lightning_presets import Preset, PresetConfigError
from lightning_presets.core.namespaces import NAMESPACES, Namespace
from lightning_presets.registry import catalog as _catalog
from lightning_presets.registry import codes
from lightning_presets.registry.catalog import Catalog, Entry


def only_error(excinfo: pytest.ExceptionInfo[PresetConfigError]) -> Any:
    (finding,) = excinfo.value.findings
    return finding


@pytest.fixture
def fabric_only(monkeypatch: pytest.MonkeyPatch) -> Preset:
    """The catalog also holds a preset with only a Fabric form (the built-ins have both)."""
    preset = Preset(name="fabric_only_ddp", description="d", family="ddp", strategy={"fabric": "DDPStrategy"})
    real = lightning_presets.registry.catalog.strategy_catalog()
    extra: Entry[Preset] = Entry(
        name=preset.name, distribution="tests", version="0", value="tests:x", status="ok", item=preset
    )
    monkeypatch.setitem(_catalog._cache, _catalog.STRATEGY_GROUP, Catalog([*real.entries, extra]))
    return preset


# --- strategy(): every target -------------------------------------------------------------------


@pytest.mark.parametrize("namespace", NAMESPACES, ids=lambda ns: ns.target)
@pytest.mark.parametrize(
    ("name", "base"), [("fsdp_offload_ckpt", "FSDPStrategy"), ("tp2d_hybrid", "ModelParallelStrategy")]
)
def test_strategy_for_every_target(namespace: Namespace, name: str, base: str) -> None:
    strategies = importlib.import_module(namespace.strategies_module)
    instance = lightning_presets.strategy(name, target=namespace.target)
    assert isinstance(instance, getattr(strategies, base))
    assert type(instance)._lp_namespace is namespace
    assert type(instance)._lp_preset == lightning_presets.get_preset(name)


def test_default_target_is_the_trainer() -> None:
    from lightning.pytorch.strategies import ModelParallelStrategy

    assert isinstance(lightning_presets.strategy("tp2d_hybrid"), ModelParallelStrategy)


def test_overrides_reach_the_strategy_and_the_defaults_fill_the_rest() -> None:
    instance = lightning_presets.strategy("fsdp_offload_ckpt", target="fabric", sharding_strategy="SHARD_GRAD_OP")
    assert instance.sharding_strategy.name == "SHARD_GRAD_OP"
    assert instance.cpu_offload.offload_params is True
    assert dict(instance._lp_options)["state_dict_type"] == "sharded"


def test_every_call_builds_a_new_instance() -> None:
    first, second = lightning_presets.strategy("tp2d_hybrid"), lightning_presets.strategy("tp2d_hybrid")
    assert first is not second
    assert first._lp_options is not second._lp_options


def test_unknown_target_lists_the_targets() -> None:
    with pytest.raises(ValueError, match=r"target='torch' is not one of 'trainer', 'fabric', 'pytorch_lightning'"):
        lightning_presets.strategy("tp2d_hybrid", target="torch")


# --- LP006: unknown override key -----------------------------------------------------------------


def test_unknown_override_key_suggests_and_lists_valid_keys() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("fsdp_offload_ckpt", sharding_stratgy="FULL_SHARD")
    finding = only_error(excinfo)
    assert finding.code == "LP006"
    assert "'sharding_stratgy' is not an argument of the 'fsdp_offload_ckpt' preset" in finding.message
    assert finding.hint.startswith("did you mean 'sharding_strategy'? valid keys: ")
    valid = finding.hint.split("valid keys: ")[1].split(", ")
    assert valid == sorted(valid)
    assert {"sharding_strategy", "cpu_offload", "state_dict_type", "use_orig_params"} <= set(valid)


def test_every_unknown_key_is_reported_at_once() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("tp2d_hybrid", target="fabric", zzz=1, tensor_paralel_size=2)
    assert excinfo.value.codes == ("LP006", "LP006")
    tensor, zzz = excinfo.value.findings
    assert "did you mean 'tensor_parallel_size'?" in tensor.hint
    assert not zzz.hint.startswith("did you mean")


def test_a_valid_key_of_the_lightning_class_is_accepted() -> None:
    instance = lightning_presets.strategy("tp2d_hybrid", save_distributed_checkpoint=False)
    assert instance._save_distributed_checkpoint is False


# --- LP010: unknown name; LP008: no form for the target --------------------------------------------


def test_unknown_name_suggests_the_closest() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("fsdp_ofload_ckpt")
    finding = only_error(excinfo)
    assert finding.code == "LP010"
    assert "no strategy preset is called 'fsdp_ofload_ckpt'" in finding.message
    assert finding.hint.startswith("did you mean 'fsdp_offload_ckpt'")
    assert "tp2d_hybrid" in finding.hint


def test_unknown_name_without_a_close_match_lists_what_exists() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.get_preset("zzzz")
    finding = only_error(excinfo)
    assert finding.code == "LP010"
    assert finding.hint.startswith("available: ")
    assert "fsdp_offload_ckpt" in finding.hint


def test_a_lightning_builtin_name_is_not_a_preset() -> None:
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("ddp")
    assert excinfo.value.codes == ("LP010",)


def test_preset_without_a_form_for_the_target(fabric_only: Preset) -> None:
    assert lightning_presets.strategy("fabric_only_ddp", target="fabric") is not None
    for target in ("trainer", "pytorch_lightning"):
        with pytest.raises(PresetConfigError) as excinfo:
            lightning_presets.strategy("fabric_only_ddp", target=target)
        finding = only_error(excinfo)
        assert finding.code == "LP008"
        assert f"preset 'fabric_only_ddp' has no Trainer form (target={target!r})" in finding.message
        assert finding.hint == "use it with one of its targets: fabric, lightning_fabric"


def test_a_refused_entry_reports_its_own_findings(monkeypatch: pytest.MonkeyPatch) -> None:
    problem = codes.ENTRY_POINT_FAILED.finding("acme_fsdp failed to load", "fix acme-presets")
    broken: Entry[Preset] = Entry(
        name="acme_fsdp", distribution="acme-presets", version="1", value="a:b", status="broken", findings=(problem,)
    )
    monkeypatch.setitem(_catalog._cache, _catalog.STRATEGY_GROUP, Catalog([broken]))
    with pytest.raises(PresetConfigError) as excinfo:
        lightning_presets.strategy("acme_fsdp")
    assert excinfo.value.findings == (problem,)


# --- get_preset / presets -----------------------------------------------------------------------


def test_get_preset_and_presets() -> None:
    everything = lightning_presets.presets()
    assert {"fsdp_offload_ckpt", "tp2d_hybrid"} <= set(everything)
    preset = lightning_presets.get_preset("tp2d_hybrid")
    assert everything["tp2d_hybrid"] is preset
    assert (preset.name, preset.distribution) == ("tp2d_hybrid", "lightning-presets")
    everything.clear()  # a copy: the catalog is unchanged
    assert "tp2d_hybrid" in lightning_presets.presets()


# --- the public surface -------------------------------------------------------------------------


def test_all_is_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(lightning_presets).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert set(lightning_presets.__all__) == public | {"__version__"}
    assert len(lightning_presets.__all__) == len(set(lightning_presets.__all__))
    assert lightning_presets.__all__ == sorted(lightning_presets.__all__)


def test_public_names_resolve() -> None:
    for name in lightning_presets.__all__:
        assert getattr(lightning_presets, name) is not None
    assert lightning_presets.PresetConfigError.__module__ == "lightning_presets"  # what tracebacks show
    assert isinstance(lightning_presets.__version__, str)
