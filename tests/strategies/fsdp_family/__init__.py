"""Tests mirroring ``lightning_presets.strategies.fsdp_family``."""
