"""Precision presets and the precision plugins they need."""
