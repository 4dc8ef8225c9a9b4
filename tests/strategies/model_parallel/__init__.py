"""Tests mirroring ``lightning_presets.strategies.model_parallel``."""
