"""``check --model ... --resume-from PATH``: the checkpoint's load into the model, rehearsed (issue 35, item 1).

After the child's own fit (:mod:`.child`), a fresh model from the user's factory is fitted again by Lightning's
``Trainer.fit(model, ckpt_path=PATH)`` with the child's strategy: Lightning restores the model's state dict
(``strict``, as the job's), the callbacks', the optimizers' and schedulers' states and the loops'; the rehearsal stops
right after the restore, before any step (a callback's ``on_train_start``). A checkpoint whose keys or shapes do not
match the model raises there, in Lightning's checkpoint connector, as the job's ``fit(ckpt_path=...)`` would on every
rank: :data:`CHECKPOINT_DOES_NOT_LOAD` (LP745). What the child's one-process strategy cannot load the way the job's
does (a distributed checkpoint folder, a remote URL) is said not rehearsed; any other exception of the load stage
is the rehearsal's limit (LP743), never blamed on the user.

The path reaches the child through :data:`RESUME_VARIABLE` (:func:`announced`), as the set-up's job does.
"""

from __future__ import annotations

import contextlib
import os
import traceback
from collections.abc import Callable, Iterator
from typing import Any

from lightning_presets.core.codes import Code
from lightning_presets.tools.check.rehearsal.findings import StageRecord, user_line
from lightning_presets.tools.check.request import COMMAND as CHECK

RESUME_VARIABLE = "LIGHTNING_PRESETS_REHEARSAL_RESUME"
"""The ``--resume-from`` path the child loads (set by :func:`announced` around the rehearsal)."""
STAGE = "the checkpoint's load into the model (fit(ckpt_path=...))"

CHECKPOINT_DOES_NOT_LOAD = Code(
    code="LP745", severity="error", stage="check",
    title="the checkpoint does not load into the model (--resume-from: its keys or shapes are not the model's)",
    evidence="runtime: Trainer.fit(model, ckpt_path=...) of the ddp_static_graph preset on 2 CPU processes (gloo) "
    "raises Lightning's strict load_state_dict error on both ranks for a checkpoint of a wider model; the "
    "rehearsal's load raises the same exception",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cuda --gpus 8 --devices 8 --model my_models:Narrow "
    "--resume-from wide.ckpt   # saved by a model of another width",
    fixed=f"{CHECK} --strategy ddp_static_graph --accelerator cuda --gpus 8 --devices 8 --model my_models:Wide "
    "--resume-from wide.ckpt",
)  # fmt: skip

CODES: tuple[Code, ...] = (CHECKPOINT_DOES_NOT_LOAD,)

_LOADING = ("checkpoint_connector.py",)
"""Lightning's module that restores a checkpoint (model, callbacks, optimizers, schedulers, loops)."""


@contextlib.contextmanager
def announced(path: str | None) -> Iterator[None]:
    """``path`` in :data:`RESUME_VARIABLE` while the rehearsal runs (its child, forked or fresh, inherits it)."""
    if path is None:
        yield
        return
    previous = os.environ.get(RESUME_VARIABLE)
    os.environ[RESUME_VARIABLE] = path
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(RESUME_VARIABLE, None)
        else:
            os.environ[RESUME_VARIABLE] = previous


def requested() -> str | None:
    """The checkpoint the child is to load, if ``--resume-from`` was given."""
    return os.environ.get(RESUME_VARIABLE) or None


class _Restored(Exception):
    """Raised by :func:`_stop` once Lightning has restored everything: the load completed, no step runs."""


def _stop() -> Any:
    from lightning.pytorch import Callback

    class Stop(Callback):  # type: ignore[misc]  # Lightning's class, untyped here
        def on_train_start(self, trainer: Any, pl_module: Any) -> None:
            raise _Restored

    return Stop()


def loaded_by_lightning(error: BaseException) -> bool:
    """Whether ``error`` was raised while Lightning restored the checkpoint (its checkpoint connector's frames)."""
    return any(frame.filename.endswith(_LOADING) for frame in traceback.extract_tb(error.__traceback__))


def rehearse_load(build: Callable[[], Any], trainer_args: dict[str, Any], ranked: dict[str, Any], scratch: str,
                  train: Any = None, datamodule: Any = None) -> StageRecord:  # fmt: skip
    """Fit a model from ``build()`` with ``ckpt_path`` the requested checkpoint on the child's Trainer (its strategy
    ``ranked``, the job's ``trainer_args``), to the end of Lightning's restore (no step runs). One record: completed,
    raised (LP745 where Lightning's restore raised, else the rehearsal's limit), or not rehearsed."""
    from lightning.pytorch import Trainer

    path = requested() or ""
    if "://" in path and not path.startswith("file://"):
        return StageRecord(name=STAGE, outcome="not rehearsed",
                           detail=f"{path} is remote: the job's ranks read it where they run")  # fmt: skip
    if os.path.isdir(path):
        return StageRecord(name=STAGE, outcome="not rehearsed",
                           detail=f"{path} is a folder (a distributed checkpoint): the job's strategy loads it "
                           "shard by shard, which the rehearsal's one-process strategy does not")  # fmt: skip
    try:
        trainer = Trainer(accelerator="cpu", devices=1, max_epochs=-1, max_steps=-1, limit_train_batches=1,
                          limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, enable_model_summary=False, default_root_dir=scratch,
                          callbacks=[_stop()], **ranked, **trainer_args)  # fmt: skip
        trainer.fit(build(), train_dataloaders=train, datamodule=datamodule, ckpt_path=path)
    except _Restored:
        return StageRecord(name=STAGE)
    except Exception as error:  # torch's, Lightning's or the user's hooks' (on_load_checkpoint)
        text = f"{type(error).__name__}: {_first(error)}"
        if loaded_by_lightning(error):
            return StageRecord(name=STAGE, outcome="raised", exception=text, line=user_line(error),
                               code=CHECKPOINT_DOES_NOT_LOAD.code,
                               detail=f"resume from a checkpoint this model saved (the same modules, names and "
                               f"shapes), or load {os.path.basename(path)}'s weights yourself "
                               "(load_state_dict(strict=False) in on_load_checkpoint, or before fit) and start "
                               "without ckpt_path")  # fmt: skip
        return StageRecord(name=STAGE, outcome="raised", exception=text, line=user_line(error),
                           detail="raised outside Lightning's restore: the rehearsal could not finish it")  # fmt: skip
    return StageRecord(name=STAGE, detail="restored; the fit ended before a step")


def _first(error: BaseException) -> str:
    """The exception's first line, with the next one when the first only announces it (``Error(s) in loading
    state_dict for Narrow:`` then ``size mismatch for ...``)."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    if not lines:
        return ""
    text = f"{lines[0]} {lines[1]}" if lines[0].endswith(":") and len(lines) > 1 else lines[0]
    return text[:300]
