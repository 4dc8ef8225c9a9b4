"""The bridge: factories registered into Lightning's four registries, each with its own classes.

Registration behaviour is tested on fresh ``_StrategyRegistry`` objects; the global registries are
only read.
"""

from __future__ import annotations

import importlib
import threading
import types
from typing import Any

import pytest
from lightning.fabric.strategies.registry import _StrategyRegistry

from helpers import QUIET
from lightning_presets import Preset, PresetConfigError, PresetWarning, Requirement, _activate
from lightning_presets.core.namespaces import NAMESPACES, Namespace, namespace_for_target
from lightning_presets.guards.strategy import HEADS
from lightning_presets.registry import bridge as _bridge
from lightning_presets.registry import catalog as _catalog
from lightning_presets.registry.build import build
from lightning_presets.registry.catalog import Catalog, Entry
from lightning_presets.registry.classes import compose

BUILTINS = ("fsdp_offload_ckpt", "tp2d_hybrid")
OTHER_PACKAGE = {
    "lightning.pytorch": "pytorch_lightning",
    "pytorch_lightning": "lightning.pytorch",
    "lightning.fabric": "lightning_fabric",
    "lightning_fabric": "lightning.fabric",
}


def strategies_of(namespace: Namespace) -> types.ModuleType:
    return importlib.import_module(namespace.strategies_module)


def registry_of(namespace: Namespace) -> Any:
    return getattr(strategies_of(namespace), namespace.registry_attr)


def ddp_preset(name: str = "test_ddp", **fields: Any) -> Preset:
    return Preset(
        name=name,
        description="a test preset",
        family="ddp",
        **{"strategy": {"trainer": "DDPStrategy", "fabric": "DDPStrategy"}, **fields},
    )


@pytest.fixture
def catalog_of(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Make the bridge see only the given presets (the global registries are not touched)."""

    def use(*presets: Preset) -> None:
        entries: list[Entry[Preset]] = [
            Entry(name=p.name, distribution="tests", version="0", value="tests:x", status="ok", item=p) for p in presets
        ]
        catalog = Catalog(entries)
        monkeypatch.setattr(_catalog, "strategy_catalog", lambda: catalog)

    return use


# --- the four global registries -------------------------------------------------------------------


def test_the_four_registries_are_distinct_objects() -> None:
    assert len({id(registry_of(namespace)) for namespace in NAMESPACES}) == 4


@pytest.mark.parametrize("namespace", NAMESPACES, ids=lambda ns: ns.target)
def test_every_preset_is_registered_in_every_registry(namespace: Namespace) -> None:
    registry = registry_of(namespace)
    for name, preset in _catalog.strategy_catalog().presets.items():
        if namespace.kind in preset.strategy:
            assert _bridge.is_ours(registry, name), f"{name} not registered in {namespace.strategies_module}"
            assert registry[name]["description"] == preset.description
            assert registry[name]["init_params"] == {}  # nothing stored that every strategy would share


@pytest.mark.parametrize("name", BUILTINS)
@pytest.mark.parametrize("namespace", NAMESPACES, ids=lambda ns: ns.target)
def test_registered_factory_builds_that_namespaces_own_class(namespace: Namespace, name: str) -> None:
    strategies = strategies_of(namespace)
    other = importlib.import_module(f"{OTHER_PACKAGE[namespace.package]}.strategies")
    preset = _catalog.strategy_catalog().presets[name]
    instance = registry_of(namespace).get(name)
    lightning_class = getattr(strategies, preset.strategy[namespace.kind])
    assert isinstance(instance, lightning_class)
    assert isinstance(instance, strategies.Strategy)
    assert not isinstance(instance, other.Strategy)
    assert type(instance)._lp_preset == preset  # equal: a test may have reloaded the catalog since registration
    assert type(instance)._lp_namespace is namespace


def test_pytorch_lightning_trainer_accepts_the_name() -> None:
    import pytorch_lightning as pl

    trainer = pl.Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, **QUIET)
    assert isinstance(trainer.strategy, pl.strategies.ModelParallelStrategy)


@pytest.mark.parametrize("package", ["lightning.fabric", "lightning_fabric"])
def test_fabric_accepts_the_name(package: str, cuda8: Any) -> None:
    fabric_module = importlib.import_module(package)
    fabric = fabric_module.Fabric(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, precision="bf16-mixed")
    strategies = importlib.import_module(f"{package}.strategies")
    assert isinstance(fabric.strategy, strategies.FSDPStrategy)


# --- factories: a fresh instance each time --------------------------------------------------------


def test_two_trainers_get_distinct_strategies_and_options() -> None:
    from lightning.pytorch import Trainer

    first = Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, **QUIET).strategy
    second = Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2, **QUIET).strategy
    assert first is not second
    assert first._lp_options is not second._lp_options
    assert dict(first._lp_options) == dict(second._lp_options)


def test_mutable_init_params_are_copied_for_every_strategy() -> None:
    from lightning.pytorch.plugins.environments import LightningEnvironment

    environment = LightningEnvironment()
    preset = ddp_preset(init_params={"cluster_environment": environment})
    factory = _bridge._factory(preset, namespace_for_target("trainer"), HEADS)
    first, second = factory(), factory()
    assert first.cluster_environment is not second.cluster_environment
    assert environment not in (first.cluster_environment, second.cluster_environment)
    assert isinstance(first.cluster_environment, LightningEnvironment)


def test_factory_is_named_and_marked_after_the_preset() -> None:
    factory = registry_of(NAMESPACES[0])["tp2d_hybrid"]["strategy"]
    assert factory.__name__ == "tp2d_hybrid"
    assert getattr(factory, _bridge._MARK) == "tp2d_hybrid"


def test_overrides_reach_the_strategy() -> None:
    instance = registry_of(NAMESPACES[0])["tp2d_hybrid"]["strategy"](tensor_parallel_size=2)
    assert instance._tensor_parallel_size == 2
    assert instance._lp_options["tensor_parallel_size"] == 2


# --- registration: idempotent, thread-safe, never overriding ----------------------------------------


@pytest.mark.parametrize("namespace", NAMESPACES, ids=lambda ns: ns.target)
def test_register_into_a_fresh_registry(namespace: Namespace) -> None:
    registry = _StrategyRegistry()
    assert _bridge.register_into(registry, namespace, HEADS) == []
    expected = {n for n, p in _catalog.strategy_catalog().presets.items() if namespace.kind in p.strategy}
    assert set(registry) == expected
    assert all(_bridge.is_ours(registry, name) for name in registry)


def test_registration_is_idempotent() -> None:
    namespace = NAMESPACES[0]
    registry = _StrategyRegistry()
    assert _bridge.register_into(registry, namespace, HEADS) == []
    before = dict(registry)
    assert _bridge.register_into(registry, namespace, HEADS) == []
    assert list(registry) == list(before)
    assert all(registry[name] is before[name] for name in before)  # the same entries, not replaced


def test_registration_is_thread_safe() -> None:
    namespace = NAMESPACES[1]
    registry = _StrategyRegistry()
    barrier = threading.Barrier(8)
    results: list[Any] = []
    errors: list[BaseException] = []

    def register() -> None:
        barrier.wait()
        try:
            results.append(_bridge.register_into(registry, namespace, HEADS))
        except BaseException as exc:  # collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=register) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert results == [[]] * 8
    assert {name for name in registry if _bridge.is_ours(registry, name)} == set(registry)
    assert set(BUILTINS) <= set(registry)


def test_a_foreign_entry_is_never_overridden() -> None:
    namespace = NAMESPACES[0]
    registry = _StrategyRegistry()

    def foreign(**_: Any) -> None:
        return None

    registry.register("tp2d_hybrid", foreign, description="someone else's")
    findings = _bridge.register_into(registry, namespace, HEADS)
    assert [finding.code for finding in findings] == ["LP002"]
    assert "'tp2d_hybrid'" in findings[0].message
    assert "lightning.pytorch.strategies" in findings[0].message
    assert registry["tp2d_hybrid"]["strategy"] is foreign
    assert registry["tp2d_hybrid"]["description"] == "someone else's"
    assert _bridge.is_ours(registry, "fsdp_offload_ckpt")  # the others still register


def test_register_module_warns_about_a_taken_name_and_keeps_going() -> None:
    namespace = NAMESPACES[3]
    registry = _StrategyRegistry()
    registry.register("fsdp_offload_ckpt", dict, description="taken")
    module = types.ModuleType(namespace.strategies_module)
    setattr(module, namespace.registry_attr, registry)
    with pytest.warns(PresetWarning) as caught:
        _activate.register_module(module)
    assert [w.message.finding.code for w in caught if isinstance(w.message, PresetWarning)] == ["LP002"]
    assert registry["fsdp_offload_ckpt"]["strategy"] is dict
    assert _bridge.is_ours(registry, "tp2d_hybrid")


def test_a_module_imported_while_the_catalog_loads_is_registered_after() -> None:
    """A preset module that imports Lightning fires the hook from inside the catalog load: no re-entry. The built-ins
    load without any third party's code, so they are registered at once (issue 16); the others wait for the load."""
    namespace = NAMESPACES[2]
    registry = _StrategyRegistry()
    module = types.ModuleType(namespace.strategies_module)
    setattr(module, namespace.registry_attr, registry)
    _catalog._thread.depth = 1
    try:
        _activate.register_module(module)
        assert set(BUILTINS) <= set(registry)
        assert len(_catalog._deferred) == 1  # the third parties' registration, run once the load is done
    finally:
        _catalog._thread.depth = 0
    _catalog.strategy_catalog()
    assert _catalog._deferred == []


def test_register_module_ignores_other_modules() -> None:
    registry = _StrategyRegistry()
    unrelated = types.ModuleType("somebody.strategies")
    unrelated.StrategyRegistry = registry  # type: ignore[attr-defined]
    _activate.register_module(unrelated)
    assert registry == {}
    _activate.register_module(types.ModuleType(NAMESPACES[0].strategies_module))  # no registry attribute: no-op


def test_is_ours_needs_our_mark_and_the_same_name() -> None:
    registry = _StrategyRegistry()
    _bridge.register_into(registry, NAMESPACES[0], HEADS)
    registry["copy"] = registry["tp2d_hybrid"]
    registry.register("plain", dict)
    assert _bridge.is_ours(registry, "tp2d_hybrid")
    assert not _bridge.is_ours(registry, "copy")
    assert not _bridge.is_ours(registry, "plain")
    assert not _bridge.is_ours(registry, "missing")


def test_only_presets_with_a_form_for_the_kind_are_registered(catalog_of: Any) -> None:
    fabric_only = ddp_preset("fabric_only_ddp", strategy={"fabric": "DDPStrategy"})
    catalog_of(fabric_only, ddp_preset())
    trainer, fabric = _StrategyRegistry(), _StrategyRegistry()
    _bridge.register_into(trainer, namespace_for_target("trainer"), HEADS)
    _bridge.register_into(fabric, namespace_for_target("fabric"), HEADS)
    assert set(trainer) == {"test_ddp"}
    assert set(fabric) == {"test_ddp", "fabric_only_ddp"}


# --- guarded classes and build ------------------------------------------------------------------


@pytest.mark.parametrize("namespace", NAMESPACES, ids=lambda ns: ns.target)
def test_guarded_class_layers_and_cache(namespace: Namespace) -> None:
    from lightning_presets.guards.strategy import GuardedFabricStrategy, GuardedTrainerStrategy

    preset = _catalog.strategy_catalog().presets["fsdp_offload_ckpt"]
    cls = compose(preset, namespace, HEADS[namespace.kind])
    assert compose(preset, namespace, HEADS[namespace.kind]) is cls
    guards = GuardedTrainerStrategy if namespace.kind == "trainer" else GuardedFabricStrategy
    mixin = preset.mixins[namespace.kind]
    base = strategies_of(namespace).FSDPStrategy
    assert cls.__bases__ == (guards, mixin, base)
    assert cls.__mro__.index(guards) < cls.__mro__.index(mixin) < cls.__mro__.index(base)
    assert (cls.__name__, cls.__module__) == ("FSDPStrategy", "lightning_presets")


def test_a_class_outside_lightnings_strategies_is_refused() -> None:
    preset = ddp_preset(strategy={"trainer": "torch.nn:Linear"})
    expected = r"'torch\.nn:Linear'.*not a lightning\.pytorch\.strategies\.Strategy"
    with pytest.raises(PresetConfigError, match=expected) as excinfo:
        build(preset, namespace_for_target("trainer"), {}, HEADS)
    assert excinfo.value.codes == ("LP011",)


def test_module_attr_class_spec_is_resolved() -> None:
    preset = ddp_preset(strategy={"trainer": "lightning.pytorch.strategies.ddp:DDPStrategy"})
    instance = build(preset, namespace_for_target("trainer"), {}, HEADS)
    from lightning.pytorch.strategies import DDPStrategy

    assert isinstance(instance, DDPStrategy)


def test_missing_optional_dependency_is_an_install_hint() -> None:
    preset = ddp_preset(requires=(Requirement(module="lightning_presets_no_such_dependency", extra="nothing"),))
    with pytest.raises(PresetConfigError) as excinfo:
        build(preset, namespace_for_target("trainer"), {}, HEADS)
    (finding,) = excinfo.value.findings
    assert finding.code == "LP007"
    assert "'lightning_presets_no_such_dependency'" in finding.message
    assert "`Trainer(strategy='test_ddp')`" in finding.message
    assert finding.hint == "install it with: pip install 'lightning-presets[nothing]'"


def test_installed_optional_dependency_passes() -> None:
    preset = ddp_preset(requires=(Requirement(module="json", extra="nothing"),))
    assert build(preset, namespace_for_target("fabric"), {}, HEADS) is not None


def test_prepare_turns_options_into_constructor_arguments() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def prepare(kind: Any, values: dict[str, Any]) -> dict[str, Any]:
        seen.append((kind, dict(values)))
        return {key: value for key, value in values.items() if key != "note"}

    preset = ddp_preset(init_params={"note": "preset only"}, extra_keys=frozenset({"note"}), prepare=prepare)
    instance = build(preset, namespace_for_target("fabric"), {"process_group_backend": "gloo"}, HEADS)
    assert seen == [("fabric", {"note": "preset only", "process_group_backend": "gloo"})]
    assert instance._process_group_backend == "gloo"
    assert instance._lp_options["note"] == "preset only"
