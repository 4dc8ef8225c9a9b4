"""What a checkpoint is, as the reader records it: :class:`CheckpointFacts`, the reader's one error
(:class:`CheckpointReadError`), and :func:`clean`, through which every text read from a checkpoint reaches facts and
messages."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Format = Literal["file", "distributed", "deepspeed"]
KeyStyle = Literal["ids", "names", "none"]


class CheckpointReadError(ValueError):
    """The checkpoint's facts cannot be read safely: what was refused, and why. ``internal``: the reader itself
    failed on it (a bug here, not in the checkpoint)."""

    def __init__(self, message: str, *, internal: bool = False) -> None:
        super().__init__(message)
        self.internal = internal


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointFacts:
    """What a checkpoint is, as read from its files without loading it."""

    path: str
    format: Format
    writer: str
    """Who wrote it, as far as the files tell: ``trainer`` (Lightning's Trainer), ``fabric``/``torch`` (a state of
    the user's own keys), ``deepspeed``."""
    world_size: int | None = None
    """Processes that wrote it (``None`` for a single file, which any number of processes can load)."""
    model_key: str | None = None
    """The top-level key holding the weights: ``state_dict`` (Trainer: DDP, ``ModelParallelStrategy``), ``model``
    (the Trainer's ``FSDPStrategy`` sharded layout) or the user's own."""
    top_level: tuple[str, ...] = ()
    """Top-level keys (for a distributed checkpoint: of the shards and of Lightning's ``meta.pt``)."""
    weight_dtypes: tuple[str, ...] = ()
    """Dtypes of the weights, e.g. ``("float32",)``."""
    optimizers: int = 0
    """Optimizer states present (0: weights only)."""
    optimizer_entries: tuple[str, ...] = ()
    """The top-level keys holding them: ``optimizer_states`` (the Trainer's file, a list), ``optimizer_0``... (the
    Trainer's sharded folders), the user's own (Fabric)."""
    optimizer_keys: KeyStyle = "none"
    """How the optimizer state is keyed: ``ids`` (a plain optimizer's ``state_dict()``), ``names`` (FSDP's and
    ``torch.distributed.checkpoint``'s fully qualified parameter names)."""
    data_parallel_size: int | None = None
    """DeepSpeed: ``dp_world_size`` recorded in the model states."""
    model_parallel_size: int | None = None
    """DeepSpeed: ``mp_world_size``."""
    zero_stage: int | None = None
    """DeepSpeed: the ZeRO stage of the run that wrote it."""
    zero_shards: int = 0
    """DeepSpeed: ZeRO optimizer shard files (one per data-parallel rank and model-parallel rank)."""
    tag: str | None = None
    """DeepSpeed: the tag folder the ``latest`` file names; ``None`` when the path is the tag folder itself."""
    universal: bool = False
    """DeepSpeed: a universal checkpoint (``ds_to_universal``) is present (``latest_universal``)."""
    unknown_entries: tuple[str, ...] = ()
    """Top-level mappings that are neither weights nor a state shaped like an optimizer's (a custom optimizer's,
    a scheduler's, the user's own): what they hold is unknown."""

    def describe(self) -> str:
        """One phrase for messages: ``a sharded checkpoint (torch.distributed.checkpoint) of 2 processes (...)``."""
        details = [_WRITERS.get(self.writer, self.writer)]
        if self.format == "deepspeed":
            stage = f"ZeRO-{self.zero_stage}" if self.zero_stage is not None else "ZeRO"
            universal = ", a universal copy beside it" if self.universal else ""
            return (
                f"a DeepSpeed {stage} checkpoint of data-parallel size {self.data_parallel_size} "
                f"({details[0]}, {self.zero_shards} optimizer shard files{universal})"
            )
        if self.format == "distributed" and self.model_key is not None:
            details.append(f"weights under {self.model_key!r}")
        details.append(f"{'/'.join(self.weight_dtypes) or 'unknown-precision'} weights")
        keys = "optimizer state" + (
            f" keyed by parameter {self.optimizer_keys}" if self.optimizer_keys != "none" else ""
        )
        details.append(keys if self.optimizers else "no optimizer state")
        if self.format == "distributed":
            processes = f"{self.world_size} process{'es' if self.world_size != 1 else ''}"
            return f"a sharded checkpoint (torch.distributed.checkpoint) of {processes} ({'; '.join(details)})"
        return f"a single-file checkpoint ({'; '.join(details)})"


_WRITERS = {
    "trainer": "saved by Lightning's Trainer",
    "fabric": "saved by Fabric or torch.save",
    "torch": "saved by torch.distributed.checkpoint directly",
    "deepspeed": "saved by DeepSpeed",
}


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")
MAX_TEXT = 200
"""The most characters of a text read from a checkpoint (a key, a class's name) that a message repeats."""


def clean(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` read from a checkpoint, safe for a terminal: control characters (escape sequences) written as
    ``\\xNN``, at most ``limit`` characters."""
    text = _CONTROL.sub(lambda found: f"\\x{ord(found.group()):02x}", text)
    return text if len(text) <= limit else text[:limit] + "..."
