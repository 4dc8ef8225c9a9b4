"""The catalog: entry points (ours and third parties'), provenance, trust filters, name checks.

Third-party distributions are written straight into a directory on ``sys.path`` (package plus
``.dist-info``), where ``importlib.metadata`` discovers them exactly as it does installed ones;
``test_third_party.py`` does the same with a real ``pip install``.
"""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Any

import pytest

import lightning_presets
from _dists import (
    ACME,
    BROKEN_IMPORT,
    BUILTIN_NAME,
    DUP_ONE,
    DUP_TWO,
    RAISING,
    SHADOW,
    UPPER_CASE,
    WRONG_TYPE,
    Dist,
)
from lightning_presets import Preset, PresetWarning
from lightning_presets.registry import catalog as _catalog
from lightning_presets.registry import codes
from lightning_presets.registry.catalog import OWN_DISTRIBUTION, STRATEGY_GROUP, Catalog, Entry

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"

MISMATCH = Dist(
    name="mismatch-presets",
    version="0.7.0",
    source="""\
        from lightning_presets import Preset

        PRESET = Preset(name="fast_ddp", description="d", family="ddp", strategy={"trainer": "DDPStrategy"})
        """,
    strategies={"quick_ddp": "mismatch_presets:PRESET"},
)


def declared_builtins() -> dict[str, str]:
    with PYPROJECT.open("rb") as file:
        data = tomllib.load(file)
    entries: dict[str, str] = data["project"]["entry-points"][STRATEGY_GROUP]
    return entries


def load() -> Catalog[Preset]:
    with pytest.warns() as caught:
        catalog = _catalog.load(Preset)
    warned = [w.message.finding for w in caught if isinstance(w.message, PresetWarning)]
    assert warned == list(catalog.findings)  # every finding is warned, once
    return catalog


def entries_of(catalog: Catalog[Any], distribution: str) -> list[Entry[Any]]:
    return [entry for entry in catalog.entries if entry.distribution == distribution]


# --- built-in presets: declared in pyproject, loaded like any other ---------------------------------


def test_builtins_are_the_entry_points_of_our_pyproject() -> None:
    catalog = _catalog.load(Preset)
    ours = {entry.name: entry.value for entry in entries_of(catalog, OWN_DISTRIBUTION)}
    assert ours == declared_builtins(), "installed metadata differs from pyproject.toml: reinstall the package"
    assert {"fsdp_offload_ckpt", "tp2d_hybrid"} <= set(ours)


def test_builtins_carry_provenance() -> None:
    catalog = _catalog.load(Preset)
    for entry in entries_of(catalog, OWN_DISTRIBUTION):
        assert (entry.status, entry.version) == ("ok", lightning_presets.__version__)
        assert entry.item is not None
        assert (entry.item.name, entry.item.distribution, entry.item.version) == (
            entry.name,
            OWN_DISTRIBUTION,
            lightning_presets.__version__,
        )


def test_builtins_obey_the_trust_variables_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", OWN_DISTRIBUTION)
    catalog = _catalog.load(Preset)
    assert {entry.status for entry in entries_of(catalog, OWN_DISTRIBUTION)} == {"denied"}
    assert catalog.presets == {}


# --- third-party entry points -------------------------------------------------------------------


def test_third_party_preset_loads_with_its_provenance(install: Any) -> None:
    install(ACME)
    catalog = _catalog.load(Preset)
    entry = catalog.entry("acme_ddp")
    assert entry is not None
    assert (entry.distribution, entry.version, entry.status, entry.value) == (
        "acme-presets",
        "1.2.0",
        "ok",
        "acme_presets:ACME_DDP",
    )
    preset = catalog.presets["acme_ddp"]
    assert (preset.distribution, preset.version) == ("acme-presets", "1.2.0")


def test_entry_point_may_be_a_function_returning_a_preset(install: Any) -> None:
    install(ACME)
    catalog = _catalog.load(Preset)
    preset = catalog.presets["acme_fabric_ddp"]
    assert (preset.name, preset.distribution, preset.kinds) == ("acme_fabric_ddp", "acme-presets", ("fabric",))


def test_ours_come_first_then_third_parties_by_distribution(install: Any) -> None:
    install(WRONG_TYPE, ACME)
    distributions = [entry.distribution for entry in load().entries]
    first_other = next(i for i, d in enumerate(distributions) if d != OWN_DISTRIBUTION)
    assert set(distributions[:first_other]) == {OWN_DISTRIBUTION}
    assert distributions[first_other:] == sorted(distributions[first_other:])


@pytest.mark.parametrize(
    ("dist", "name", "status", "code", "words"),
    [
        (BROKEN_IMPORT, "broken_import", "broken", "LP004", "ModuleNotFoundError: No module named"),
        (RAISING, "raising", "broken", "LP004", "RuntimeError: raising-presets cannot build its preset"),
        (WRONG_TYPE, "wrong_type", "broken", "LP005", "gave a dict, not a Preset"),
        (UPPER_CASE, "Upper_Case", "refused", "LP001", "is not lower-case"),
        (BUILTIN_NAME, "ddp", "refused", "LP002", "takes the name of a Lightning built-in"),
        (MISMATCH, "quick_ddp", "refused", "LP009", "names its strategy 'fast_ddp'"),
    ],
)
def test_bad_entry_point_is_reported_with_its_distribution(
    install: Any, dist: Dist, name: str, status: str, code: str, words: str
) -> None:
    install(dist)
    catalog = load()
    (entry,) = entries_of(catalog, dist.name)
    assert (entry.name, entry.status, entry.item) == (name, status, None)
    (finding,) = entry.findings
    assert (finding.code, finding.severity) == (code, "error")
    assert words in finding.message
    assert f"{dist.name} {dist.version}" in finding.message
    assert dist.name in finding.hint
    assert name not in catalog.presets
    assert {"fsdp_offload_ckpt", "tp2d_hybrid"} <= set(catalog.presets)  # the rest still loads


def test_lp001_suggests_the_lower_case_name(install: Any) -> None:
    install(UPPER_CASE)
    (entry,) = entries_of(load(), UPPER_CASE.name)
    assert "rename it to 'upper_case'" in entry.findings[0].hint


def test_every_lightning_builtin_name_is_refused_and_a_prefixed_one_accepted(install: Any) -> None:
    names = [*sorted(_catalog.lightning_builtin_names(read_missing=True)), "acme_ddp2"]
    install(
        Dist(
            name="squatter-presets",
            version="0.1.0",
            source="from lightning_presets import Preset\n\n"
            "def make(name):\n"
            '    return Preset(name=name, description="d", family="ddp", strategy={"trainer": "DDPStrategy"})\n\n'
            + "".join(f"P_{i} = make({name!r})\n" for i, name in enumerate(names)),
            strategies={name: f"squatter_presets:P_{i}" for i, name in enumerate(names)},
        )
    )
    catalog = load()
    statuses = {entry.name: (entry.status, [f.code for f in entry.findings]) for entry in catalog.entries}
    for name in _catalog.lightning_builtin_names():
        assert statuses[name] == ("refused", ["LP002"]), name
    assert statuses["acme_ddp2"] == ("ok", [])


def test_lightnings_names_are_read_from_both_registries_without_ours() -> None:
    from lightning.fabric.strategies import STRATEGY_REGISTRY
    from lightning.pytorch.strategies import StrategyRegistry

    names = _catalog.lightning_builtin_names(read_missing=True)
    theirs = {name for name in (*StrategyRegistry, *STRATEGY_REGISTRY) if not _is_ours(name)}
    assert names == theirs | {"auto"}
    assert {"dp", "xla_fsdp", "single_device", "xla_debug"} <= names  # Fabric's alone, the Trainer's alone
    assert not names & set(_catalog.strategy_catalog().presets)


def test_a_name_someone_else_registers_is_not_lightnings() -> None:
    """Lightning's names are the entries whose strategy Lightning defines: a user's registration (or ours) is not."""
    from lightning.pytorch.strategies import DDPStrategy, StrategyRegistry

    from lightning_presets.core.namespaces import namespace_for_target
    from lightning_presets.registry.names import lightnings_own

    registry = type(StrategyRegistry)()
    registry.register("ddp", DDPStrategy)
    registry.register("users_ddp", lambda **kwargs: DDPStrategy(**kwargs), description="a user's own")
    assert lightnings_own(namespace_for_target("trainer"), registry) == {"ddp"}


def _is_ours(name: str) -> bool:
    from lightning_presets.registry.catalog import strategy_catalog

    return name in strategy_catalog().presets


def test_duplicate_between_two_distributions_registers_neither(install: Any) -> None:
    install(DUP_ONE, DUP_TWO)
    catalog = load()
    one, two = catalog.entries[-2:]
    assert {one.distribution, two.distribution} == {DUP_ONE.name, DUP_TWO.name}
    assert one.status == two.status == "conflict"
    assert one.findings == two.findings  # one finding, reported once
    (finding,) = one.findings
    assert finding.code == "LP003"
    assert "dup-one-presets 1.0.0 and by dup-two-presets 2.0.0" in finding.message
    assert "LIGHTNING_PRESETS_DENY=dup-one-presets or LIGHTNING_PRESETS_DENY=dup-two-presets" in finding.hint
    assert "team_ddp" not in catalog.presets


def test_duplicate_of_a_builtin_keeps_ours(install: Any) -> None:
    install(SHADOW)
    catalog = load()
    (shadow,) = entries_of(catalog, SHADOW.name)
    assert shadow.status == "conflict"
    assert catalog.presets["tp2d_hybrid"].distribution == OWN_DISTRIBUTION
    ours = catalog.entry("tp2d_hybrid")
    assert ours is not None
    assert (ours.distribution, ours.status) == (OWN_DISTRIBUTION, "ok")
    assert ours.findings == shadow.findings
    assert "LIGHTNING_PRESETS_DENY=shadow-presets" in shadow.findings[0].hint
    assert f"LIGHTNING_PRESETS_DENY={OWN_DISTRIBUTION}" not in shadow.findings[0].hint


def test_denied_distribution_is_never_imported(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(RAISING, ACME)
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", "raising-presets")
    catalog = _catalog.load(Preset)
    (entry,) = entries_of(catalog, RAISING.name)
    assert (entry.status, entry.findings) == ("denied", ())
    assert "raising_presets" not in sys.modules
    assert catalog.findings == ()
    assert "acme_ddp" in catalog.presets


def test_allow_list_keeps_ours_and_the_listed(install: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    install(ACME, WRONG_TYPE)
    monkeypatch.setenv("LIGHTNING_PRESETS_ALLOW", " ACME_presets , ")
    catalog = _catalog.load(Preset)
    assert {"acme_ddp", "fsdp_offload_ckpt", "tp2d_hybrid"} <= set(catalog.presets)
    assert [entry.status for entry in entries_of(catalog, WRONG_TYPE.name)] == ["denied"]
    assert catalog.findings == ()


# --- trust_status -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("allow", "deny", "distribution", "status"),
    [
        ("", "", "acme-presets", "ok"),
        ("", "acme-presets", "acme-presets", "denied"),
        ("", "Acme_Presets", "acme.presets", "denied"),
        ("", "other,acme-presets", "acme-presets", "denied"),
        ("", "other", "acme-presets", "ok"),
        ("acme-presets", "", "acme-presets", "ok"),
        ("acme-presets", "", "other-presets", "denied"),
        ("acme-presets", "acme-presets", "acme-presets", "denied"),
        ("acme-presets", "", OWN_DISTRIBUTION, "ok"),
        ("acme-presets", "", "Lightning_Presets", "ok"),
        ("", OWN_DISTRIBUTION, OWN_DISTRIBUTION, "denied"),
        ("acme-presets", OWN_DISTRIBUTION, OWN_DISTRIBUTION, "denied"),
        (" , ", "", "acme-presets", "ok"),
    ],
)
def test_trust_status(monkeypatch: pytest.MonkeyPatch, allow: str, deny: str, distribution: str, status: str) -> None:
    monkeypatch.setenv("LIGHTNING_PRESETS_ALLOW", allow)
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", deny)
    assert _catalog.trust_status(distribution) == status


@pytest.mark.parametrize(
    ("raw", "normal"),
    [("Acme_Presets", "acme-presets"), ("acme.presets", "acme-presets"), ("acme--_presets", "acme-presets")],
)
def test_normalize_distribution(raw: str, normal: str) -> None:
    assert _catalog.normalize_distribution(raw) == normal


# --- the per-process cache ------------------------------------------------------------------------


def test_cache_loads_once_even_from_many_threads() -> None:
    group = "tests.catalog.cache"
    calls: list[int] = []
    barrier = threading.Barrier(8)

    def loader() -> Catalog[Any]:
        calls.append(1)
        return Catalog([])

    results: list[Catalog[Any]] = []

    def use() -> None:
        barrier.wait()
        results.append(_catalog.cached(group, loader))

    try:
        threads = [threading.Thread(target=use) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(calls) == 1
        assert len(results) == 8
        assert all(result is results[0] for result in results)
    finally:
        _catalog._cache.pop(group, None)


def test_using_a_catalog_while_it_loads_is_an_error_not_a_hang() -> None:
    group = "tests.catalog.reentrant"

    def loader() -> Catalog[Any]:
        return _catalog.cached(group, loader)  # what a preset module calling presets() at import would do

    try:
        with pytest.raises(RuntimeError, match=r"was used while it was being loaded"):
            _catalog.cached(group, loader)
        assert _catalog.cached(group, lambda: Catalog([])).entries == ()  # the failed load left no trace
    finally:
        _catalog._cache.pop(group, None)


@pytest.mark.usefixtures("fresh_catalog")
def test_clear_cache_reads_trust_variables_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_presets.registry.catalog import strategy_catalog

    assert "tp2d_hybrid" in strategy_catalog().presets
    monkeypatch.setenv("LIGHTNING_PRESETS_DENY", OWN_DISTRIBUTION)
    assert "tp2d_hybrid" in strategy_catalog().presets  # cached
    _catalog.clear_cache()
    assert "tp2d_hybrid" not in strategy_catalog().presets


def test_catalog_findings_are_deduplicated_in_order() -> None:
    finding = codes.NAME_DECLARED_TWICE.finding("m", "h")
    other = codes.ENTRY_POINT_FAILED.finding("n", "h")
    entries: list[Entry[Any]] = [
        Entry(name="a", distribution="x", version="1", value="m:a", status="conflict", findings=(finding,)),
        Entry(name="a", distribution="y", version="1", value="m:a", status="conflict", findings=(finding,)),
        Entry(name="b", distribution="y", version="1", value="m:b", status="broken", findings=(other,)),
    ]
    catalog = Catalog(entries)
    assert catalog.findings == (finding, other)
    assert catalog.presets == {}
    assert catalog.entry("b") is entries[2]
    assert catalog.entry("c") is None
