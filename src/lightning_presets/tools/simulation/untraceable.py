"""What fake tensors cannot run, said in the user's terms: the operation, and the line of the model's code.

Fake tensors carry shapes but no values. An operation whose result depends on the values (``.item()``,
``if tensor > 0:``, ``.tolist()``, ``nonzero``, a boolean mask, ``unique``, ``.numpy()``) cannot be traced.
While the model is *built* the values do not matter (an initialiser such as ``nn.init.trunc_normal_``
loops until no sample is out of range): :func:`answering_scalars` answers those reads with zero and counts
them. In the training step they decide what runs, so the plan stops there and says where
(:func:`untraceable_reason`).
"""

from __future__ import annotations

import contextlib
import os
import sysconfig
import traceback
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_SCALAR = "aten._local_scalar_dense"
_WHAT = {
    _SCALAR: "reads a Python value from a tensor (.item(), bool(tensor) as in `if tensor > 0:`, .tolist(), int())",
    "aten.nonzero": "calls nonzero (or a boolean mask, torch.where with one argument): its size depends on the values",
    "aten._unique2": "calls unique: its size depends on the values",
}


def _is_users(path: str) -> bool:
    """Whether a frame's file is the user's: not torch, Lightning, this package or the standard library."""
    import lightning

    import lightning_presets

    path = os.path.abspath(path)
    ours = [os.path.dirname(os.path.abspath(str(each.__file__))) for each in (torch, lightning, lightning_presets)]
    paths = sysconfig.get_paths()
    installed = [os.path.abspath(paths[key]) for key in ("purelib", "platlib")]
    standard = [os.path.abspath(paths[key]) for key in ("stdlib", "platstdlib")]
    return not _under(path, ours) and (_under(path, installed) or not _under(path, standard))


def _under(path: str, folders: list[str]) -> bool:
    return any(path.startswith(folder + os.sep) for folder in folders)


def user_line(frames: traceback.StackSummary | list[traceback.FrameSummary]) -> str | None:
    """``file.py:42: code`` of the innermost of ``frames`` outside torch, Lightning, this package and the standard
    library (the model's code, or the library that defines the model)."""
    for frame in reversed(frames):
        if frame.filename.startswith("<") or not _is_users(frame.filename):
            continue
        code = (frame.line or "").strip()
        return f"{frame.filename}:{frame.lineno}" + (f": {code}" if code else "")
    return None


def _operation(error: BaseException) -> str | None:
    """The aten operation a fake tensor could not run, ``None`` when ``error`` is something else."""
    from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

    if isinstance(error, (DataDependentOutputException, DynamicOutputShapeException)):
        return str(getattr(error, "func", "") or error).removesuffix(".default")
    if isinstance(error, RuntimeError) and ".numpy() is not supported" in str(error):
        return "numpy"
    return None


def untraceable_reason(error: BaseException) -> str | None:
    """``calls nonzero ... at model.py:42: code`` when ``error`` is a value a fake tensor does not have, else None."""
    operation = _operation(error)
    if operation is None:
        return None
    what = _WHAT.get(operation, "converts a tensor to NumPy" if operation == "numpy" else f"calls {operation}, whose "
                     "result depends on the values")  # fmt: skip
    line = user_line(traceback.extract_tb(error.__traceback__))
    return f"it {what} ({operation})" + (f" at {line}" if line else "")


class _ScalarAnswers(TorchDispatchMode):  # type: ignore[no-untyped-call]  # torch's class is untyped
    """Above the fake mode: a value read from a tensor with no value is answered with zero (``False``)."""

    def __init__(self) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.first: str | None = None
        self.count = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch._subclasses.fake_tensor import DataDependentOutputException

        if func is not torch.ops.aten._local_scalar_dense.default:
            return func(*args, **(kwargs or {}))
        try:
            return func(*args, **(kwargs or {}))
        except DataDependentOutputException:
            self.count += 1
            if self.first is None:
                self.first = user_line(traceback.extract_stack()) or "torch"
            return False if args[0].dtype == torch.bool else 0


@contextlib.contextmanager
def answering_scalars() -> Iterator[_ScalarAnswers]:
    """While a model is built under fake tensors: values read from tensors are zero (the values do not exist,
    and building only fills them). ``.count`` says how often it happened, ``.first`` where."""
    mode = _ScalarAnswers()
    with mode:
        yield mode
