"""The XLA family (``XLAFSDPStrategy``, TPUs)."""

from __future__ import annotations

from lightning_presets.core.family import Family

XLA_FAMILY = Family("xla")
"""XLA FSDP (``XLAFSDPStrategy``, TPUs): its own checkpoint format (resume not checked), no GPU memory layout."""
