"""Tests mirroring ``lightning_presets.strategies.xla``."""
