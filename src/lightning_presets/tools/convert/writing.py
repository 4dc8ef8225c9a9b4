"""Writing a converted checkpoint safely: into a temporary sibling of the destination, renamed when complete, so that
no reader ever sees a partial result and a failure leaves nothing behind."""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def staged(destination: Path, *, force: bool) -> Iterator[Path]:
    """A scratch path beside ``destination`` to write to; on success it replaces ``destination`` (which must not
    exist unless ``force``), on any failure it is removed."""
    scratch = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    staging = scratch / destination.name
    try:
        yield staging
        if destination.exists() or destination.is_symlink():
            if not force:
                raise FileExistsError(destination)
            _remove(destination)
        os.replace(staging, destination)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


def save_file(checkpoint: Mapping[str, Any], path: Path) -> None:
    """One ``torch.save`` file, as the Trainer writes it."""
    import torch

    torch.save(dict(checkpoint), path)


def weights_for_safetensors(weights: Mapping[str, Any], strip: str = "") -> dict[str, Any]:
    """The tensors of ``weights`` as ``safetensors`` stores them: contiguous, on the CPU, each its own storage (tied
    weights are written under every name they have), ``strip`` removed from the front of each name. Entries that
    are not tensors (Lightning's ``_extra_state`` objects) are not weights."""
    import torch

    tensors = {}
    for name, value in weights.items():
        if isinstance(value, torch.Tensor):
            tensors[name.removeprefix(strip)] = value.detach().to("cpu").contiguous().clone()
    return tensors


def save_safetensors(tensors: Mapping[str, Any], path: Path, metadata: Mapping[str, str]) -> None:
    from safetensors.torch import save_file as save

    save(dict(tensors), str(path), metadata=dict(metadata))
