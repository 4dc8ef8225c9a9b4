"""Tests mirroring ``lightning_presets.tools.check``."""
