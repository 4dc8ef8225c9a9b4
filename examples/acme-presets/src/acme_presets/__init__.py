"""Acme's standard presets: ``strategy="acme_fsdp"`` and ``lightning_presets.precision("acme-bf16")``.

Nothing needs importing: lightning-presets loads them through the entry points in ``pyproject.toml``.
"""

__version__ = "1.0.0"
