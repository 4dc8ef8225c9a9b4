"""The ``ModelParallelStrategy`` presets' arguments as their rules and hooks read them:
:class:`ModelParallelOptions`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.context import Context, Options

_SIZES = ("data_parallel_size", "tensor_parallel_size")


@dataclass(frozen=True, slots=True)
class ModelParallelOptions:
    """The ``ModelParallelStrategy`` presets' arguments as their rules read them: each key, and Lightning's default
    when it is absent, once (the family's options view)."""

    values: Mapping[str, Any]
    """The preset's arguments (defaults merged with the user's overrides)."""

    @classmethod
    def of(cls, source: Options | Context | Mapping[str, Any]) -> ModelParallelOptions:
        """The view of an :class:`Options`, a :class:`Context`'s options or the arguments a strategy was built with."""
        if isinstance(source, Options):
            return cls(source.values)
        return cls(source.options if isinstance(source, Context) else source)

    def size(self, key: str) -> Any:
        """``data_parallel_size`` or ``tensor_parallel_size`` as written; Lightning's ``"auto"`` when absent."""
        return self.values.get(key, "auto")

    @property
    def parallelize_fn(self) -> Any:
        """Fabric's ``parallelize_fn(module, device_mesh)``; ``None`` when absent."""
        return self.values.get("parallelize_fn")
