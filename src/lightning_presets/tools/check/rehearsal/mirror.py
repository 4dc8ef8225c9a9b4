"""The rehearsal's world (:mod:`.setup`): a process group of the job's real size whose collectives complete at once
(:class:`MirrorGroup`: every other rank holds what this one holds; an all-gather returns this rank's shard repeated, a
reduction leaves it unchanged) and whose futures carry their tensors, which DDP's reducer and its communication hooks
need (torch's ``fake`` process group completes them with no value, so DDP's backward fails on it). Object collectives
(``broadcast_object_list``, ``all_gather_object``) keep this rank's own objects. :func:`world_available` says whether
this torch can make it."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from lightning_presets.tools.check.rehearsal.findings import FORKED_CHILD, StageRecord
from lightning_presets.tools.check.rehearsal.job import SetupJob, _first


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
    another world in this process would find them there (tests rehearse several ranks in one process). Not in a
    forked rehearsal child, which ends with its rehearsal: there the fast-path cache's clearing once waited forever on
    a lock a thread of the parent held at the fork."""
    import importlib

    if os.environ.get(FORKED_CHILD):
        return

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
