"""What a checkpoint is, read without loading it: its format, the processes that wrote it, its weights' precision and
its optimizer state.

Three formats are recognised, by their files:

- ``file``: one ``torch.save`` zip (DDP, one device, FSDP with ``state_dict_type="full"``, a consolidated checkpoint);
- ``distributed``: a ``torch.distributed.checkpoint`` folder (``.metadata`` and ``__RANK_N.distcp`` files; Lightning
  adds ``meta.pt``), written by FSDP (``FSDPStrategy``) and ``ModelParallelStrategy`` (FSDP2, tensor parallel);
- ``deepspeed``: a DeepSpeed folder (``latest`` naming a tag folder of ``mp_rank_XX_model_states.pt`` and one
  ``[bf16_]zero_pp_rank_R_mp_rank_XX_optim_states.pt`` per data-parallel rank); Lightning's layout is the same with
  the tag ``checkpoint``.

Bounded and safe: only pickles are read (never a tensor's bytes), through an unpickler that imports nothing and
calls nothing (every class the pickle names becomes an inert placeholder) and keys dictionaries so that no pickle can
make them quadratic. Every file is opened without blocking and read only if it is a regular file (a FIFO would block
forever); the zip is read as ``torch.load`` reads it (its central directory and local headers; neither CRCs, names
in local headers nor "version needed" checked), and so is the legacy (not zip) format. The work is bounded, not only
the bytes: pickles, zip indexes and folder listings above fixed sizes, compression above a fixed ratio, pickles that
run more than a fixed number of opcodes, create more than a fixed number of objects or take more than a fixed CPU
time, symbolic-link loops and tags that leave the folder are refused with :class:`CheckpointReadError`. Whatever the
reader cannot classify is left unknown: :func:`read_checkpoint` raises nothing but :class:`CheckpointReadError` and
:class:`FileNotFoundError`, whatever the files hold (its own failure included: ``CheckpointReadError.internal``).
Texts read from a checkpoint (keys, class names) reach facts and messages through :func:`clean` (no escape
sequences).

The modules, one concern each:

- :mod:`~lightning_presets.checkpoints.facts`: :class:`CheckpointFacts`, :class:`CheckpointReadError`,
  :func:`clean`;
- :mod:`~lightning_presets.checkpoints.limits`: every bound of the reader;
- :mod:`~lightning_presets.checkpoints.paths`: which local path an argument names, and the file system read
  without blocking;
- :mod:`~lightning_presets.checkpoints.unpickler`: the unpickler that runs nothing;
- :mod:`~lightning_presets.checkpoints.state`: what an unpickled state holds (dtypes, optimizer states);
- :mod:`~lightning_presets.checkpoints.torch_file`: one ``torch.save`` file, zip or legacy;
- :mod:`~lightning_presets.checkpoints.formats`: format detection (:func:`read_checkpoint`) and each
  format's facts.
"""

from __future__ import annotations

from lightning_presets.checkpoints import limits
from lightning_presets.checkpoints.facts import (
    MAX_TEXT,
    CheckpointFacts,
    CheckpointReadError,
    Format,
    KeyStyle,
    clean,
)
from lightning_presets.checkpoints.formats import read_checkpoint
from lightning_presets.checkpoints.limits import (
    MAX_COMPRESSION_RATIO,
    MAX_FOLDER_ENTRIES,
    MAX_PICKLE_BYTES,
    MAX_PICKLE_CLASSES,
    MAX_PICKLE_OBJECTS,
    MAX_PICKLE_OPCODES,
    MAX_PICKLE_SECONDS,
    MAX_SMALL_FILE_BYTES,
    MAX_TEXT_LINE,
    MAX_ZIP_INDEX_BYTES,
)
from lightning_presets.checkpoints.paths import FILE_URL, local_path
from lightning_presets.checkpoints.unpickler import label

__all__ = [
    "FILE_URL",
    "MAX_COMPRESSION_RATIO",
    "MAX_FOLDER_ENTRIES",
    "MAX_PICKLE_BYTES",
    "MAX_PICKLE_CLASSES",
    "MAX_PICKLE_OBJECTS",
    "MAX_PICKLE_OPCODES",
    "MAX_PICKLE_SECONDS",
    "MAX_SMALL_FILE_BYTES",
    "MAX_TEXT",
    "MAX_TEXT_LINE",
    "MAX_ZIP_INDEX_BYTES",
    "CheckpointFacts",
    "CheckpointReadError",
    "Format",
    "KeyStyle",
    "clean",
    "label",
    "limits",
    "local_path",
    "read_checkpoint",
]
