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
        fixed="Trainer(strategy=\"deepspeed_zero2_offload\")  # after pip install --no-build-isolation deepspeed",
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
    Code(
        code="LP011", severity="error", title="a preset whose class or rules are malformed",
        fails='acme_fsdp = "acme_presets:ACME_FSDP_BAD_RULE"   # a rule declared with code "ACME1"',
        fixed='acme_fsdp = "acme_presets:ACME_FSDP"   # its rule declared with code "LP901"',
        evidence="runtime: tests/test_reliability.py::test_an_unresolvable_class_is_not_registered_or_built (a "
        "class name that does not resolve raised AttributeError inside Trainer(...); a rule code that is not "
        "LP + 3 digits raises ValueError when the rule fires)",
    ),
    Code(
        code="LP012", severity="error", title="a preset's rule that crashed instead of checking",
        fails="# acme-presets' rule: def eight_per_node(ctx): return 8 // (ctx.devices_per_node - 8)\n"
        'Trainer(strategy="acme_ddp", accelerator="cpu", devices=8)',
        fixed='Trainer(strategy="ddp", accelerator="cpu", devices=8)   # LIGHTNING_PRESETS_DENY=acme-presets meanwhile',
        stage="construction",
        evidence="runtime: tests/test_reliability.py::test_a_crashing_rule_is_the_presets_fault_with_its_distribution "
        "(the rule's own exception escaped from Trainer(...), and check blamed Lightning)",
    ),
    Code(
        code="LP013", severity="error", title="an installed distribution whose metadata has no name",
        fails='lightning_presets.presets()   # acme_presets-1.0.dist-info/METADATA has no "Name:" line',
        fixed="lightning_presets.presets()   # after pip install --force-reinstall acme-presets",
        evidence="runtime: tests/test_reliability.py::test_a_distribution_without_a_name_is_skipped_and_reported "
        "(its entry points can be neither attributed nor trusted; it made every preset fail to register)",
    ),
    Code(
        code="LP014", severity="warning", title="an entry point that takes long to import",
        fails="lightning_presets.presets()   # acme_presets sleeps 30 s at import: named on stderr while it loads",
        fixed="lightning_presets.presets()   # LIGHTNING_PRESETS_DENY=acme-presets, or acme_presets imports less",
    ),
    Code(
        code="LP015", severity="error", title="a preset whose distribution the trust variables leave out",
        fails='lightning_presets.strategy("fsdp2")   # with LIGHTNING_PRESETS_DENY=lightning-presets',
        fixed='lightning_presets.strategy("fsdp2")   # LIGHTNING_PRESETS_DENY unset, in every process of the job',
        stage="options",
        evidence="runtime: tests/test_reliability.py::test_unpickling_with_our_distribution_denied_says_denied (the "
        "preset is not loaded in this process, so it cannot be built or unpickled)",
    ),
)  # fmt: skip
