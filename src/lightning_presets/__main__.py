"""``python -m lightning_presets``: the ``lightning-presets`` command."""

import sys

from lightning_presets.cli import main

if __name__ == "__main__":
    sys.exit(main())
