"""The evidence plugin (``tests/evidence/proving.py``: the ``proof`` fixture and the check that a marked test observed a
failure for every code it names) for the proofs under ``tests/plugins/``."""

from __future__ import annotations

from proving import process_group, proof, pytest_runtest_call  # noqa: F401  (this folder's plugin)
