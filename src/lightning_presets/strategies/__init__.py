"""The built-in strategy presets, one module per family. Each is published as an entry point."""
