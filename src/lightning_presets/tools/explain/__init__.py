"""``lightning-presets explain``: a failed distributed run's logs turned into one cause and one fix per failure.

:func:`explain` reads files, folders (torchrun's ``--log-dir`` with its per-rank files and torchelastic error files,
a SLURM output folder) and standard input (:mod:`.reading`), matches the failure signatures
(:mod:`lightning_presets.failures`) and orders the failures, the first one first (:mod:`.analysis`).
"""

from __future__ import annotations

from lightning_presets.tools.explain.analysis import Event, Failure, Report, analyse, explain
from lightning_presets.tools.explain.reading import MAX_BYTES, Read, Stream, read

__all__ = ["MAX_BYTES", "Event", "Failure", "Read", "Report", "Stream", "analyse", "explain", "read"]
