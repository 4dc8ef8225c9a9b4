"""A converted checkpoint read back and compared with its source, tensor by tensor.

The source was read by its owner's loader (torch, Lightning or DeepSpeed) and the result is read back from disk by
another (``torch.load`` or ``safetensors``): what is compared is what the user will load. A distributed source is
also compared by its own index (``.metadata``: every tensor's name, shape and dtype, read by torch's reader), so that a
tensor the loader skipped is found too.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any


def tensors(tree: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Every tensor in a nested checkpoint, with its path (``state_dict/layer.weight``, ``optimizer_states/0/...``)."""
    import torch

    if isinstance(tree, torch.Tensor):
        yield prefix, tree
    elif isinstance(tree, Mapping):
        for key, value in tree.items():
            yield from tensors(value, f"{prefix}/{key}" if prefix else str(key))
    elif isinstance(tree, list | tuple):
        for index, value in enumerate(tree):
            yield from tensors(value, f"{prefix}/{index}" if prefix else str(index))


def differences(expected: Mapping[str, Any], written: Mapping[str, Any], limit: int = 5) -> list[str]:
    """How ``written`` differs from ``expected``, tensor by tensor (names, shapes, dtypes, values): at most
    ``limit`` lines; empty when equal."""
    import torch

    want, got = dict(tensors(expected)), dict(tensors(written))
    problems = [f"missing {name}" for name in want.keys() - got.keys()]
    problems += [f"unexpected {name}" for name in got.keys() - want.keys()]
    for name in sorted(want.keys() & got.keys()):
        a, b = want[name], got[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            problems.append(f"{name}: {tuple(a.shape)} {a.dtype} became {tuple(b.shape)} {b.dtype}")
        elif not torch.equal(a.detach().cpu(), b.detach().cpu()):
            problems.append(f"{name}: the values differ")
        if len(problems) >= limit:
            break
    return sorted(problems)[:limit]


def indexed_tensors(folder: str) -> dict[str, tuple[tuple[int, ...], str]]:
    """A ``torch.distributed.checkpoint`` folder's own index: each tensor's flattened name, shape and dtype."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    metadata = FileSystemReader(folder).read_metadata()
    return {
        name: (tuple(entry.size), str(entry.properties.dtype).removeprefix("torch."))
        for name, entry in metadata.state_dict_metadata.items()
        if isinstance(entry, TensorStorageMetadata)
    }


def read_back(path: Path, target: str) -> dict[str, Any]:
    """The written result, read as a user loads it."""
    if target == "safetensors":
        from safetensors.torch import load_file

        return dict(load_file(str(path)))
    if target == "folder":
        from lightning_presets.tools.convert.loading import read_folder

        return read_folder(path)
    import torch

    loaded: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    return loaded
