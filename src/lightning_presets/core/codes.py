"""Codes reported outside preset rules (catalog, registration, arguments), documented like rules."""

from __future__ import annotations

from dataclasses import dataclass

from lightning_presets.core.findings import Severity


@dataclass(frozen=True, slots=True, kw_only=True)
class Code:
    """A documented finding code that is not a preset rule."""

    code: str
    severity: Severity
    title: str
    fails: str
    fixed: str
    stage: str = "catalog"
    """``catalog`` (entry points load) or ``options`` (the arguments of ``lightning_presets.strategy``)."""
    evidence: str = ""
    """For an ``error``: how we know it fails, as for rules (``runtime: tests/...::test (...)`` or ``source: ...``)."""


CATALOG_CODES: tuple[Code, ...] = (
    Code(
        code="LP001", severity="error", title="a preset name that is not lower-case",
        fails='[project.entry-points."lightning_presets.strategies"]\n'
        'FSDP_Fast = "acme_presets:FSDP_FAST_UPPER"   # Preset(name="FSDP_Fast", ...)',
        fixed='[project.entry-points."lightning_presets.strategies"]\nfsdp_fast = "acme_presets:FSDP_FAST"',
        evidence="source: lightning/pytorch/trainer/connectors/accelerator_connector.py, "
        "_check_config_and_set_final_flags lower-cases the requested name, so an upper-case entry is never found "
        "(lightning 2.6.6)",
    ),
    Code(
        code="LP002", severity="error", title="a preset name that Lightning already uses",
        fails='[project.entry-points."lightning_presets.strategies"]\nddp = "acme_presets:DDP"',
        fixed='[project.entry-points."lightning_presets.strategies"]\nacme_ddp = "acme_presets:ACME_DDP"',
        evidence="source: lightning/fabric/strategies/registry.py, _StrategyRegistry.register raises ValueError for a "
        "name already present (lightning 2.6.6)",
    ),
    Code(
        code="LP003", severity="error", title="one preset name declared by two distributions",
        fails='# acme-presets and other-presets both declare:\n[project.entry-points."lightning_presets.strategies"]\n'
        'fsdp_fast = "acme_presets:FSDP_FAST"',
        fixed="LIGHTNING_PRESETS_DENY=other-presets python train.py   # only acme-presets' fsdp_fast loads",
        evidence="runtime: tests/test_catalog.py::test_duplicate_between_two_distributions_registers_neither (neither "
        "can be registered under the one name)",
    ),
    Code(
        code="LP004", severity="error", title="an entry point that fails to import or raises",
        fails='fsdp_fast = "acme_presets.missing_module:FSDP_FAST"',
        fixed='fsdp_fast = "acme_presets:FSDP_FAST"',
        evidence="runtime: tests/test_catalog.py::test_bad_entry_point_is_reported_with_its_distribution (the entry "
        "point cannot be loaded)",
    ),
    Code(
        code="LP005", severity="error", title="an entry point that gives something other than a preset",
        fails='fsdp_fast = "acme_presets:make_dict"   # returns a dict',
        fixed='fsdp_fast = "acme_presets:FSDP_FAST"   # a lightning_presets.Preset',
        evidence="runtime: tests/test_catalog.py::test_bad_entry_point_is_reported_with_its_distribution (nothing can "
        "be registered from it)",
    ),
    Code(
        code="LP006", severity="error", title="an override key the preset does not take",
        fails='lightning_presets.strategy("fsdp_offload_ckpt", sharding_stratgy="FULL_SHARD")',
        fixed='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARD")',
        stage="options",
        evidence="source: lightning/pytorch/strategies/fsdp.py, FSDPStrategy.__init__ forwards unknown keywords to "
        "torch's FullyShardedDataParallel, which raises TypeError when the model is wrapped (lightning 2.6.6)",
    ),
    Code(
        code="LP007", severity="error", title="an optional dependency the preset needs is missing",
        fails='Trainer(strategy="deepspeed_zero2_offload")   # deepspeed not installed',
        fixed="Trainer(strategy=\"deepspeed_zero2_offload\")   # after pip install 'lightning-presets[deepspeed]'",
        stage="options",
        evidence="source: lightning/pytorch/strategies/deepspeed.py, DeepSpeedStrategy.__init__ raises "
        "MisconfigurationException without deepspeed (lightning 2.6.6)",
    ),
    Code(
        code="LP008", severity="error", title="a preset used with a target it has no form for",
        fails='lightning_presets.strategy("xla_fsdp_ckpt", target="trainer")',
        fixed='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric")',
        stage="options",
        evidence="runtime: tests/test_api.py::test_preset_without_a_form_for_the_target (there is no class to build)",
    ),
    Code(
        code="LP009", severity="error", title="an entry point whose name differs from its preset's name",
        fails='fsdp_fast = "acme_presets:FSDP_QUICK"   # Preset(name="fsdp_quick", ...)',
        fixed='fsdp_quick = "acme_presets:FSDP_QUICK"',
        evidence="runtime: tests/test_catalog.py::test_bad_entry_point_is_reported_with_its_distribution (the name "
        "users pass would build another preset)",
    ),
    Code(
        code="LP010", severity="error", title="an unknown preset name",
        fails='lightning_presets.strategy("fsdp_ofload_ckpt")',
        fixed='lightning_presets.strategy("fsdp_offload_ckpt")',
        stage="options",
        evidence="source: lightning/fabric/strategies/registry.py, _StrategyRegistry.get raises KeyError for an "
        "unknown name (lightning 2.6.6)",
    ),
)  # fmt: skip
