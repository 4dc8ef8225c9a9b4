"""Tests mirroring ``lightning_presets.strategies.fsdp``."""
