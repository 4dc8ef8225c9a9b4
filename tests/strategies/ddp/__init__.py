"""Tests mirroring ``lightning_presets.strategies.ddp``."""
