"""The strategy's set-up rehearsed on the job's real sizes (issue 35 item 1): the plug-in the rehearsal's child calls
(:func:`strategy_stages`, the contract in :mod:`.child`).

What runs, for rank ``r`` of the job's ``W`` ranks, in one CPU process: the job's preset strategy itself (built by
``lightning_presets.strategy(name, **overrides)``) in Lightning's own ``Trainer.fit``, on ``accelerator="cpu"``
with the job's ``devices`` and ``num_nodes``, so that Lightning's strategy runs its real set-up on a world of the
real size: its process group and device mesh (``ModelParallelStrategy`` builds a ``DeviceMesh`` of the preset's
sizes on ``"cpu"``), the model's own ``configure_model`` with that mesh, the wrapping (``DistributedDataParallel``
with the preset's options, ``fully_shard`` as the preset shards, ``parallelize_module`` through the user's
``configure_model``), the precision plugin's conversion, ``configure_optimizers`` over the parameters as the
strategy hands them over (DTensor shards under FSDP2 and tensor parallelism), then one training step through the
wrapped model: forward, backward through DDP's reducer or FSDP2's hooks, the optimizer step.

The world: a process group of the real size whose collectives complete at once (:class:`MirrorGroup`: every other
rank holds what this one holds; an all-gather returns this rank's shard repeated, a reduction leaves it unchanged)
and whose futures carry their tensors, which DDP's reducer and its communication hooks need (torch's ``fake``
process group completes them with no value, so DDP's backward fails on it). Values are therefore not the job's;
shapes, dtypes, the wrapping and every exception are. Object collectives (``broadcast_object_list``,
``all_gather_object``) keep this rank's own objects.

A run on a copy of the model (the child's own ``fit`` gets the model untouched). Every stage becomes a
:class:`~.findings.StageRecord`: ``completed``; ``raised`` with the exception, the user's line and :data:`SETUP_FAILS`
(LP750) or :data:`STEP_FAILS` (LP751) when torch, Lightning or the user's code raised; ``raised`` without a code
(reported as LP743, a warning) where the rehearsal itself is the limit (CUDA, an operator the fake world cannot run);
``not rehearsed`` with the reason where a CPU cannot run it (FSDP1's and DeepSpeed's Lightning strategies refuse the
CPU: FSDP1 is rehearsed with torch's own ``FullyShardedDataParallel`` on ``device_id='cpu'`` with the preset's
options, DeepSpeed by :mod:`.deepspeed`).
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from lightning_presets.core.codes import Code
from lightning_presets.tools.check.rehearsal.findings import StageRecord
from lightning_presets.tools.check.request import COMMAND as CHECK

JOB_VARIABLE = "LIGHTNING_PRESETS_REHEARSAL_JOB"
"""Where ``check`` puts the job's strategy for the rehearsal's child (a forked child or a fresh interpreter reads
it): JSON of :class:`SetupJob`."""

SETUP_FAILS = Code(
    code="LP750", severity="error", stage="check",
    title="the strategy's set-up raises on the user's model (configure_model on the job's device mesh, the wrapper, "
    "the optimizers over the wrapped parameters)",
    evidence="runtime: Trainer.fit of the fsdp2 preset on 2 CPU processes (gloo) raises in configure_model on the "
    "preset's device mesh, on every rank, before the first step; the rehearsal raises the same exception at the "
    "same line",
    fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:WrongMeshName   "
    '# configure_model reads self.device_mesh["tp"]; the preset\'s mesh names tensor_parallel',
    fixed=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:Sharded",
)  # fmt: skip
STEP_FAILS = Code(
    code="LP751", severity="error", stage="check",
    title="the first training step raises through the strategy's wrapping (DDP, FSDP2, tensor parallel) though "
    "it runs on the unwrapped model",
    evidence="runtime: Trainer.fit of the fsdp2 preset on 2 CPU processes (gloo) raises in the first training step "
    "on every rank (the forward reads a sharded parameter outside its FSDP unit); the rehearsal raises the same "
    "exception",
    fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:ReadsSharedWeight   "
    "# forward uses self.blocks[0].lin.weight outside the block",
    fixed=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:Sharded",
)  # fmt: skip
CODES: tuple[Code, ...] = (SETUP_FAILS, STEP_FAILS)

_LIMITS = ("cuda", "nccl", "nvidia", "triton", "flash_attn", "transformer_engine", "bitsandbytes", "pin_memory",
           "accelerator device", "mirrorgroup", "not implemented for the fake", "fake process group")  # fmt: skip


_DATA_LIMIT = "loading the model's data"
_DATA_HOOKS = ("prepare_data", "train_dataloader", "val_dataloader", "setup_dataloaders")


@dataclass(frozen=True, slots=True)
class SetupJob:
    """The job's strategy, as ``check`` built it: the preset (or Lightning strategy) name, the ``--set`` overrides,
    the devices per node and the nodes."""

    strategy: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    devices: int = 1
    num_nodes: int = 1

    @property
    def world_size(self) -> int:
        return self.devices * self.num_nodes

    def as_json(self) -> str:
        return json.dumps({"strategy": self.strategy, "overrides": _jsonable(dict(self.overrides)),
                           "devices": self.devices, "num_nodes": self.num_nodes})  # fmt: skip

    @classmethod
    def from_json(cls, text: str) -> SetupJob:
        data = json.loads(text)
        return cls(strategy=str(data["strategy"]), overrides=dict(data.get("overrides", {})),
                   devices=int(data.get("devices", 1)), num_nodes=int(data.get("num_nodes", 1)))  # fmt: skip


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(each) for key, each in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(each) for each in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


def job_of(strategy: Any, arguments: Mapping[str, Any], overrides: Mapping[str, Any]) -> SetupJob | None:
    """The :class:`SetupJob` of the strategy ``check`` constructed (``None`` when it has no name to rebuild it by)."""
    name = arguments.get("strategy")
    preset = getattr(getattr(strategy, "_lp_preset", None), "name", None)
    name = preset or (name if isinstance(name, str) else None)
    if not name:
        return None
    devices = getattr(strategy, "num_processes", None)
    nodes = getattr(strategy, "num_nodes", None)
    return SetupJob(strategy=name, overrides=dict(overrides), devices=devices if isinstance(devices, int) else 1,
                    num_nodes=nodes if isinstance(nodes, int) else 1)  # fmt: skip


@contextlib.contextmanager
def announced(job: SetupJob | None) -> Iterator[None]:
    """``job`` in :data:`JOB_VARIABLE` while the rehearsal runs (its child, forked or fresh, inherits it)."""
    if job is None:
        yield
        return
    previous = os.environ.get(JOB_VARIABLE)
    os.environ[JOB_VARIABLE] = job.as_json()
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(JOB_VARIABLE, None)
        else:
            os.environ[JOB_VARIABLE] = previous


# --------------------------------------------------------------------------------------------- the world


def _mirror_group_class() -> type:
    import torch
    import torch.distributed as dist
    from torch.futures import Future

    work: Any = vars(dist)[
        "_Work"
    ]  # torch's pybind classes, subclassed as torch's own tests do (their stubs say otherwise)
    group: Any = dist.ProcessGroup

    class Done(work):  # type: ignore[misc]
        def __init__(self, result: Any) -> None:
            super().__init__()
            self._future: Future[Any] = Future()
            self._future.set_result(result)

        def wait(self, timeout: Any = None) -> bool:
            return True

        def get_future(self) -> Future[Any]:
            return self._future

        def is_completed(self) -> bool:
            return True

        def is_success(self) -> bool:
            return True

        def result(self) -> Any:
            return self._future.value()

    class MirrorGroup(group):  # type: ignore[misc]
        """Every collective completes at once as if every rank held this rank's tensors."""

        def getBackendName(self) -> str:
            return "lp_mirror"

        def broadcast(self, tensors: Any, opts: Any) -> Any:
            return Done(tensors)

        def allreduce(self, tensors: Any, opts: Any) -> Any:
            return Done(tensors)

        def allreduce_coalesced(self, tensors: Any, opts: Any) -> Any:
            return Done(tensors)

        def reduce(self, tensors: Any, opts: Any) -> Any:
            return Done(tensors)

        def allgather(self, outputs: Any, inputs: Any, opts: Any) -> Any:
            for each, tensor in zip(outputs, inputs, strict=False):
                for out in each:
                    out.copy_(tensor)
            return Done(outputs)

        def _allgather_base(self, output: Any, tensor: Any, opts: Any) -> Any:
            output.view(self.size(), -1).copy_(tensor.reshape(1, -1))
            return Done([output])

        def allgather_into_tensor_coalesced(self, outputs: Any, inputs: Any, opts: Any) -> Any:
            for output, tensor in zip(outputs, inputs, strict=False):
                self._allgather_base(output, tensor, opts)
            return Done(outputs)

        def reduce_scatter(self, outputs: Any, inputs: Any, opts: Any) -> Any:
            for output, each in zip(outputs, inputs, strict=False):
                output.copy_(each[self.rank()])
            return Done(outputs)

        def _reduce_scatter_base(self, output: Any, tensor: Any, opts: Any) -> Any:
            output.view(-1).copy_(tensor.view(self.size(), -1)[self.rank()])
            return Done([output])

        def reduce_scatter_tensor_coalesced(self, outputs: Any, inputs: Any, opts: Any) -> Any:
            for output, tensor in zip(outputs, inputs, strict=False):
                self._reduce_scatter_base(output, tensor, opts)
            return Done(outputs)

        def alltoall_base(self, output: Any, tensor: Any, out_split: Any, in_split: Any, opts: Any) -> Any:
            output.copy_(tensor)
            return Done([output])

        def barrier(self, opts: Any) -> Any:
            return Done([])

    def create(common: Any, options: Any) -> Any:
        from torch.testing._internal.distributed import fake_pg

        group = MirrorGroup(common.group_rank, common.group_size)
        # torch's fake backend underneath, made by torch's own creator of the "fake" backend: the group's name (device
        # meshes look groups up by it) and the functional collectives (DTensor's), which complete with shapes only
        creator: Any = fake_pg._create_fake_pg
        fake = creator(common, options)
        group._register_backend(torch.device("cpu"), dist.ProcessGroup.BackendType.CUSTOM, fake)
        group._set_group_name(common.group_id)
        return group

    if not _REGISTERED:
        dist.Backend.register_backend("lp_mirror", create, extended_api=True, devices=["cpu"])
        _REGISTERED.append(True)
    return MirrorGroup


_REGISTERED: list[bool] = []
"""Whether the ``lp_mirror`` backend is registered in this process."""
_LAUNCH = ("LOCAL_RANK", "RANK", "WORLD_SIZE", "NODE_RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_WORLD_SIZE")


class WorldUnavailable(Exception):
    """This torch cannot make the rehearsal's process group (its Python process-group API differs): the set-up is
    then not rehearsed, and said so."""


@contextlib.contextmanager
def mirror_world(world_size: int, rank: int, devices: int) -> Iterator[None]:
    """A :class:`MirrorGroup` world of ``world_size`` ranks, this process ``rank``, as torchrun would have launched
    it (Lightning's launch variables set, so it launches nothing). A process group that exists already (the child's
    fake one) is put back on exit with its size and rank. Raises :class:`WorldUnavailable` before anything changed
    when this torch cannot make it."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    had = dist.is_initialized()
    before = (dist.get_backend(), dist.get_world_size(), dist.get_rank()) if had else None
    saved = {key: os.environ.get(key) for key in _LAUNCH}

    def restore() -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
        _forget_meshes()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if before is not None:
            dist.init_process_group(before[0], store=FakeStore(), world_size=before[1], rank=before[2])

    try:
        _mirror_group_class()
        if had:
            dist.destroy_process_group()
        os.environ.update(LOCAL_RANK=str(rank % devices), RANK=str(rank), WORLD_SIZE=str(world_size),
                          NODE_RANK=str(rank // devices), LOCAL_WORLD_SIZE=str(devices), MASTER_ADDR="127.0.0.1",
                          MASTER_PORT="1")  # fmt: skip
        dist.init_process_group("lp_mirror", store=FakeStore(), rank=rank, world_size=world_size)
    except Exception as error:
        restore()
        raise WorldUnavailable(f"torch {torch.__version__} cannot make the rehearsal's process group of {world_size} "
                               f"ranks ({type(error).__name__}: {_first(error)})") from error  # fmt: skip
    try:
        with _own_objects(world_size):
            yield
    finally:
        restore()


def unavailable(job: SetupJob, error: WorldUnavailable) -> list[StageRecord]:
    """The record said when the world cannot be made."""
    return [StageRecord(name=f"{job.strategy}'s set-up on {job.world_size} ranks", outcome="not rehearsed",
                        detail=str(error))]  # fmt: skip


def world_available() -> bool:
    """Whether this torch makes the rehearsal's world (tests skip where it cannot; the rehearsal says so)."""
    try:
        with mirror_world(2, 0, 2):
            return True
    except WorldUnavailable:
        return False


def _forget_meshes() -> None:
    """DTensor's sharding caches, which keep the device meshes (and their groups' names) of a world destroyed since:
    another world in this process would find them there (tests rehearse several ranks in one process)."""
    import importlib

    for module, name in (("torch.distributed.tensor.debug", "_clear_sharding_prop_cache"),
                         ("torch.distributed.tensor._redistribute", "_gen_transform_infos")):  # fmt: skip
        with contextlib.suppress(Exception):
            function = getattr(importlib.import_module(module), name)
            getattr(function, "cache_clear", function)()


@contextlib.contextmanager
def _own_objects(world_size: int) -> Iterator[None]:
    """Object collectives keep this rank's objects (a broadcast from another rank would carry nothing here)."""
    import torch.distributed as dist

    def broadcast_object_list(objects: list[Any], *args: Any, **kwargs: Any) -> None:
        return None

    def all_gather_object(output: list[Any], obj: Any, *args: Any, **kwargs: Any) -> None:
        output[:] = [obj] * world_size

    replaced = {"broadcast_object_list": broadcast_object_list, "all_gather_object": all_gather_object}
    saved = {name: getattr(dist, name) for name in replaced}
    for name, function in replaced.items():
        setattr(dist, name, function)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(dist, name, function)


# --------------------------------------------------------------------------------------------- the stages


class _Tracker:
    """Which stage of the strategy's set-up is running: the strategy's own methods, wrapped on the instance."""

    def __init__(self, names: Mapping[str, str]) -> None:
        self.names = dict(names)
        self.current = "environment"
        self.done: list[str] = []
        self.wrapped: Any = None
        """The strategy's model as the optimizers see it (DDP's wrapper), and its mesh."""
        self.mesh: Any = None

    def enter(self, stage: str) -> None:
        if self.current not in self.done:
            self.done.append(self.current)
        self.current = stage

    def wrap(self, strategy: Any) -> None:
        setup_environment, setup, setup_optimizers = (strategy.setup_environment, strategy.setup,
                                                      strategy.setup_optimizers)  # fmt: skip

        def environment() -> None:
            setup_environment()
            self.enter("configure_model")

        def whole(trainer: Any) -> None:
            self.enter("wrap")
            setup(trainer)

        def optimizers(trainer: Any) -> None:
            self.enter("optimizers")
            self.wrapped, self.mesh = strategy.model, mesh_of(strategy)
            setup_optimizers(trainer)
            self.enter("after optimizers")

        strategy.setup_environment, strategy.setup, strategy.setup_optimizers = environment, whole, optimizers


def _stage_callback(tracker: _Tracker) -> Any:
    from lightning.pytorch import Callback

    class SetUpStages(Callback):  # type: ignore[misc]  # Lightning's class, untyped here
        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            tracker.enter("step")

        def on_train_batch_end(self, trainer: Any, *args: Any) -> None:
            tracker.enter("end")

    return SetUpStages()


def strategy_stages(model: Any, trainer_kwargs: dict[str, Any], family: str | None, world_size: int,
                    rank: int, datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    """The child's plug-in (see :func:`.child.strategy_stages`): the job's strategy from :data:`JOB_VARIABLE`,
    rehearsed by :func:`rehearse_setup` on a copy of ``model`` (its batches from ``datamodule`` when given)."""
    text = os.environ.get(JOB_VARIABLE)
    if not text:
        return [
            StageRecord(
                name=f"the {family or 'strategy'}'s set-up on the job's {world_size} ranks",
                outcome="not rehearsed",
                detail="the job's strategy was not given to the rehearsal",
            )
        ]
    job = SetupJob.from_json(text)
    try:
        copied = copy.deepcopy(model)
    except Exception as error:  # a module holding what deepcopy cannot copy (a lock, a file)
        return [StageRecord(name=f"{job.strategy}'s set-up", outcome="not rehearsed",
                            detail=f"the model cannot be copied ({type(error).__name__}: {_first(error)}), and the "
                            "set-up changes the module it wraps")]  # fmt: skip
    return rehearse_setup(copied, job, trainer_kwargs, rank=rank, datamodule=datamodule)


def rehearse_setup(model: Any, job: SetupJob, trainer_kwargs: Mapping[str, Any] | None = None,
                   rank: int = 0, datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    """The strategy's set-up and one training step of ``model`` (changed in place: pass a copy) as rank ``rank`` of
    ``job``'s world, in a :func:`mirror_world` (any process group of this process is put back after)."""
    import warnings

    from lightning_presets.registry import catalog

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        preset = catalog.strategy_catalog().presets.get(job.strategy)
    family = preset.family if preset is not None else None
    if family == "fsdp" and preset is not None:
        return _fsdp1(model, job, dict(preset.init_params), dict(trainer_kwargs or {}), rank, datamodule)
    if family == "deepspeed":  # its module builds on this one's world: loaded by name, as the child loads plug-ins
        import importlib

        deepspeed = importlib.import_module(f"{__package__}.deepspeed")
        records: list[StageRecord] = deepspeed.rehearse_deepspeed(model, job, trainer_kwargs or {}, rank, datamodule)
        return records
    return _through_lightning(model, job, dict(trainer_kwargs or {}), rank, datamodule)


def _strategy(job: SetupJob) -> Any:
    import lightning_presets
    from lightning_presets.registry import catalog

    if job.strategy in catalog.strategy_catalog().presets:
        return lightning_presets.strategy(job.strategy, **dict(job.overrides))
    return job.strategy


def _through_lightning(model: Any, job: SetupJob, trainer_kwargs: dict[str, Any], rank: int,
                       datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    import logging
    import warnings

    from lightning.pytorch import Trainer

    from lightning_presets.tools.simulation import step

    precision = str(trainer_kwargs.get("precision", ""))
    if precision.startswith("16"):
        trainer_kwargs["precision"] = "bf16" + precision[2:]
    records: list[StageRecord] = []
    compiled = step.compiled_modules(model)
    tracker = _Tracker({})
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    error: BaseException | None = None
    trainer: Any = None
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        try:
            stack.enter_context(mirror_world(job.world_size, rank, job.devices))
        except WorldUnavailable as unmade:
            return unavailable(job, unmade)
        stack.enter_context(step.eager())
        try:
            trainer = Trainer(strategy=_strategy(job), accelerator="cpu", devices=job.devices,
                              num_nodes=job.num_nodes, max_steps=1, limit_train_batches=1, limit_val_batches=0,
                              num_sanity_val_steps=0, logger=False, enable_checkpointing=False,
                              enable_progress_bar=False, enable_model_summary=False, use_distributed_sampler=True,
                              callbacks=[_stage_callback(tracker)], **trainer_kwargs)  # fmt: skip
        except Exception as raised:
            return [StageRecord(name=f"{job.strategy}'s Lightning strategy on CPU", outcome="not rehearsed",
                                detail=f"constructing it for accelerator='cpu' raises {type(raised).__name__}: "
                                f"{_first(raised)}")]  # fmt: skip
        tracker.wrap(trainer.strategy)
        train, source = (None, f"{type(datamodule).__name__}.train_dataloader()") if datamodule is not None else (
            _train_loader(model))  # fmt: skip
        try:
            trainer.fit(model, train_dataloaders=train, datamodule=datamodule)
        except BaseException as raised:  # the user's code may raise anything, SystemExit included
            error = raised
    names = _stage_names(trainer.strategy, tracker, job, rank, source)
    order = ["environment", "configure_model", "wrap", "optimizers", "step"]
    done = set(tracker.done) | ({"wrap"} if "after optimizers" in tracker.done else set())
    if tracker.current == "after optimizers":
        tracker.current = "wrap"
    for stage in order:
        if stage in done or (error is None and tracker.current == "end"):
            records.append(StageRecord(name=names[stage]))
        elif error is not None and stage == tracker.current:
            records.append(_raised(names[stage], stage, error))
            break
        elif error is None:
            records.append(StageRecord(name=names[stage], outcome="not rehearsed",
                                       detail="Lightning's fit did not reach it"))  # fmt: skip
            break
    if compiled:
        records.append(StageRecord(name="torch.compile", outcome="not rehearsed",
                                   detail=f"{compiled} compiled module(s) ran eagerly: compiling needs the job's "
                                   "device (Inductor's kernels for CUDA)"))  # fmt: skip
    return records


def _train_loader(model: Any) -> tuple[Any, str]:
    from lightning.pytorch import LightningModule
    from torch.utils.data import DataLoader

    if getattr(type(model), "train_dataloader", None) is not LightningModule.train_dataloader:
        return None, f"{type(model).__name__}.train_dataloader()"
    return DataLoader(cast(Any, [model.example_input_array]), batch_size=None), "example_input_array"


def mesh_of(strategy: Any) -> Any:
    """The strategy's device mesh (``ModelParallelStrategy``'s public property), or ``None``."""
    try:
        return strategy.device_mesh
    except Exception:  # no such property (DDP), or not set up yet
        return None


def _stage_names(strategy: Any, tracker: _Tracker, job: SetupJob, rank: int, source: str) -> dict[str, str]:
    from torch.nn.parallel import DistributedDataParallel

    kind = type(strategy).__name__
    mesh = tracker.mesh or mesh_of(strategy)
    if mesh is not None:
        shape = ", ".join(f"{name}={size}" for name, size in zip(mesh.mesh_dim_names or (), mesh.shape, strict=False))
        environment = f"process group and DeviceMesh('cpu', {shape}) as rank {rank} of {job.world_size}"
    else:
        environment = f"process group as rank {rank} of {job.world_size}"
    if isinstance(tracker.wrapped, DistributedDataParallel):  # the options as DDP holds them
        ddp = tracker.wrapped
        shown = ", ".join(f"{key}={getattr(ddp, key, '?')}" for key in (
            "static_graph", "find_unused_parameters", "gradient_as_bucket_view", "broadcast_buffers"))  # fmt: skip
        hook = _comm_hook(job)
        wrap = f"DistributedDataParallel({shown})" + (f" with comm hook {_short(hook)}" if hook else "")
    elif kind == "ModelParallelStrategy":
        wrap = "the preset's fully_shard / the model's parallelize plan on the mesh, precision conversion"
    else:
        wrap = f"{kind}'s wrapping"
    return {
        "environment": environment,
        "configure_model": "configure_model() with the strategy's device mesh",
        "wrap": wrap,
        "optimizers": "configure_optimizers() over the parameters as the strategy hands them over",
        "step": f"first training step through the wrapped model ({source}): forward, backward, optimizer step",
    }


def _comm_hook(job: SetupJob) -> Any:
    """The preset's DDP communication hook (its declaration, or ``--set ddp_comm_hook=``)."""
    from lightning_presets.registry import catalog

    preset = catalog.strategy_catalog().presets.get(job.strategy)
    values = {**(dict(preset.init_params) if preset is not None else {}), **dict(job.overrides)}
    return values.get("ddp_comm_hook")


def _short(value: Any) -> str:
    return getattr(value, "__name__", None) or repr(value)


def _first(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else type(error).__name__


def limitation(error: BaseException) -> str:
    """Why ``error`` is the rehearsal's own limit (CUDA, the fake world), or empty."""
    from lightning_presets.tools.check.rehearsal.findings import FORKED_AUTOGRAD

    text = f"{type(error).__name__}: {error}".lower()
    if "autograd" in text and "fork" in text:
        return FORKED_AUTOGRAD
    frames = traceback.extract_tb(error.__traceback__)
    data = os.sep.join(("torch", "utils", "data", ""))
    if any(frame.name in _DATA_HOOKS for frame in frames) or any(data in frame.filename for frame in frames):
        return f"{_DATA_LIMIT} raised {type(error).__name__}; the job's data may be where the job runs"
    if any(frame.filename == __file__ for frame in frames[-2:]):  # raised in the mirror group itself
        return "the rehearsal's process group"
    hit = next((word for word in _LIMITS if word in text), None)
    return f"needs what a CPU rehearsal lacks ({hit})" if hit else ""


def _raised(name: str, stage: str, error: BaseException) -> StageRecord:
    from lightning_presets.tools.check.rehearsal.child import user_line

    exception = f"{type(error).__name__}: {_first(error)}"
    why = limitation(error)
    if why.startswith(_DATA_LIMIT):  # the child's own fit loads the same data and says so once (LP743)
        return StageRecord(name=name, outcome="not rehearsed", exception=exception, detail=why)
    if why:
        return StageRecord(name=name, outcome="raised", exception=exception, line=user_line(error),
                           detail=f"the rehearsal's limit: {why}")  # fmt: skip
    code = STEP_FAILS if stage == "step" else SETUP_FAILS
    return StageRecord(name=name, outcome="raised", exception=exception, line=user_line(error), code=code.code,
                       detail="a real run raises it on every rank at the same stage; change what the exception "
                       "names, then check again")  # fmt: skip


# --------------------------------------------------------------------------------------------- FSDP1


def _fsdp1(model: Any, job: SetupJob, options: dict[str, Any], trainer_kwargs: dict[str, Any],
           rank: int, datamodule: Any = None) -> list[StageRecord]:  # fmt: skip
    """FSDP1 presets: Lightning's ``FSDPStrategy`` refuses a CPU accelerator (said, with Lightning's own words), so
    torch's ``FullyShardedDataParallel`` wraps the model as Lightning would (the preset's sharding strategy, its
    repeated blocks as the wrap policy, ``use_orig_params=True``, CPU offload), on ``device_id=cpu``; then the
    optimizers over the flat parameters' views and one step through the root, as Lightning redirects it."""
    import warnings

    import torch
    from lightning.pytorch import Trainer
    from lightning.pytorch.strategies import FSDPStrategy

    records = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            Trainer(strategy=FSDPStrategy(), accelerator="cpu", devices=job.devices, logger=False)
            refused = ""
        except Exception as error:
            refused = f"{type(error).__name__}: {_first(error)}"
    records.append(StageRecord(name="Lightning's FSDPStrategy on CPU", outcome="not rehearsed",
                               detail=f"Lightning refuses accelerator='cpu' ({refused}); torch's FSDP wraps the "
                               "model instead, with the preset's options" if refused else
                               "rehearsed with torch's FSDP instead"))  # fmt: skip
    sharding = str(getattr(options.get("sharding_strategy"), "name", options.get("sharding_strategy", "FULL_SHARD")))
    offload = bool(options.get("cpu_offload"))
    precision = str(trainer_kwargs.get("precision", "32-true"))
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        try:
            stack.enter_context(mirror_world(job.world_size, rank, job.devices))
        except WorldUnavailable as unmade:
            return [*records, *unavailable(job, unmade)]
        stage = f"process group as rank {rank} of {job.world_size}"
        try:
            mesh = None
            if sharding.upper().startswith(("HYBRID", "_HYBRID")):
                from torch.distributed.device_mesh import init_device_mesh

                mesh = init_device_mesh("cpu", (job.num_nodes, job.devices), mesh_dim_names=("replicate", "shard"))
                stage = f"DeviceMesh('cpu', replicate={job.num_nodes}, shard={job.devices}) as rank {rank}"
            records.append(StageRecord(name=stage))
            stage = "configure_model()"
            if _overrides(model, "configure_model"):
                model.configure_model()
            records.append(StageRecord(name=stage))
            stage = (
                f"torch's FullyShardedDataParallel(sharding_strategy={sharding}, auto_wrap_policy=the repeated "
                f"blocks, use_orig_params=True, cpu_offload={offload}, device_id=cpu, {precision})"
            )
            wrapped = _fsdp1_wrap(model, sharding, offload, precision, mesh)
            records.append(StageRecord(name=stage))
            stage = "optimizers"
            from lightning_presets.tools.simulation import user_model

            optimizers = user_model.optimizers(model, type(model).__name__, "adamw")
            records.append(StageRecord(name="configure_optimizers() over FSDP's flat parameters (their views)"))
            stage = "step"
            _one_step(model, wrapped, optimizers, precision, datamodule)
            records.append(StageRecord(name="first training step through the FSDP root: forward, backward, "
                                       "optimizer step"))  # fmt: skip
        except BaseException as error:
            name = (
                "first training step through the FSDP root"
                if stage == "step"
                else "configure_optimizers() over FSDP's flat parameters"
                if stage == "optimizers"
                else stage
            )
            records.append(_raised(name, "step" if stage == "step" else "set-up", error))
    del torch
    return records


def _overrides(model: Any, name: str) -> bool:
    from lightning_presets.inspection.hooks import overrides

    return bool(overrides(model, name))


def _fsdp1_wrap(model: Any, sharding: str, offload: bool, precision: str, mesh: Any) -> Any:
    import torch
    from torch.distributed.fsdp import CPUOffload, MixedPrecision, ShardingStrategy
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
    from torch.distributed.fsdp.wrap import ModuleWrapPolicy

    from lightning_presets.inspection.blocks import find_repeated_blocks

    blocks = find_repeated_blocks(model)
    half = {"bf16": torch.bfloat16, "16": torch.bfloat16}.get(precision.split("-")[0])
    mixed = MixedPrecision(param_dtype=half, reduce_dtype=half, buffer_dtype=half) if half is not None else None
    return FSDP(
        model,
        sharding_strategy=ShardingStrategy[sharding.upper()],
        auto_wrap_policy=ModuleWrapPolicy(blocks) if blocks else None,
        cpu_offload=CPUOffload(offload),
        mixed_precision=mixed,
        device_id=torch.device("cpu"),
        use_orig_params=True,
        device_mesh=mesh,
    )


def _one_step(model: Any, wrapped: Any, optimizers: list[Any], precision: str, datamodule: Any = None) -> None:
    """``training_step`` through the FSDP root (Lightning's forward redirection), backward, the optimizer step."""
    import torch
    from lightning.pytorch.loops.optimization.automatic import ClosureResult

    from lightning_presets.registry import private

    batch = _first_batch(model, datamodule)
    half = {"bf16": torch.bfloat16, "16": torch.bfloat16}.get(precision.split("-")[0])
    context = torch.autocast("cpu", dtype=half) if half is not None else contextlib.nullcontext()
    with context:
        output = private.forward_redirection()(wrapped, model, "training_step", batch, 0)
    loss = ClosureResult.from_training_step_output(output).closure_loss
    if loss is None:
        return
    for optimizer in optimizers:
        optimizer.zero_grad()
    loss.backward()
    for optimizer in optimizers:
        optimizer.step()


def _first_batch(model: Any, datamodule: Any = None) -> Any:
    """The first batch of ``datamodule``'s training loader (after its ``setup("fit")``), else of the model's own
    ``train_dataloader()``, else its ``example_input_array``."""
    if datamodule is not None:
        datamodule.setup("fit")
        return next(iter(datamodule.train_dataloader()))
    loader, _ = _train_loader(model)
    if loader is None:
        loader = model.train_dataloader()
    return next(iter(loader))


def timed(function: Callable[[], list[StageRecord]]) -> tuple[list[StageRecord], float]:
    """``function``'s records and its wall time in seconds (the benchmark's and the notes')."""
    started = time.perf_counter()
    records = function()
    return records, time.perf_counter() - started
