"""Test presets the way lightning-presets tests its own: a pytest plugin for platform teams.

Installing lightning-presets registers the plugin (``pytest11`` entry point and top-level module
``lightning_presets_pytest``, which imports nothing of this package until a fixture is used), so every test of the
environment can use its fixtures with no import:

- ``simulated_gpus(count, capability=(9, 0), memory=None)``: Lightning sees ``count`` CUDA devices for the rest of the
  test (CUDA itself is never touched), the simulation ``lightning-presets check`` uses;
- ``simulated_cluster(kind, nodes=1, tasks_per_node=1, env=None)``: ``os.environ`` as on rank 0 of a SLURM,
  torchelastic or LSF job, restored after the test.

:func:`check_examples` runs every documented ``fails``/``fixed`` example of a preset's rules under the hardware each
rule declares; it needs no pytest.
"""

from lightning_presets.testing.examples import check_examples

__all__ = ["check_examples"]
