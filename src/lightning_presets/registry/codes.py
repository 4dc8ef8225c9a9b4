"""The findings of the registry: loading entry points (names, trust, malformed presets), building a preset from its
arguments, and its optional dependencies being missing. Declared once here, emitted by reference."""

from __future__ import annotations

from lightning_presets.core.codes import Code

NAME_NOT_LOWER_CASE = Code(
    code="LP001", stage="catalog", severity="error", title="a preset name that is not lower-case",
    fails='[project.entry-points."lightning_presets.strategies"]\n'
    'FSDP_Fast = "acme_presets:FSDP_FAST_UPPER"   # Preset(name="FSDP_Fast", ...)',
    fixed='[project.entry-points."lightning_presets.strategies"]\nfsdp_fast = "acme_presets:FSDP_FAST"',
    evidence="source: lightning/pytorch/trainer/connectors/accelerator_connector.py, "
    "_check_config_and_set_final_flags lower-cases the requested name, so an upper-case entry is never found "
    "(lightning 2.6.6)",
)  # fmt: skip

NAME_OF_LIGHTNING = Code(
    code="LP002", stage="catalog", severity="error", title="a preset name that Lightning already uses",
    fails='[project.entry-points."lightning_presets.strategies"]\nddp = "acme_presets:DDP"',
    fixed='[project.entry-points."lightning_presets.strategies"]\nacme_ddp = "acme_presets:ACME_DDP"',
    evidence="source: lightning/fabric/strategies/registry.py, _StrategyRegistry.register raises ValueError for a "
    "name already present (lightning 2.6.6)",
)  # fmt: skip

NAME_DECLARED_TWICE = Code(
    code="LP003", stage="catalog", severity="error", title="one preset name declared by two distributions",
    fails='# acme-presets and other-presets both declare:\n[project.entry-points."lightning_presets.strategies"]\n'
    'fsdp_fast = "acme_presets:FSDP_FAST"',
    fixed="LIGHTNING_PRESETS_DENY=other-presets python train.py   # only acme-presets' fsdp_fast loads",
    evidence="runtime: tests/test_catalog.py::test_duplicate_between_two_distributions_registers_neither (neither "
    "can be registered under the one name)",
)  # fmt: skip

ENTRY_POINT_FAILED = Code(
    code="LP004", stage="catalog", severity="error", title="an entry point that fails to import or raises",
    fails='fsdp_fast = "acme_presets.missing_module:FSDP_FAST"',
    fixed='fsdp_fast = "acme_presets:FSDP_FAST"',
    evidence="runtime: tests/test_catalog.py::test_bad_entry_point_is_reported_with_its_distribution (the entry "
    "point cannot be loaded)",
)  # fmt: skip

NOT_A_PRESET = Code(
    code="LP005", stage="catalog", severity="error", title="an entry point that gives something other than a preset",
    fails='fsdp_fast = "acme_presets:make_dict"   # returns a dict',
    fixed='fsdp_fast = "acme_presets:FSDP_FAST"   # a lightning_presets.Preset',
    evidence="runtime: tests/test_catalog.py::test_bad_entry_point_is_reported_with_its_distribution (nothing can "
    "be registered from it)",
)  # fmt: skip

UNKNOWN_OVERRIDE = Code(
    code="LP006", severity="error", title="an override key the preset does not take",
    fails='lightning_presets.strategy("fsdp_offload_ckpt", sharding_stratgy="FULL_SHARD")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARD")',
    stage="options",
    evidence="source: lightning/pytorch/strategies/fsdp.py, FSDPStrategy.__init__ forwards unknown keywords to "
    "torch's FullyShardedDataParallel, which raises TypeError when the model is wrapped (lightning 2.6.6)",
)  # fmt: skip

MISSING_DEPENDENCY = Code(
    code="LP007", severity="error", title="an optional dependency the preset needs is missing",
    fails='Trainer(strategy="deepspeed_zero2_offload")   # deepspeed not installed',
    fixed="Trainer(strategy=\"deepspeed_zero2_offload\")  # after pip install --no-build-isolation deepspeed",
    stage="options",
    evidence="source: lightning/pytorch/strategies/deepspeed.py, DeepSpeedStrategy.__init__ raises "
    "MisconfigurationException without deepspeed (lightning 2.6.6)",
)  # fmt: skip

NO_FORM_FOR_TARGET = Code(
    code="LP008", severity="error", title="a preset used with a target it has no form for",
    fails='lightning_presets.strategy("xla_fsdp_ckpt", target="trainer")',
    fixed='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric")',
    stage="options",
    evidence="runtime: tests/test_api.py::test_preset_without_a_form_for_the_target (there is no class to build)",
)  # fmt: skip

ENTRY_POINT_MISNAMED = Code(
    code="LP009", stage="catalog", severity="error", title="an entry point whose name differs from its preset's name",
    fails='fsdp_fast = "acme_presets:FSDP_QUICK"   # Preset(name="fsdp_quick", ...)',
    fixed='fsdp_quick = "acme_presets:FSDP_QUICK"',
    evidence="runtime: tests/test_catalog.py::test_bad_entry_point_is_reported_with_its_distribution (the name "
    "users pass would build another preset)",
)  # fmt: skip

UNKNOWN_PRESET = Code(
    code="LP010", severity="error", title="an unknown preset name",
    fails='lightning_presets.strategy("fsdp_ofload_ckpt")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt")',
    stage="options",
    evidence="source: lightning/fabric/strategies/registry.py, _StrategyRegistry.get raises KeyError for an "
    "unknown name (lightning 2.6.6)",
)  # fmt: skip

MALFORMED_PRESET = Code(
    code="LP011", stage="catalog", severity="error", title="a preset whose fields, class or rules are malformed",
    fails='acme_fsdp = "acme_presets:ACME_FSDP_BAD_RULE"   # a rule declared with code "ACME1"',
    fixed='acme_fsdp = "acme_presets:ACME_FSDP"   # its rule declared with code "LP901"',
    evidence="runtime: tests/test_reliability_plugins.py::"
    "test_a_malformed_preset_is_broken_in_list_doctor_show_check_and_trainer (extra_keys=5 or a string prepare "
    "raised TypeError inside Trainer(...), and extra_keys, mesh or tested_with of another type were internal errors "
    "in show or check); a class name that does not resolve raised AttributeError inside Trainer(...); a rule code "
    "that is not LP + 3 digits raises ValueError when the rule fires",
)  # fmt: skip

NAMELESS_DISTRIBUTION = Code(
    code="LP013", stage="catalog", severity="error", title="an installed distribution whose metadata has no name",
    fails='lightning_presets.presets()   # acme_presets-1.0.dist-info/METADATA has no "Name:" line',
    fixed="lightning_presets.presets()   # after pip install --force-reinstall acme-presets",
    evidence="runtime: tests/test_reliability.py::test_a_distribution_without_a_name_is_skipped_and_reported "
    "(its entry points can be neither attributed nor trusted; it made every preset fail to register)",
)  # fmt: skip

SLOW_ENTRY_POINT = Code(
    code="LP014", stage="catalog", severity="warning", title="an entry point that takes long to import",
    fails="lightning_presets.presets()   # acme_presets sleeps 30 s at import: named on stderr while it loads",
    fixed="lightning_presets.presets()   # LIGHTNING_PRESETS_DENY=acme-presets, or acme_presets imports less",
)  # fmt: skip

DENIED_PRESET = Code(
    code="LP015", severity="error", title="a preset whose distribution the trust variables leave out",
    fails='lightning_presets.strategy("fsdp2")   # with LIGHTNING_PRESETS_DENY=lightning-presets',
    fixed='lightning_presets.strategy("fsdp2")   # LIGHTNING_PRESETS_DENY unset, in every process of the job',
    stage="options",
    evidence="runtime: tests/test_reliability.py::test_unpickling_with_our_distribution_denied_says_denied (the "
    "preset is not loaded in this process, so it cannot be built or unpickled)",
)  # fmt: skip

DEEPSPEED_BROKEN = Code(
    stage="options",
    code="LP401", severity="error", title="DeepSpeed is installed but fails to import",
    fails='Trainer(strategy="deepspeed_zero2_offload")   # import deepspeed raises',
    fixed='Trainer(strategy="deepspeed_zero2_offload")   # after pip install --force-reinstall deepspeed',
    evidence="runtime: tests/test_deepspeed.py::test_broken_deepspeed_reports_its_first_error_line (Lightning "
    "imports deepspeed in DeepSpeedStrategy.__init__)",
)  # fmt: skip

DEEPSPEED_TORCH_PAIR = Code(
    stage="options",
    code="LP402", severity="error", title="a torch / DeepSpeed version pair known not to work",
    fails='Trainer(strategy="deepspeed_zero2_offload")   # torch 2.6 with deepspeed 0.15.4',
    fixed="Trainer(strategy=\"deepspeed_zero2_offload\")   # after pip install -U 'deepspeed>=0.16'",
    evidence="source: lightning/fabric/strategies/deepspeed.py, DeepSpeedStrategy.__init__ raises ImportError for "
    "torch>=2.6 with deepspeed<0.16 (lightning 2.6.6)",
)  # fmt: skip

TORCH_XLA_BROKEN = Code(
    stage="options",
    code="LP501", severity="error", title="torch_xla is installed but fails to import",
    fails='Fabric(strategy="xla_fsdp_ckpt")   # import torch_xla raises',
    fixed="Fabric(strategy=\"xla_fsdp_ckpt\")   # after pip install --force-reinstall 'torch_xla[tpu]'",
    evidence="runtime: tests/test_xla.py::test_broken_torch_xla_reports_its_first_error_line (Lightning imports "
    "torch_xla when it builds the strategy)",
)  # fmt: skip

TORCH_XLA_TORCH_PAIR = Code(
    stage="options",
    code="LP502", severity="error", title="torch_xla built for another torch release",
    fails='Fabric(strategy="xla_fsdp_ckpt")   # torch 2.13 with torch_xla 2.12',
    fixed="Fabric(strategy=\"xla_fsdp_ckpt\")   # after pip install 'torch~=2.12.0' 'torch_xla[tpu]~=2.12.0'",
    evidence="source: pytorch/xla README, installation: each torch_xla wheel is built against the torch release "
    "of the same version and its C extension fails to load against another",
)  # fmt: skip

PRECISION_DEPENDENCY_BROKEN = Code(
    stage="options",
    code="LP601", severity="error", title="a precision preset's dependency is installed but fails to import",
    fails='lightning_presets.precision("fp8-te")   # import transformer_engine raises',
    fixed="lightning_presets.precision(\"fp8-te\")   # after pip install --force-reinstall "
    "'transformer_engine[pytorch]'",
    evidence="runtime: "
    "tests/test_precision_presets.py::test_broken_transformer_engine_reports_its_first_error_line (the plugin "
    "imports it when built)",
)  # fmt: skip

PRECISION_DEPENDENCY_VERSION = Code(
    stage="options",
    code="LP602", severity="error", title="a precision preset's dependency in a version known not to work",
    fails='lightning_presets.precision("fp8-te")   # transformer_engine 0.10',
    fixed="lightning_presets.precision(\"fp8-te\")   # after pip install -U 'transformer_engine[pytorch]>=0.11'",
    evidence="source: lightning/fabric/plugins/precision/transformer_engine.py, "
    "TransformerEnginePrecision.__init__ raises ModuleNotFoundError below transformer_engine 0.11.0 (lightning "
    "2.6.6)",
)  # fmt: skip

CODES: tuple[Code, ...] = (
    NAME_NOT_LOWER_CASE,
    NAME_OF_LIGHTNING,
    NAME_DECLARED_TWICE,
    ENTRY_POINT_FAILED,
    NOT_A_PRESET,
    UNKNOWN_OVERRIDE,
    MISSING_DEPENDENCY,
    NO_FORM_FOR_TARGET,
    ENTRY_POINT_MISNAMED,
    UNKNOWN_PRESET,
    MALFORMED_PRESET,
    NAMELESS_DISTRIBUTION,
    SLOW_ENTRY_POINT,
    DENIED_PRESET,
    DEEPSPEED_BROKEN,
    DEEPSPEED_TORCH_PAIR,
    TORCH_XLA_BROKEN,
    TORCH_XLA_TORCH_PAIR,
    PRECISION_DEPENDENCY_BROKEN,
    PRECISION_DEPENDENCY_VERSION,
)
