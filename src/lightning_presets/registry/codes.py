"""The findings of the registry: loading entry points (names, trust, malformed presets), building a preset from its
arguments, and its optional dependencies being missing. Declared once here, emitted by reference."""

from __future__ import annotations

from lightning_presets.core.codes import Code
from lightning_presets.core.findings import Severity


def _catalog(code: str, title: str, fails: str, fixed: str, evidence: str = "", severity: Severity = "error") -> Code:
    """A code of loading the entry points (stage ``catalog``): ``fails`` and ``fixed`` are entry points, or the calls
    that load them."""
    return Code(code=code, stage="catalog", severity=severity, title=title, fails=fails, fixed=fixed, evidence=evidence)


def _options(code: str, title: str, fails: str, fixed: str, evidence: str) -> Code:
    """An error of building a preset from its name and arguments (stage ``options``), before Lightning sees them."""
    return Code(code=code, stage="options", severity="error", title=title, fails=fails, fixed=fixed, evidence=evidence)


NAME_NOT_LOWER_CASE = _catalog("LP001", "a preset name that is not lower-case",
    '[project.entry-points."lightning_presets.strategies"]\n'
    'FSDP_Fast = "acme_presets:FSDP_FAST_UPPER"   # Preset(name="FSDP_Fast", ...)',
    '[project.entry-points."lightning_presets.strategies"]\nfsdp_fast = "acme_presets:FSDP_FAST"',
    "runtime: Lightning lower-cases the requested name: the Trainer raises ValueError "
    "'invalid strategy name'")  # fmt: skip

NAME_OF_LIGHTNING = _catalog("LP002", "a preset name that Lightning already uses",
    '[project.entry-points."lightning_presets.strategies"]\nddp = "acme_presets:DDP"',
    '[project.entry-points."lightning_presets.strategies"]\nacme_ddp = "acme_presets:ACME_DDP"',
    "runtime: Lightning's registry raises ValueError 'already present in the registry'")  # fmt: skip

NAME_DECLARED_TWICE = _catalog("LP003", "one preset name declared by two distributions",
    '# acme-presets and other-presets both declare:\n[project.entry-points."lightning_presets.strategies"]\n'
    'fsdp_fast = "acme_presets:FSDP_FAST"',
    "LIGHTNING_PRESETS_DENY=other-presets python train.py   # only acme-presets' fsdp_fast loads",
    "runtime: the second registration raises ValueError 'already present in the registry'")  # fmt: skip

ENTRY_POINT_FAILED = _catalog("LP004", "an entry point that fails to import or raises",
    'fsdp_fast = "acme_presets.missing_module:FSDP_FAST"',
    'fsdp_fast = "acme_presets:FSDP_FAST"',
    "runtime: EntryPoint.load raises ModuleNotFoundError")  # fmt: skip

NOT_A_PRESET = _catalog("LP005", "an entry point that gives something other than a preset",
    'fsdp_fast = "acme_presets:make_dict"   # returns a dict',
    'fsdp_fast = "acme_presets:FSDP_FAST"   # a lightning_presets.Preset',
    "runtime: Lightning's registry raises TypeError calling it")  # fmt: skip

UNKNOWN_OVERRIDE = _options("LP006", "an override key the preset does not take",
    'lightning_presets.strategy("fsdp_offload_ckpt", sharding_stratgy="FULL_SHARD")',
    'lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARD")',
    "runtime: Lightning's DDPStrategy passes it to DistributedDataParallel in fit: TypeError 'unexpected "
    "keyword argument'")  # fmt: skip

MISSING_DEPENDENCY = _options("LP007", "an optional dependency the preset needs is missing",
    'Trainer(strategy="deepspeed_zero2_offload")   # deepspeed not installed',
    "Trainer(strategy=\"deepspeed_zero2_offload\")  # after pip install --no-build-isolation deepspeed",
    "runtime: Lightning's DeepSpeedStrategy raises MisconfigurationException; its availability flag set as "
    "without deepspeed")  # fmt: skip

NO_FORM_FOR_TARGET = _options("LP008", "a preset used with a target it has no form for",
    'lightning_presets.strategy("xla_fsdp_ckpt", target="trainer")',
    'lightning_presets.strategy("xla_fsdp_ckpt", target="fabric")',
    "runtime: the Trainer raises ValueError for a Fabric strategy")  # fmt: skip

ENTRY_POINT_MISNAMED = _catalog("LP009", "an entry point whose name differs from its preset's name",
    'fsdp_fast = "acme_presets:FSDP_QUICK"   # Preset(name="fsdp_quick", ...)',
    'fsdp_quick = "acme_presets:FSDP_QUICK"',
    "runtime: the Trainer raises ValueError 'invalid strategy name' for the entry point's name")  # fmt: skip

UNKNOWN_PRESET = _options("LP010", "an unknown preset name",
    'lightning_presets.strategy("fsdp_ofload_ckpt")',
    'lightning_presets.strategy("fsdp_offload_ckpt")',
    "runtime: the Trainer raises ValueError 'invalid strategy name'")  # fmt: skip

MALFORMED_PRESET = _catalog("LP011", "a preset whose fields, class or rules are malformed",
    'acme_fsdp = "acme_presets:ACME_FSDP_BAD_RULE"   # a rule declared with code "ACME1"',
    'acme_fsdp = "acme_presets:ACME_FSDP"   # its rule declared with code "LP901"',
    "runtime: the Trainer raises ValueError for a class that is not a Trainer strategy")  # fmt: skip

NAMELESS_DISTRIBUTION = _catalog("LP013", "an installed distribution whose metadata has no name",
    'lightning_presets.presets()   # acme_presets-1.0.dist-info/METADATA has no "Name:" line',
    "lightning_presets.presets()   # after pip install --force-reinstall acme-presets",
    "runtime: importlib.metadata raises ValueError: the publisher of its entry points cannot be found, so "
    "neither attributed nor trusted")  # fmt: skip

SLOW_ENTRY_POINT = _catalog("LP014", "an entry point that takes long to import",
    "lightning_presets.presets()   # acme_presets sleeps 30 s at import: named on stderr while it loads",
    "lightning_presets.presets()   # LIGHTNING_PRESETS_DENY=acme-presets, or acme_presets imports less",
    severity="warning")  # fmt: skip

DENIED_PRESET = _options("LP015", "a preset whose distribution the trust variables leave out",
    'lightning_presets.strategy("fsdp2")   # with LIGHTNING_PRESETS_DENY=lightning-presets',
    'lightning_presets.strategy("fsdp2")   # LIGHTNING_PRESETS_DENY unset, in every process of the job',
    "runtime: a fresh process: the Trainer raises ValueError 'invalid strategy name'")  # fmt: skip

DEEPSPEED_BROKEN = _options("LP401", "DeepSpeed is installed but fails to import",
    'Trainer(strategy="deepspeed_zero2_offload")   # import deepspeed raises',
    'Trainer(strategy="deepspeed_zero2_offload")   # after pip install --force-reinstall deepspeed',
    "runtime: the broken import raises from DeepSpeedStrategy(...)")  # fmt: skip

DEEPSPEED_TORCH_PAIR = _options("LP402", "a torch / DeepSpeed version pair known not to work",
    'Trainer(strategy="deepspeed_zero2_offload")   # torch 2.6 with deepspeed 0.15.4',
    "Trainer(strategy=\"deepspeed_zero2_offload\")   # after pip install -U 'deepspeed>=0.16'",
    "runtime: Lightning raises ImportError; deepspeed 0.15 stood in by Lightning's version flag")  # fmt: skip

TORCH_XLA_BROKEN = _options("LP501", "torch_xla is installed but fails to import",
    'Fabric(strategy="xla_fsdp_ckpt")   # import torch_xla raises',
    "Fabric(strategy=\"xla_fsdp_ckpt\")   # after pip install --force-reinstall 'torch_xla[tpu]'",
    "runtime: Lightning raises ModuleNotFoundError")  # fmt: skip

TORCH_XLA_TORCH_PAIR = _options("LP502", "torch_xla built for another torch release",
    'Fabric(strategy="xla_fsdp_ckpt")   # torch 2.13 with torch_xla 2.12',
    "Fabric(strategy=\"xla_fsdp_ckpt\")   # after pip install 'torch~=2.12.0' 'torch_xla[tpu]~=2.12.0'",
    "source: pytorch/xla README, installation: each torch_xla wheel is built against the torch release "
    "of the same version and its C extension fails to load against another")  # fmt: skip

PRECISION_DEPENDENCY_BROKEN = _options("LP601", "a precision preset's dependency is installed but fails to import",
    'lightning_presets.precision("fp8-te")   # import transformer_engine raises',
    "lightning_presets.precision(\"fp8-te\")   # after pip install --force-reinstall "
    "'transformer_engine[pytorch]'",
    "runtime: the broken import raises from TransformerEnginePrecision(...)")  # fmt: skip

PRECISION_DEPENDENCY_VERSION = _options("LP602", "a precision preset's dependency in a version known not to work",
    'lightning_presets.precision("fp8-te")   # transformer_engine 0.10',
    "lightning_presets.precision(\"fp8-te\")   # after pip install -U 'transformer_engine[pytorch]>=0.11'",
    "runtime: Lightning raises ModuleNotFoundError below 0.11.0")  # fmt: skip

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
