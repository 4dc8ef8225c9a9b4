"""Acme's standard presets: ``strategy="acme_fsdp"``, ``strategy="acme_replica"`` (of Acme's own family) and
``lightning_presets.precision("acme-bf16")``.

Nothing needs importing: lightning-presets loads them through the entry points in ``pyproject.toml``.
"""

__version__ = "1.0.0"
