"""The findings of the registry: loading entry points (names, trust, malformed presets), building a preset from its
arguments, and its optional dependencies being missing. Declared once here, emitted by reference."""

from __future__ import annotations

from lightning_presets.core.codes import Code

NAME_NOT_LOWER_CASE = Code(
    code="LP001", stage="catalog", severity="error", title="a preset name that is not lower-case",
    fails='[project.entry-points."lightning_presets.strategies"]\n'
    'FSDP_Fast = "acme_presets:FSDP_FAST_UPPER"   # Preset(name="FSDP_Fast", ...)',
    fixed='[project.entry-points."lightning_presets.strategies"]\nfsdp_fast = "acme_presets:FSDP_FAST"',
    evidence="runtime: Lightning lower-cases the requested name: the Trainer raises ValueError 'invalid strategy name'",
)  # fmt: skip

NAME_OF_LIGHTNING = Code(
    code="LP002", stage="catalog", severity="error", title="a preset name that Lightning already uses",
    fails='[project.entry-points."lightning_presets.strategies"]\nddp = "acme_presets:DDP"',
    fixed='[project.entry-points."lightning_presets.strategies"]\nacme_ddp = "acme_presets:ACME_DDP"',
    evidence="runtime: Lightning's registry raises ValueError 'already present in the registry'",
)  # fmt: skip

NAME_DECLARED_TWICE = Code(
    code="LP003", stage="catalog", severity="error", title="one preset name declared by two distributions",
    fails='# acme-presets and other-presets both declare:\n[project.entry-points."lightning_presets.strategies"]\n'
    'fsdp_fast = "acme_presets:FSDP_FAST"',
    fixed="LIGHTNING_PRESETS_DENY=other-presets python train.py   # only acme-presets' fsdp_fast loads",
    evidence="runtime: the second registration raises ValueError 'already present in the registry'",
)  # fmt: skip

ENTRY_POINT_FAILED = Code(
    code="LP004", stage="catalog", severity="error", title="an entry point that fails to import or raises",
    fails='fsdp_fast = "acme_presets.missing_module:FSDP_FAST"',
    fixed='fsdp_fast = "acme_presets:FSDP_FAST"',
    evidence="runtime: EntryPoint.load raises ModuleNotFoundError",
)  # fmt: skip

NOT_A_PRESET = Code(
    code="LP005", stage="catalog", severity="error", title="an entry point that gives something other than a preset",
    fails='fsdp_fast = "acme_presets:make_dict"   # returns a dict',
    fixed='fsdp_fast = "acme_presets:FSDP_FAST"   # a lightning_presets.Preset',
    evidence="runtime: Lightning's registry raises TypeError calling it",
)  # fmt: skip

UNKNOWN_OVERRIDE = Code(
    code="LP006", severity="error", title="an override key the preset does not take",
    fails='lightning_presets.strategy("fsdp_offload_ckpt", sharding_stratgy="FULL_SHARD")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARD")',
    stage="options",
    evidence="runtime: Lightning's DDPStrategy passes it to DistributedDataParallel in fit: TypeError 'unexpected "
    "keyword argument'",
)  # fmt: skip

MISSING_DEPENDENCY = Code(
    code="LP007", severity="error", title="an optional dependency the preset needs is missing",
    fails='Trainer(strategy="deepspeed_zero2_offload")   # deepspeed not installed',
    fixed="Trainer(strategy=\"deepspeed_zero2_offload\")  # after pip install --no-build-isolation deepspeed",
    stage="options",
    evidence="runtime: Lightning's DeepSpeedStrategy raises MisconfigurationException; its availability flag set as "
    "without deepspeed",
)  # fmt: skip

NO_FORM_FOR_TARGET = Code(
    code="LP008", severity="error", title="a preset used with a target it has no form for",
    fails='lightning_presets.strategy("xla_fsdp_ckpt", target="trainer")',
    fixed='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric")',
    stage="options",
    evidence="runtime: the Trainer raises ValueError for a Fabric strategy",
)  # fmt: skip

ENTRY_POINT_MISNAMED = Code(
    code="LP009", stage="catalog", severity="error", title="an entry point whose name differs from its preset's name",
    fails='fsdp_fast = "acme_presets:FSDP_QUICK"   # Preset(name="fsdp_quick", ...)',
    fixed='fsdp_quick = "acme_presets:FSDP_QUICK"',
    evidence="runtime: the Trainer raises ValueError 'invalid strategy name' for the entry point's name",
)  # fmt: skip

UNKNOWN_PRESET = Code(
    code="LP010", severity="error", title="an unknown preset name",
    fails='lightning_presets.strategy("fsdp_ofload_ckpt")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt")',
    stage="options",
    evidence="runtime: the Trainer raises ValueError 'invalid strategy name'",
)  # fmt: skip

MALFORMED_PRESET = Code(
    code="LP011", stage="catalog", severity="error", title="a preset whose fields, class or rules are malformed",
    fails='acme_fsdp = "acme_presets:ACME_FSDP_BAD_RULE"   # a rule declared with code "ACME1"',
    fixed='acme_fsdp = "acme_presets:ACME_FSDP"   # its rule declared with code "LP901"',
    evidence="runtime: the Trainer raises ValueError for a class that is not a Trainer strategy",
)  # fmt: skip

NAMELESS_DISTRIBUTION = Code(
    code="LP013", stage="catalog", severity="error", title="an installed distribution whose metadata has no name",
    fails='lightning_presets.presets()   # acme_presets-1.0.dist-info/METADATA has no "Name:" line',
    fixed="lightning_presets.presets()   # after pip install --force-reinstall acme-presets",
    evidence="runtime: importlib.metadata raises ValueError: the publisher of its entry points cannot be found, so "
    "neither attributed nor trusted",
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
    evidence="runtime: a fresh process: the Trainer raises ValueError 'invalid strategy name'",
)  # fmt: skip

DEEPSPEED_BROKEN = Code(
    stage="options",
    code="LP401", severity="error", title="DeepSpeed is installed but fails to import",
    fails='Trainer(strategy="deepspeed_zero2_offload")   # import deepspeed raises',
    fixed='Trainer(strategy="deepspeed_zero2_offload")   # after pip install --force-reinstall deepspeed',
    evidence="runtime: the broken import raises from DeepSpeedStrategy(...)",
)  # fmt: skip

DEEPSPEED_TORCH_PAIR = Code(
    stage="options",
    code="LP402", severity="error", title="a torch / DeepSpeed version pair known not to work",
    fails='Trainer(strategy="deepspeed_zero2_offload")   # torch 2.6 with deepspeed 0.15.4',
    fixed="Trainer(strategy=\"deepspeed_zero2_offload\")   # after pip install -U 'deepspeed>=0.16'",
    evidence="runtime: Lightning raises ImportError; deepspeed 0.15 stood in by Lightning's version flag",
)  # fmt: skip

TORCH_XLA_BROKEN = Code(
    stage="options",
    code="LP501", severity="error", title="torch_xla is installed but fails to import",
    fails='Fabric(strategy="xla_fsdp_ckpt")   # import torch_xla raises',
    fixed="Fabric(strategy=\"xla_fsdp_ckpt\")   # after pip install --force-reinstall 'torch_xla[tpu]'",
    evidence="runtime: Lightning raises ModuleNotFoundError",
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
    evidence="runtime: the broken import raises from TransformerEnginePrecision(...)",
)  # fmt: skip

PRECISION_DEPENDENCY_VERSION = Code(
    stage="options",
    code="LP602", severity="error", title="a precision preset's dependency in a version known not to work",
    fails='lightning_presets.precision("fp8-te")   # transformer_engine 0.10',
    fixed="lightning_presets.precision(\"fp8-te\")   # after pip install -U 'transformer_engine[pytorch]>=0.11'",
    evidence="runtime: Lightning raises ModuleNotFoundError below 0.11.0",
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
