"""The bounds of the checkpoint reader: what it reads at the most, in bytes, entries, opcodes, objects and CPU time.

Every module reads them as ``limits.NAME`` (never imported by name), so that one value bounds the whole reader.
"""

from __future__ import annotations

MAX_PICKLE_BYTES = 256 * 2**20
"""The largest pickle read (``data.pkl`` of a file, ``.metadata`` of a distributed checkpoint; a real Lightning
checkpoint's is well under 16 MB, a distributed checkpoint's metadata grows with the shards)."""
MAX_PICKLE_OPCODES = 4_000_000
"""The most opcodes one pickle may run (the work of reading it, under a microsecond each: a Lightning checkpoint runs
about 125 per parameter tensor with Adam's state, 500,000 for 4,000 tensors)."""
MAX_PICKLE_OBJECTS = 2_000_000
"""The most objects one pickle may create while it is read, counted as the memory blocks the process allocates
meanwhile (``sys.getallocatedblocks``; a Lightning checkpoint creates about 40 per parameter tensor with Adam's
state)."""
MAX_PICKLE_SECONDS = 5.0
"""The most CPU time one pickle may cost to read, whatever else bounds it."""
MAX_PICKLE_CLASSES = 10_000
"""The most distinct classes one pickle may name (real ones name a few dozen)."""
MAX_COMPRESSION_RATIO = 50
"""The most a compressed ``data.pkl`` may expand (``torch.save`` stores it uncompressed)."""
MAX_ZIP_INDEX_BYTES = 64 * 2**20
"""The largest zip central directory read."""
MAX_FOLDER_ENTRIES = 100_000
"""The most entries listed in a checkpoint folder."""
MAX_SMALL_FILE_BYTES = 4096
"""DeepSpeed's ``latest`` file names a tag: a few bytes."""
MAX_TEXT_LINE = 2**16
"""The longest line of a text opcode (protocol 0) read."""
