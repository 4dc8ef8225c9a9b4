"""Tests mirroring ``lightning_presets.strategies.deepspeed``."""
