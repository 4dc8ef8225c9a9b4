"""The catalog's, the arguments' and the doctor's codes: what Lightning (or Python's import machinery) does with the
refused entry, name, argument or installation when the package does not stop it first."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from jobs import fit, run_child, trainer
from proof import Proof, reports

import lightning_presets
from lightning_presets.core.context import Context


@contextmanager
def registered(name: str, factory: Any) -> Iterator[None]:
    """``name`` in Lightning's Trainer registry for the block, as the bridge would register it unchecked."""
    from lightning.pytorch.strategies import StrategyRegistry

    StrategyRegistry.register(name, factory)
    try:
        yield
    finally:
        StrategyRegistry.remove(name)


@pytest.mark.proves("LP001")
def test_lp001_lightning_lower_cases_the_name_it_looks_up(proof: Proof) -> None:
    from lightning.pytorch.strategies import DDPStrategy

    with registered("Acme_DDP", DDPStrategy), proof.raises(ValueError, r"invalid strategy name", code="LP001"):
        trainer("Acme_DDP")


@pytest.mark.proves("LP002", "LP003")
def test_lp002_lp003_lightnings_registry_refuses_a_name_it_already_holds(proof: Proof) -> None:
    from lightning.fabric.strategies.registry import _StrategyRegistry
    from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry

    with proof.raises(ValueError, r"'ddp' is already present in the registry", code="LP002"):
        StrategyRegistry.register("ddp", DDPStrategy)
    fresh = _StrategyRegistry()
    fresh.register("fsdp_fast", DDPStrategy)  # acme-presets' fsdp_fast...
    with proof.raises(ValueError, r"'fsdp_fast' is already present in the registry", code="LP003"):
        fresh.register("fsdp_fast", DDPStrategy)  # ...then other-presets'


@pytest.mark.proves("LP004")
def test_lp004_an_entry_point_whose_module_is_missing_cannot_be_loaded(proof: Proof) -> None:
    entry = metadata.EntryPoint("fsdp_fast", "acme_presets_missing_module:FSDP_FAST", "lightning_presets.strategies")
    with proof.raises(ModuleNotFoundError, r"acme_presets_missing_module", code="LP004"):
        entry.load()


@pytest.mark.proves("LP005")
def test_lp005_something_other_than_a_preset_cannot_build_a_strategy(proof: Proof) -> None:
    from lightning.fabric.strategies.registry import _StrategyRegistry

    fresh = _StrategyRegistry()
    fresh.register("fsdp_fast", {"name": "fsdp_fast"})  # type: ignore[arg-type]  # what make_dict returned
    with proof.raises(TypeError, r"'dict' object is not callable", code="LP005"):
        fresh.get("fsdp_fast")


@pytest.mark.proves("LP006", "LP715")
def test_lp006_lp715_an_unknown_keyword_fails_when_ddp_wraps(proof: Proof, process_group: None) -> None:
    """Lightning's DDPStrategy (and FSDPStrategy, which needs CUDA) accepts any keyword and passes it to torch's
    wrapper in ``setup``."""
    from lightning.pytorch.strategies import DDPStrategy

    proof.refused("LP006", lambda: lightning_presets.strategy("ddp_static_graph", static_grpah=True))
    with proof.raises(TypeError, r"unexpected keyword argument 'static_grpah'", code="LP006"):
        fit(DDPStrategy(static_graph=True, gradient_as_bucket_view=True, static_grpah=True))
    with proof.raises(TypeError, r"unexpected keyword argument 'find_unused_parameter'", code="LP715"):
        fit(DDPStrategy(find_unused_parameter=True))  # check --strategy ddp --set find_unused_parameter=true


@pytest.mark.proves("LP007")
def test_lp007_lightning_needs_deepspeed_installed(proof: Proof, monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning.pytorch.strategies import deepspeed as lightning_deepspeed

    monkeypatch.setattr(lightning_deepspeed, "_DEEPSPEED_AVAILABLE", False)  # Lightning's finding when it is absent
    with proof.raises(Exception, r"you must have DeepSpeed installed", code="LP007"):
        lightning_deepspeed.DeepSpeedStrategy(stage=2)


@pytest.mark.proves("LP008", "LP011")
def test_lp008_lp011_the_trainer_refuses_a_strategy_class_of_another_kind(proof: Proof) -> None:
    """A Fabric-only form given to the Trainer (LP008), or a preset naming a class that is not a Trainer strategy
    (LP011): Lightning's connector refuses the object."""
    from lightning.fabric.strategies import DDPStrategy as FabricDDP

    with proof.raises(ValueError, r"invalid strategy", code=("LP008", "LP011")):
        trainer(FabricDDP())


@pytest.mark.proves("LP009", "LP010")
def test_lp009_lp010_a_name_nothing_registered_fails_in_the_trainer(proof: Proof) -> None:
    """LP009: the entry point says fsdp_fast, the preset registers fsdp_quick; LP010: a typo."""
    with proof.raises(ValueError, r"invalid strategy name: `strategy='fsdp_fast'`", code="LP009"):
        trainer("fsdp_fast")
    with proof.raises(ValueError, r"invalid strategy name: `strategy='fsdp_ofload_ckpt'`", code="LP010"):
        trainer("fsdp_ofload_ckpt")


@pytest.mark.proves("LP012")
def test_lp012_a_third_partys_crashing_rule_raises_its_own_error(
    proof: Proof, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What run_rules contains: the rule of LP012's example, called on the context Trainer(devices=8) gives it."""
    (tmp_path / "acme_rules.py").write_text(
        textwrap.dedent(
            """
            def eight_per_node(ctx):
                return 8 // (ctx.devices_per_node - 8)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import acme_rules  # type: ignore[import-not-found]

    context = Context(preset="acme_ddp", target="trainer", kind="trainer", accelerator="cpu", devices_per_node=8,
                      num_nodes=1, precision="32-true", precision_plugin="Precision",
                      cluster_environment="LightningEnvironment", options={})  # fmt: skip
    with proof.raises(ZeroDivisionError, r"by zero", code="LP012"):
        acme_rules.eight_per_node(context)
    sys.modules.pop("acme_rules", None)


@pytest.mark.proves("LP013")
def test_lp013_a_distribution_without_a_name_cannot_be_looked_up(proof: Proof, install: Any) -> None:
    """Its entry points load, but whom they come from cannot be found: no version, no trust decision."""
    from _dists import CRASHING_RULE

    install(CRASHING_RULE, named=False)
    (entry,) = [each for each in metadata.entry_points(group="lightning_presets.strategies")
                if each.value.startswith(CRASHING_RULE.package)]  # fmt: skip
    assert entry.dist is not None
    assert entry.dist.name is None
    with proof.raises(ValueError, r"A distribution name is required", code="LP013"):
        metadata.distribution(entry.dist.name)  # type: ignore[arg-type]


@pytest.mark.proves("LP015")
def test_lp015_a_denied_preset_is_an_unknown_name(proof: Proof) -> None:
    """A denied preset's name gets a stand-in that raises LP015 in ``Trainer(...)``; without it, the name is one
    Lightning does not know, and the job fails there with Lightning's own error."""
    output = run_child(
        """
        import proof
        from lightning.pytorch import Trainer
        from lightning.pytorch.strategies import StrategyRegistry
        try:
            Trainer(strategy="fsdp2", accelerator="cpu", devices=2, logger=False)
        except Exception as error:
            proof.report("denied", error)
        StrategyRegistry.pop("fsdp2")  # the stand-in gone: what Lightning knows of a denied preset
        try:
            Trainer(strategy="fsdp2", accelerator="cpu", devices=2, logger=False)
        except Exception as error:
            proof.report("unregistered", error)
        """,
        env={"LIGHTNING_PRESETS_DENY": "lightning-presets"},
    )
    (denied,) = [each for each in reports(output) if each["scenario"] == "denied"]
    assert denied["error"] == "PresetConfigError", denied
    assert denied["message"].startswith("[LP015]"), denied
    proof.child(reports(output), "unregistered", "ValueError", r"invalid strategy name: `strategy='fsdp2'`",
                code="LP015")  # fmt: skip


@pytest.mark.proves("LP016", "LP721")
def test_lp016_lp721_without_an_importable_lightning_there_is_no_trainer(
    proof: Proof, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A broken install (LP016: a module that raises on import) and none at all (LP721)."""
    import importlib

    monkeypatch.setitem(sys.modules, "lightning.pytorch.strategies", None)  # what a failed import leaves
    with proof.raises(ImportError, r"lightning\.pytorch\.strategies", code="LP016"):
        importlib.import_module("lightning.pytorch.strategies")
    monkeypatch.setitem(sys.modules, "pytorch_lightning", None)
    with proof.raises(ImportError, r"pytorch_lightning", code="LP721"):
        importlib.import_module("pytorch_lightning")


@pytest.mark.proves("LP724")
def test_lp724_a_preset_missing_from_the_registry_is_an_unknown_name(proof: Proof) -> None:
    from lightning.pytorch.strategies import StrategyRegistry

    entry = StrategyRegistry.pop("fsdp2")  # not monkeypatch.delitem: it restores what the registry's get() builds
    try:
        with proof.raises(ValueError, r"invalid strategy name: `strategy='fsdp2'`", code="LP724"):
            trainer("fsdp2")
    finally:
        StrategyRegistry["fsdp2"] = entry
