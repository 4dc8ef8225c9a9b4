"""Tests mirroring ``lightning_presets.guards.resume``."""
