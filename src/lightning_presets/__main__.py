"""``python -m lightning_presets``: the ``lightning-presets`` command."""

from lightning_presets.cli import run

if __name__ == "__main__":
    run()
