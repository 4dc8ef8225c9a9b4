"""A Fabric job rehearsed on the job's real sizes (issue 35 item 1): ``check --mode fabric --model MODULE:FUNCTION``.

A Fabric job has no LightningModule whose hooks say what to run, so the user names their set-up function: it takes the
``Fabric`` and returns ``(model, optimizer, data)`` or ``(model, optimizer, data, step)``, where ``data`` is one batch
or a ``DataLoader`` and ``step(model, batch)`` returns the loss (without it the loss is the sum of the floating-point
outputs of ``model(batch)``, ``model(*batch)`` for a tuple or list, ``model(**batch)`` for a dict). The function
builds; it does not call ``fabric.setup`` (the rehearsal does, as the job's loop would)::

    def fabric_job(fabric):
        model = Decoder(...)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
        return model, optimizer, DataLoader(dataset, batch_size=8)

What runs, for rank ``r`` of the job's ``W`` ranks, in a child process forked after the imports: ``Fabric`` with the
job's preset strategy (``lightning_presets.strategy(name, target="fabric", **overrides)``) on ``accelerator="cpu"``
with the job's devices, nodes and precision, in :func:`~.setup.mirror_world`; ``fabric.launch()`` (the process group
and device mesh of the real size, nothing launched), the user's function, ``fabric.setup(model, optimizer)`` (DDP's
wrapper with the preset's options, FSDP2's ``fully_shard`` as the preset shards, the precision plugin's conversion),
``fabric.setup_dataloaders``, then one step: forward, ``fabric.backward``, ``optimizer.step()``. FSDP1 and DeepSpeed
refuse a CPU in Lightning (said, with Lightning's words): the user's function is given a stand-in
``Fabric(strategy="ddp")`` of the same world (its process group, devices, precision and data loaders are the job's),
and only the wrapper is replaced: torch's FSDP with the preset's options (:func:`.fsdp1.fsdp1_wrap`, as the Trainer
rehearsal wraps) or DeepSpeed's engine with the preset's config (:func:`.deepspeed.engine_stages`), then one step.
Every stage is a :class:`~.findings.StageRecord`, with the codes of :mod:`.setup` (LP750 set-up, LP751 step; LP743
where the rehearsal is the limit).
"""

from __future__ import annotations

import contextlib
import inspect
import json
import os
import signal
import sys
import time
from collections.abc import Mapping
from typing import Any

from lightning_presets.tools.check.rehearsal.findings import StageRecord
from lightning_presets.tools.check.rehearsal.setup import (
    SetupJob,
    WorldUnavailable,
    _first,
    _raised,
    mesh_of,
    mirror_world,
    unavailable,
)

DEFAULT_TIMEOUT_S = 300.0


def takes_a_fabric(function: Any) -> bool:
    """Whether ``--model``'s callable is a Fabric set-up function (one required positional parameter) rather than a
    model factory (none)."""
    if isinstance(function, type):
        return False
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return False
    required = [each for each in parameters if each.default is inspect.Parameter.empty
                and each.kind in (each.POSITIONAL_ONLY, each.POSITIONAL_OR_KEYWORD)]  # fmt: skip
    return len(required) == 1


def _fabric(job: SetupJob, precision: str | None) -> Any:
    from lightning.fabric import Fabric

    import lightning_presets
    from lightning_presets.registry import catalog

    strategy: Any = job.strategy
    if job.strategy in catalog.strategy_catalog().presets:
        strategy = lightning_presets.strategy(job.strategy, target="fabric", **dict(job.overrides))
    if precision and precision.startswith("16"):
        precision = "bf16" + precision[2:]
    return Fabric(strategy=strategy, accelerator="cpu", devices=job.devices, num_nodes=job.num_nodes,
                  precision=precision or "32-true")  # fmt: skip


def rehearse_fabric_in_process(function: Any, job: SetupJob, precision: str | None = None,
                               rank: int = 0) -> list[StageRecord]:  # fmt: skip
    """The Fabric job's set-up and one step, as rank ``rank`` of ``job``'s world (in a :func:`mirror_world`)."""
    import warnings

    how = _rehearsal(job)
    if how in ("fsdp1", "deepspeed_engine"):
        return _replaced_wrapper(function, job, precision, rank, how)
    records: list[StageRecord] = []
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        try:
            stack.enter_context(mirror_world(job.world_size, rank, job.devices))
        except WorldUnavailable as unmade:
            return unavailable(job, unmade)
        try:
            fabric = _fabric(job, precision)
        except Exception as error:
            return [StageRecord(name=f"Fabric(strategy={job.strategy!r}) on CPU", outcome="not rehearsed",
                                detail=f"constructing it for accelerator='cpu' raises {type(error).__name__}: "
                                f"{_first(error)}")]  # fmt: skip
        stage, name = "set-up", f"fabric.launch(): process group as rank {rank} of {job.world_size}"
        try:
            fabric.launch()
            mesh = mesh_of(fabric.strategy)
            if mesh is not None:
                shape = ", ".join(f"{n}={s}" for n, s in zip(mesh.mesh_dim_names or (), mesh.shape, strict=False))
                name += f", DeviceMesh('cpu', {shape})"
            records.append(StageRecord(name=name))
            name = "the user's set-up function"
            returned = function(fabric)
            model, optimizer, data, step = _unpacked(returned)
            records.append(StageRecord(name=name))
            name = f"fabric.setup(model, optimizer) with {type(fabric.strategy).__name__}"
            model, optimizer = fabric.setup(model, optimizer)
            records.append(StageRecord(name=name))
            name = "fabric.setup_dataloaders and the first batch"
            batch = _first_batch(fabric, data)
            records.append(StageRecord(name=name))
            stage, name = "step", "first step: forward, fabric.backward, optimizer.step"
            loss = step(model, batch) if step is not None else _summed(model, batch)
            fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            records.append(StageRecord(name=name))
        except BaseException as error:  # the user's code may raise anything, SystemExit included
            records.append(_raised(name, stage, error))
    return records


def _rehearsal(job: SetupJob) -> str:
    """How the job's family is rehearsed (its family's ``rehearsal`` field; Lightning's own set-up when the strategy
    is no preset)."""
    import warnings

    from lightning_presets.registry import catalog

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        preset = catalog.strategy_catalog().presets.get(job.strategy)
    return preset.family.rehearsal if preset is not None else "lightning"


def _stand_in(job: SetupJob, precision: str | None) -> Any:
    """The Fabric the set-up function is given where the preset's own refuses a CPU: ``strategy="ddp"`` on the
    job's devices, nodes and precision (the process group, ``setup_dataloaders``' sampler, ``world_size``: the
    job's)."""
    from lightning.fabric import Fabric

    if precision and precision.startswith("16"):
        precision = "bf16" + precision[2:]
    return Fabric(strategy="ddp", accelerator="cpu", devices=job.devices, num_nodes=job.num_nodes,
                  precision=precision or "32-true")  # fmt: skip


def _job_stages(function: Any, job: SetupJob, precision: str | None, rank: int, stages: Any) -> Any:
    """The stand-in Fabric's launch, the user's function and the first batch; returns what the function returned."""
    stages.enter(f"fabric.launch(): process group as rank {rank} of {job.world_size} (a stand-in "
                 "Fabric(strategy='ddp') for the set-up function)")  # fmt: skip
    fabric = _stand_in(job, precision)
    fabric.launch()
    stages.done()
    stages.enter("the user's set-up function")
    model, optimizer, data, step = _unpacked(function(fabric))
    stages.done()
    stages.enter("fabric.setup_dataloaders and the first batch")
    batch = _first_batch(fabric, data)
    stages.done()
    return fabric, model, optimizer, batch, step


def _replaced_wrapper(function: Any, job: SetupJob, precision: str | None, rank: int,
                      how: str) -> list[StageRecord]:  # fmt: skip
    """FSDP1 and DeepSpeed Fabric jobs: Lightning's strategy refuses a CPU (its words quoted); the rest of the job
    runs as it is, with torch's FSDP or DeepSpeed's engine in the strategy's place."""
    from lightning.fabric import Fabric

    from lightning_presets.tools.check.rehearsal import deepspeed as engine
    from lightning_presets.tools.check.rehearsal import fsdp1

    where = {"devices": job.devices, "num_nodes": job.num_nodes, "accelerator": "cpu"}
    if how == "deepspeed_engine":  # Lightning's Fabric constructs it, and refuses the CPU where the strategy sets up
        refusal = fsdp1.lightning_refusal(lambda: Fabric(strategy="deepspeed", **where).strategy.setup_environment(),
                                          "Lightning's Fabric DeepSpeedStrategy on CPU", "DeepSpeed's own engine runs "
                                          "instead on its CPU accelerator, with the preset's config")  # fmt: skip

        def prepare(stages: Any) -> Any:
            _, model, optimizer, batch, step = _job_stages(function, job, precision, rank, stages)
            stages.enter(f"DeepSpeed config of {job.strategy}")
            config = engine.engine_config(job, {"precision": precision or "32-true"}, engine._leading(batch), "fabric")
            stages.done(f"DeepSpeed config of {job.strategy} ({engine.described(config)})")
            return model, optimizer, batch, config, lambda wrapped, each: _loss(wrapped, each, step)

        named = "first step through DeepSpeed's engine: forward, engine.backward (fabric.backward), engine.step"
        return engine.engine_stages(job, rank, [refusal], prepare, named)
    refusal = fsdp1.lightning_refusal(lambda: Fabric(strategy="fsdp", **where),
                                      "Lightning's Fabric FSDPStrategy on CPU")  # fmt: skip
    return _fsdp1(function, job, precision or "32-true", rank, refusal)


def _fsdp1(function: Any, job: SetupJob, precision: str, rank: int, refusal: StageRecord) -> list[StageRecord]:
    """torch's FSDP with the preset's options over the set-up function's model (:func:`.fsdp1.fsdp1_wrap`, the
    Trainer rehearsal's wrapper), its optimizer kept (``use_orig_params=True`` keeps the parameters it holds, as
    Lightning's ``setup_module_and_optimizers`` relies on), one step."""
    import warnings

    from lightning_presets.registry import catalog
    from lightning_presets.tools.check.rehearsal import fsdp1
    from lightning_presets.tools.check.rehearsal.deepspeed import Stages

    options = dict(catalog.strategy_catalog().presets[job.strategy].init_params)
    sharding, offload, checkpointing = fsdp1.fsdp1_options(job, options)
    records = [refusal]
    with warnings.catch_warnings(), contextlib.ExitStack() as stack:
        warnings.simplefilter("ignore")
        try:
            stack.enter_context(mirror_world(job.world_size, rank, job.devices))
        except WorldUnavailable as unmade:
            return [*records, *unavailable(job, unmade)]
        stages = Stages(records)
        try:
            fabric, model, optimizer, batch, step = _job_stages(function, job, precision, rank, stages)
            stages.enter(f"torch's FullyShardedDataParallel(sharding_strategy={sharding}, device_id=cpu)")
            model = fabric.strategy.precision.convert_module(model)  # '-true' precisions, as Fabric's FSDP converts
            mesh, _ = fsdp1.fsdp1_mesh(job, sharding, rank)
            wrapped, name = fsdp1.fsdp1_wrap(model, sharding, offload, precision, mesh, checkpointing)
            stages.done(name + " in fabric.setup's place, the function's optimizer kept")
            stages.enter("first step through the FSDP root: forward, backward (fabric.backward), optimizer.step",
                         "step")  # fmt: skip
            with fsdp1.autocast(precision):
                loss = _loss(wrapped, batch, step)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            stages.done()
        except BaseException as error:  # the user's code may raise anything, SystemExit included
            records.append(_raised(stages.name.split(":")[0], stages.kind, error))
    return records


def _loss(model: Any, batch: Any, step: Any) -> Any:
    return step(model, batch) if step is not None else _summed(model, batch)


class FabricSetupError(Exception):
    """The set-up function returned something the rehearsal cannot use (the message says what it must return)."""


def _unpacked(returned: Any) -> tuple[Any, Any, Any, Any]:
    if not isinstance(returned, (tuple, list)) or len(returned) not in (3, 4):
        raise FabricSetupError(f"the Fabric set-up function returned {type(returned).__name__}; return (model, "
                               "optimizer, batch or DataLoader) or (model, optimizer, data, step)")  # fmt: skip
    model, optimizer, data, *rest = returned
    return model, optimizer, data, rest[0] if rest else None


def _first_batch(fabric: Any, data: Any) -> Any:
    from torch.utils.data import DataLoader

    if isinstance(data, DataLoader):
        loader = fabric.setup_dataloaders(data)
        return next(iter(loader))
    return fabric.to_device(data)


def _summed(model: Any, batch: Any) -> Any:
    from lightning_presets.tools.simulation.step import scalar_loss

    if isinstance(batch, dict):
        return scalar_loss(model(**batch))
    if isinstance(batch, (tuple, list)):
        return scalar_loss(model(*batch))
    return scalar_loss(model(batch))


# --------------------------------------------------------------------------------------------- the child process


def rehearse_fabric(spec: str, job: SetupJob, precision: str | None = None, rank: int = 0,
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> list[StageRecord]:  # fmt: skip
    """:func:`rehearse_fabric_in_process` of ``spec`` (``MODULE:FUNCTION``) in a child forked from this process (torch
    and Lightning imported already), its session killed whole at the end or at ``timeout_s``: records, or a single
    ``not rehearsed`` record saying why the child gave none."""
    from lightning_presets.tools.simulation.processes import kill_group, terminated_as_interrupt

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(read)
        _child(spec, job, precision, rank, write)
    os.close(write)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    timed_out = False
    try:
        with terminated_as_interrupt(), os.fdopen(read, "rb") as pipe:
            os.set_blocking(pipe.fileno(), False)
            while True:
                chunk = pipe.read(65536)
                if chunk:
                    chunks.append(chunk)
                elif chunk == b"" and _ended(pid):
                    break
                if time.monotonic() > deadline:
                    timed_out = True
                    break
                time.sleep(0.01)
    finally:
        kill_group(pid)
        os.waitpid(pid, 0)
    text = b"".join(chunks).decode("utf-8", errors="replace").strip().splitlines()
    if timed_out or not text:
        why = f"it took longer than {timeout_s:g} s" if timed_out else "its process ended without a result"
        return [StageRecord(name="the Fabric job's rehearsal", outcome="not rehearsed", detail=why)]
    return [StageRecord(**each) for each in json.loads(text[-1])]


def _ended(pid: int) -> bool:
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _child(spec: str, job: SetupJob, precision: str | None, rank: int, write: int) -> None:
    code = 0
    try:
        os.setsid()
        for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(number, signal.SIG_DFL)
        import torch

        torch.set_num_threads(1)
        devnull = os.open(os.devnull, os.O_RDWR)
        for stream in (0, 1, 2):
            os.dup2(devnull, stream)
        sys.path.insert(0, os.getcwd())
        from lightning_presets.tools.simulation import user_model

        try:
            function = user_model.load_factory(spec)
            records = rehearse_fabric_in_process(function, job, precision, rank)
        except user_model.ModelError as error:
            records = [StageRecord(name="the Fabric set-up function", outcome="not rehearsed", detail=str(error))]
        with os.fdopen(write, "w", encoding="utf-8") as out:
            out.write(json.dumps([each.as_dict() for each in records]) + "\n")
    except BaseException:
        code = 70
    finally:
        os._exit(code)


def job_records(spec: str, job: SetupJob | None, arguments: Mapping[str, Any], timeout_s: float) -> list[StageRecord]:
    """The records ``check --mode fabric --model MODULE:FUNCTION`` reports (rank 0 of the job's world)."""
    if job is None:
        return [StageRecord(name="the Fabric job", outcome="not rehearsed", detail="the job names no strategy")]
    precision = arguments.get("precision")
    return rehearse_fabric(spec, job, str(precision) if precision is not None else None, 0, timeout_s)
