"""Presets from entry points to Lightning's registries: catalog and trust, class composition, build, probing."""
