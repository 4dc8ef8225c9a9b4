"""A strategy family as data: what its checkpoints are, how ``plan`` lays its memory out, how the rehearsal sets it
up, what its Lightning strategy does that rules of other layers depend on.

A :class:`Family` is declared once, beside its strategies (``strategies/ddp/family.py`` declares ``DDP``, a third
party's package its own), and every preset of the family names it: ``Preset(family=DDP, ...)``. Resume, ``plan``, the
rehearsal and the precision rules read its fields; none of them compares a family's name.

A family *is* its name as well (a ``str`` subclass, as an ``enum.StrEnum`` member is): ``--json`` writes it, a
precision preset's ``incompatible`` table is keyed by it, and a rule of a third party that compares
``ctx.family == "ddp"`` keeps working. A preset declared with the name alone (``family="ddp"``) gets the family
declared under that name, or a family with no data (nothing checked, nothing planned) when none is.
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Format = Literal["file", "distributed", "deepspeed"]
"""A checkpoint layout: one file (``torch.save``), a ``torch.distributed.checkpoint`` folder, a DeepSpeed ZeRO
folder (the same names as ``checkpoints.Format``)."""
Placement = Literal["replica", "grad_op", "hybrid", "full", "tensor", "offload_optimizer", "offload_all"]
"""Where a preset keeps its model states (``plan``'s layouts)."""
Compute = Literal["autocast", "half_weights", "half_module", "dtype"]
"""How ``*-mixed`` computes: Lightning's autocast over fp32 weights, FSDP1's ``param_dtype`` plus autocast, or
DeepSpeed's half-precision module (``dtype``: a ``*-true`` precision)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoints:
    """What the family's Lightning strategy writes and loads (``save_checkpoint``/``load_checkpoint``, Lightning 2.5
    and 2.6). A family that loads nothing listed here (XLA's own format, a third party's own) is not checked."""

    loads: frozenset[Format] = frozenset()
    """The formats its strategy loads."""
    writes: frozenset[Format] = frozenset()
    """The formats its strategy writes (by its ``state_dict_type`` or its engine)."""
    trainer_model_key: str | None = None
    """Where the Trainer's sharded checkpoints of the family keep the weights (``FSDPStrategy``: ``model``,
    ``ModelParallelStrategy``: ``state_dict``); its strategy reads only its own key."""
    through_checkpoint_io: bool = False
    """Its strategy loads through the Trainer's ``CheckpointIO`` plugin: a user's own plugin may read other formats,
    so its loads are checked only with Lightning's ``TorchCheckpointIO``."""
    own_format_only: bool = False
    """Its engine resumes only its own format: a single file gives it weights at most, never optimizer state (a
    single file's weights under ZeRO-3 with ``load_full_weights=True``: :attr:`full_weights_from_file`)."""
    full_weights_from_file: bool = False
    """Under ZeRO-3 with ``load_full_weights=True`` it also loads a single file's weights (DeepSpeed)."""

    @property
    def checked(self) -> bool:
        """Whether the resume rules check what the family loads."""
        return bool(self.loads)


@dataclass(frozen=True, slots=True, kw_only=True)
class Layout:
    """How one preset of the family places its model states: what ``place`` reads from the preset's declaration."""

    placement: Placement
    zero_stage: int = 0
    offload_parameters: bool = False
    tensor_parallel: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class Memory:
    """The family's memory layout for ``plan``: how its presets keep model states, and how the planner counts them."""

    title: str
    """How the plan names it, e.g. ``DDP``; ``{zero_stage}`` is filled from the preset's layout
    (``ZeRO-{zero_stage}``)."""
    rank: int
    """Preference between families at equal placement (lower first)."""
    traceable: bool
    """Whether the strategy's own wrapping runs under fake tensors on a CPU build (FSDP2, tensor parallel, DDP
    replicas); otherwise the planner counts by arithmetic plus a traced model (FSDP1 and DeepSpeed need CUDA)."""
    compute: Compute
    place: Callable[[Any], Layout | None]
    """The layout of one preset of the family (its ``init_params``, ``cpu_offload``, ``mesh``); ``None``: not
    planned."""
    zero_optimizer: bool = False
    """Half-precision weights with an fp32 master copy in the optimizer, counted by DeepSpeed's own estimators and
    collectives (ZeRO)."""
    on_mesh: bool = False
    """It lays its processes on the preset's device mesh (``ModelParallelStrategy``), and shards the blocks and the
    root with FSDP2 over the mesh's data-parallel dimension when ``configure_model`` does not."""

    def titled(self, layout: Layout) -> str:
        return self.title.format(zero_stage=layout.zero_stage)


Rehearsal = Literal["lightning", "fsdp1", "deepspeed_engine"]
"""How the rehearsal (``check --model``) sets the family up: through Lightning's own set-up; FSDP1's wrapping run
outside the strategy (``FSDPStrategy`` needs CUDA); or DeepSpeed's engine, which also reads the optimizers and
schedulers (one of each)."""

_DECLARED: dict[str, Family] = {}
"""The first family declared under each name (ours load first): what a name alone stands for."""
_FIELDS = ("checkpoints", "memory", "rehearsal", "fp16_loss_scaler", "reducer", "stand_in", "module")


class Family(str):
    """A strategy family: its name, and what its strategies write, load and keep in memory (see the module)."""

    checkpoints: Checkpoints
    memory: Memory | None
    rehearsal: Rehearsal
    fp16_loss_scaler: bool
    reducer: bool
    stand_in: bool
    module: str | None

    def __new__(
        cls,
        name: str,
        *,
        checkpoints: Checkpoints = Checkpoints(),
        memory: Memory | None = None,
        rehearsal: Rehearsal = "lightning",
        fp16_loss_scaler: bool = True,
        reducer: bool = False,
        stand_in: bool = False,
        module: str | None = None,
    ) -> Family:
        """Declare a family. ``checkpoints``: what it writes and loads (empty: resume not checked); ``memory``: its
        layout for ``plan`` (``None``: not planned); ``rehearsal``: how ``check --model`` sets it up;
        ``fp16_loss_scaler``: its strategy scales an fp16 loss under ``16-mixed``; ``reducer``: its gradients are
        all-reduced by DDP's ``Reducer``, which waits for a gradient of every trained parameter unless told
        otherwise. The first family declared under a name is the one a name alone (``family="ddp"``) finds.
        ``module``: the module that declares it (the caller's, by default), which unpickling imports."""
        self = super().__new__(cls, name)
        if module is None:
            module = sys._getframe(1).f_globals.get("__name__")
        fields = (checkpoints, memory, rehearsal, fp16_loss_scaler, reducer, stand_in, module)
        for key, value in zip(_FIELDS, fields, strict=True):
            object.__setattr__(self, key, value)
        if not stand_in:
            _DECLARED.setdefault(name, self)
        return self

    def __setattr__(self, key: str, value: Any) -> None:
        raise AttributeError(f"a Family is frozen: {key!r} cannot be set")

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled by name and declaring module (its ``place`` may be a lambda): another process gets the family
        declared there, as pickle finds a class."""
        return (_rebuilt, (str(self), self.module))

    def __repr__(self) -> str:
        return f"Family({str(self)!r})"

    @property
    def name(self) -> str:
        return str(self)

    @staticmethod
    def of(value: Family | str | None) -> Family | None:
        """The family a preset or context names: a declared :class:`Family` as it is; a name (or a family made from a
        name before its declaration was imported) as the family declared under it, else a family with no data.
        Anything else is returned as it is (the catalog reports a malformed preset)."""
        if not isinstance(value, str) or (isinstance(value, Family) and not value.stand_in):
            return value
        declared = _DECLARED.get(str(value))
        if declared is not None:
            return declared
        return value if isinstance(value, Family) else Family(str(value), stand_in=True)


def _rebuilt(name: str, module: str | None) -> Family:
    """A family unpickled: the one declared under its name once its declaring module is imported (a family with no
    data when that module cannot be imported there)."""
    if name not in _DECLARED and module:
        with contextlib.suppress(ImportError):
            importlib.import_module(module)
    return _DECLARED.get(name) or Family(name, stand_in=True)
