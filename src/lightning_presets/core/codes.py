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


CATALOG_CODES: tuple[Code, ...] = (
    Code(
        code="LP001", severity="error", title="a preset name that is not lower-case",
        fails='[project.entry-points."lightning_presets.strategies"]\nFSDP_Fast = "acme_presets:FSDP_FAST"',
        fixed='[project.entry-points."lightning_presets.strategies"]\nfsdp_fast = "acme_presets:FSDP_FAST"',
    ),
    Code(
        code="LP002", severity="error", title="a preset name that Lightning already uses",
        fails='[project.entry-points."lightning_presets.strategies"]\nddp = "acme_presets:DDP"',
        fixed='[project.entry-points."lightning_presets.strategies"]\nacme_ddp = "acme_presets:DDP"',
    ),
    Code(
        code="LP003", severity="error", title="one preset name declared by two distributions",
        fails="pip install acme-presets other-presets   # both declare 'fsdp_fast'",
        fixed="LIGHTNING_PRESETS_DENY=other-presets python train.py",
    ),
    Code(
        code="LP004", severity="error", title="an entry point that fails to import or raises",
        fails='fsdp_fast = "acme_presets.missing_module:FSDP_FAST"',
        fixed='fsdp_fast = "acme_presets.presets:FSDP_FAST"',
    ),
    Code(
        code="LP005", severity="error", title="an entry point that gives something other than a preset",
        fails='fsdp_fast = "acme_presets:make_dict"   # returns a dict',
        fixed='fsdp_fast = "acme_presets:FSDP_FAST"   # a lightning_presets.Preset',
    ),
    Code(
        code="LP006", severity="error", title="an override key the preset does not take",
        fails='lightning_presets.strategy("fsdp_offload_ckpt", sharding_stratgy="FULL_SHARD")',
        fixed='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARD")',
        stage="options",
    ),
    Code(
        code="LP007", severity="error", title="an optional dependency the preset needs is missing",
        fails='Trainer(strategy="deepspeed_zero2_offload")   # deepspeed not installed',
        fixed="pip install 'lightning-presets[deepspeed]'",
        stage="options",
    ),
    Code(
        code="LP008", severity="error", title="a preset used with a target it has no form for",
        fails='lightning_presets.strategy("xla_fsdp_ckpt", target="trainer")',
        fixed='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric")',
        stage="options",
    ),
    Code(
        code="LP009", severity="error", title="an entry point whose name differs from its preset's name",
        fails='fsdp_fast = "acme_presets:FSDP_FAST"   # Preset(name="fsdp_quick", ...)',
        fixed='fsdp_quick = "acme_presets:FSDP_FAST"',
    ),
    Code(
        code="LP010", severity="error", title="an unknown preset name",
        fails='lightning_presets.strategy("fsdp_ofload_ckpt")',
        fixed='lightning_presets.strategy("fsdp_offload_ckpt")',
        stage="options",
    ),
    Code(
        code="LP011", severity="error", title="a preset whose class or rules are malformed",
        fails='Preset(name="acme_fsdp", strategy={"trainer": "FSDPStrategyy"}, rules=(Rule(code="ACME1", ...),), ...)',
        fixed='Preset(name="acme_fsdp", strategy={"trainer": "FSDPStrategy"}, rules=(Rule(code="LP901", ...),), ...)',
    ),
    Code(
        code="LP012", severity="error", title="a preset's rule that crashed instead of checking",
        fails="def eight_per_node(ctx):   # a third party's rule\n    return 8 // (ctx.devices_per_node - 8)",
        fixed='def eight_per_node(ctx):\n    return Problem("...", "devices=8") if ctx.devices_per_node != 8 else None',
        stage="construction",
    ),
    Code(
        code="LP013", severity="error", title="an installed distribution whose metadata has no name",
        fails="site-packages/acme_presets-1.0.dist-info/METADATA   # no 'Name:' line",
        fixed="pip install --force-reinstall acme-presets",
    ),
    Code(
        code="LP014", severity="warning", title="an entry point that takes long to import",
        fails="acme_presets/__init__.py   # time.sleep(30) or a network call at import",
        fixed="LIGHTNING_PRESETS_DENY=acme-presets python train.py   # or import less at the top of the module",
    ),
    Code(
        code="LP015", severity="error", title="a preset whose distribution the trust variables leave out",
        fails="LIGHTNING_PRESETS_DENY=lightning-presets python train.py   # lightning_presets.strategy('fsdp2')",
        fixed="python train.py   # LIGHTNING_PRESETS_DENY unset, in every process of the job",
        stage="options",
    ),
    Code(
        code="LP016", severity="error", title="an installed Lightning package that fails to import",
        fails="lightning-presets doctor   # `import lightning.pytorch` raises ImportError",
        fixed="pip install --force-reinstall 'lightning>=2.6.0,<2.7'",
        stage="doctor",
    ),
)  # fmt: skip
