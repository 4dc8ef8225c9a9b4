"""The CPU memory a conversion needs, computed from the source's own metadata before anything is loaded, and the
memory the machine has available.

No layout the presets write converts by streaming with the owners' tools: Lightning's and torch's readers of a
``torch.distributed.checkpoint`` folder and DeepSpeed's consolidation hold the whole checkpoint in memory, and so does
convert, once; the verification reads the result back beside it (a second copy). The size comes from what the source
says of itself: a folder's ``.metadata`` (every tensor's shape and dtype, read by torch's reader) plus Lightning's
``meta.pt``, a file's size (it is memory-mapped: its pages count once read), a DeepSpeed tag folder's shard files.
A need above what is available is a warning, never a refusal (swap, or pages the kernel reclaims, may still serve).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lightning_presets.checkpoints import CheckpointFacts

GIB = 2**30
MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True, slots=True)
class Need:
    """The memory a conversion needs and what the machine has available (bytes; ``available`` ``None`` where the
    platform does not say)."""

    checkpoint: int
    """The checkpoint's size in memory, from its own metadata."""
    copies: int
    """How many times it is held at the peak: 1, or 2 while the result is read back to verify it."""
    available: int | None

    @property
    def needed(self) -> int:
        return self.checkpoint * self.copies

    @property
    def short(self) -> bool:
        """The need exceeds what is available (a warning: it may still fit with swap)."""
        return self.available is not None and self.needed > self.available

    def describe(self) -> str:
        held = "the checkpoint is held once" + (", and once more while the result is read back" if self.copies > 1
                                                 else "")  # fmt: skip
        available = f"; {gib(self.available)} available" if self.available is not None else ""
        return f"needs about {gib(self.needed)} of memory: {held}{available}"

    def warning(self) -> str:
        return (
            f"this conversion needs about {gib(self.needed)} of memory ({gib(self.checkpoint)} checkpoint held "
            f"{'twice while verifying' if self.copies > 1 else 'once'}), more than the {gib(self.available)} "
            "available: it may swap or be killed for memory; free memory, run it on a larger machine"
            + (", or pass --no-verify (the checkpoint held once)" if self.copies > 1 else "")
        )


def gib(size: int | None) -> str:
    if size is None:
        return "unknown"
    return f"{size / GIB:.2f} GiB" if size >= GIB // 10 else f"{size / 2**20:.1f} MiB"


def need(facts: CheckpointFacts, *, verify_result: bool) -> Need | None:
    """The need of converting the checkpoint ``facts`` describes (``None`` where its metadata cannot say)."""
    size = checkpoint_bytes(facts)
    if size is None:
        return None
    return Need(checkpoint=size, copies=2 if verify_result else 1, available=available_bytes())


def checkpoint_bytes(facts: CheckpointFacts) -> int | None:
    """The checkpoint's size in memory from its own metadata, before loading it."""
    path = Path(facts.path)
    try:
        if facts.format == "file":
            return path.stat().st_size
        if facts.format == "distributed":
            return _indexed_bytes(path) + sum(each.stat().st_size for each in path.glob("meta.pt"))
        from lightning_presets.checkpoints.conversions import deepspeed_root

        root, tag = deepspeed_root(facts)
        return sum(each.stat().st_size for each in (Path(root) / tag).glob("*.pt"))
    except (OSError, ValueError, RuntimeError):
        return None


def _indexed_bytes(folder: Path) -> int:
    """Every tensor's bytes as the folder's ``.metadata`` lists them (shape × dtype), plus its pickled objects'
    stored sizes."""
    import math

    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = FileSystemReader(str(folder)).read_metadata()
    total = 0
    for entry in metadata.state_dict_metadata.values():
        if isinstance(entry, TensorStorageMetadata):
            total += math.prod(entry.size) * entry.properties.dtype.itemsize
    stored = metadata.storage_data or {}
    total += sum(
        item.length for key, item in stored.items() if not isinstance(metadata.state_dict_metadata.get(key.fqn),
                                                                     TensorStorageMetadata)
    )  # fmt: skip
    return int(total)


def available_bytes() -> int | None:
    """``MemAvailable`` of ``/proc/meminfo`` (Linux): what can be allocated without swapping; ``None`` elsewhere."""
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    pages = getattr(os, "sysconf_names", {})
    if "SC_AVPHYS_PAGES" in pages:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    return None
