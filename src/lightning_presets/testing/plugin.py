"""The pytest plugin's fixtures under the package's name, for ``-p lightning_presets.testing.plugin``.

The plugin itself is the top-level module :mod:`lightning_presets_pytest` (``pytest11`` entry point of the same
name), which pytest loads in every session without importing this package; this module only re-exports its fixtures
for suites that name the plugin by this path.
"""

from lightning_presets_pytest import simulated_cluster, simulated_gpus

__all__ = ["simulated_cluster", "simulated_gpus"]
