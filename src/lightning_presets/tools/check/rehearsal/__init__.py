"""``check --model``'s rehearsal: the user's real set-up, first validation step and first training step, run by
Lightning's own ``Trainer.fit`` in a child process, before the job is queued (issue 35).

What runs: the model built by the user's factory; Lightning's fit-start validation, ``configure_optimizers`` with the
real optimizer over the model's parameters and Lightning's reading of its schedulers (``lr_scheduler`` dicts,
``monitor``, ``interval``); the first batch of the model's own ``val_dataloader()`` through ``validation_step`` (the
sanity check) and of its ``train_dataloader()`` (else ``example_input_array``) through ``training_step``, the loss
Lightning reads from its output, ``self.log``, backward, gradient clipping, the optimizer step and the scheduler
update; with the job's precision and Trainer clipping and accumulation. For a DeepSpeed job, Lightning's
``DeepSpeedStrategy`` reading of the optimizers and schedulers (one of each at most) runs on what the model returns.

Where it runs: one CPU process, real tensors, ``Trainer(accelerator="cpu", devices=1)``, inside torch's fake process
group of the job's world size (the step's own ``torch.distributed`` calls return at once): a model of up to
:data:`MAX_PARAMETERS` parameters (larger ones are not rehearsed, and the check says so). What one CPU process
cannot rehearse is said, never blamed on the user: the strategy's wrapping on the job's device mesh (DDP, FSDP2,
tensor parallelism, DeepSpeed's engine), collectives between ranks, CUDA kernels and a precision this CPU cannot run
(``16-mixed`` is rehearsed as ``bf16-mixed``). A failure the rehearsal causes itself (code that needs CUDA) is a
warning that it could not finish.

The parent (:func:`rehearse`) forks the child (torch and Lightning already imported) into a session of its own,
reads one JSON result line from a pipe and kills the child's whole process group when it ends, when ``timeout_s``
runs out or when the parent is interrupted or terminated (SIGTERM, SIGHUP): a factory that exits the interpreter,
never returns or starts helper processes cannot end or hang the check, nor outlive it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

from lightning_presets.core.codes import Code
from lightning_presets.tools.check.request import COMMAND as CHECK
from lightning_presets.tools.simulation.processes import kill_group, terminated_as_interrupt

_REAL_EXIT = os._exit
MAX_PARAMETERS = 100_000_000
"""The largest model rehearsed (real fp32 tensors on the CPU: about 1.6 GiB with gradients and Adam's state)."""
DEFAULT_TIMEOUT_S = 300.0
_TAIL = 4096
_FIXED = f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:Classifier"

SETUP_FAILS = Code(
    code="LP740", severity="error", stage="check",
    title="the job's set-up raises on the user's model (optimizers, schedulers, fit-start validation)",
    evidence="runtime: Lightning's fit raises while it sets up the model's optimizers and schedulers, on every rank, "
    "before the first step",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:PlateauNoMonitor   "
    "# ReduceLROnPlateau without a monitor",
    fixed=_FIXED,
)  # fmt: skip
TRAINING_STEP_FAILS = Code(
    code="LP741", severity="error", stage="check",
    title="the first training step raises on the user's model (training_step, its output, self.log, backward, "
    "the optimizer or scheduler step)",
    evidence="runtime: Lightning's fit raises in the first training step, on every rank",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:UnpackThree   "
    "# x, y = batch on a batch of three",
    fixed=_FIXED,
)  # fmt: skip
VALIDATION_STEP_FAILS = Code(
    code="LP742", severity="error", stage="check",
    title="the first validation step (fit's sanity check) raises on the user's model",
    evidence="runtime: Lightning's fit raises in the sanity check's validation_step, on every rank, before training",
    fails=f"{CHECK} --strategy ddp_static_graph --accelerator cpu --devices 2 --model my_models:ValidationUnpack",
    fixed=_FIXED,
)  # fmt: skip
NOT_REHEARSED = Code(
    code="LP743", severity="warning", stage="check",
    title="check --model could not rehearse (all of) the job's set-up and first step",
    fails=f"{CHECK} --strategy fsdp2 --accelerator cuda --gpus 8 --devices 8 --model my_models:UsesCuda   "
    "# training_step calls .cuda()",
    fixed=_FIXED,
)  # fmt: skip
CODES: tuple[Code, ...] = (SETUP_FAILS, TRAINING_STEP_FAILS, VALIDATION_STEP_FAILS, NOT_REHEARSED)

STAGES = ("set-up", "first validation step", "first training step")
_BY_STAGE = dict(zip(STAGES, (SETUP_FAILS, VALIDATION_STEP_FAILS, TRAINING_STEP_FAILS), strict=True))


class RehearsalFailed(Exception):
    """The model could not be rehearsed at all: its factory or module failed, exited, aborted or never returned (the
    message says which; the check's usage error)."""


class RehearsalCrashed(RehearsalFailed):
    """The rehearsal's process ended by a signal nobody here sent: the model's code, or a fork of a process whose
    other threads held a lock (rare, and not the user's): the rehearsal is tried once more before this is said."""


@dataclass(frozen=True, slots=True)
class Rehearsal:
    """What the child reported: the stages it completed, the exception that stopped it (if any) and what it could
    not rehearse."""

    completed: tuple[str, ...] = ()
    stage: str | None = None
    """The stage that raised, one of :data:`STAGES`."""
    exception: str = ""
    """``TypeName: first line``."""
    line: str = ""
    """Where in the user's code: ``file:line in function``, or empty when no frame of theirs raised."""
    limitation: str = ""
    """Why the rehearsal could not run or finish (not the user's error)."""
    notes: tuple[str, ...] = field(default=())
    seconds: float = 0.0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Rehearsal:
        return cls(completed=tuple(data.get("completed", ())), stage=data.get("stage"),
                   exception=str(data.get("exception", "")), line=str(data.get("line", "")),
                   limitation=str(data.get("limitation", "")), notes=tuple(data.get("notes", ())),
                   seconds=float(data.get("seconds", 0.0)))  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {"completed": list(self.completed), "stage": self.stage, "exception": self.exception,
                "line": self.line, "limitation": self.limitation, "notes": list(self.notes),
                "seconds": self.seconds}  # fmt: skip


# --------------------------------------------------------------------------------------------- the parent


def trainer_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The job's Trainer arguments the rehearsal repeats (the step's behaviour; not the hardware's or the loop's)."""
    keys = ("precision", "gradient_clip_val", "gradient_clip_algorithm", "accumulate_grad_batches")
    return {key: arguments[key] for key in keys if arguments.get(key) is not None}


def rehearse(
    spec: str, arguments: dict[str, Any], family: str | None, timeout_s: float = DEFAULT_TIMEOUT_S, world_size: int = 1
) -> Rehearsal:
    """Rehearse ``spec`` (``MODULE:FACTORY``) with the job's Trainer ``arguments`` in a child process: forked from this
    one, which has imported torch and Lightning already (a fresh interpreter would import them again: seconds).

    ``family`` is the preset's family (``deepspeed`` adds DeepSpeed's optimizer reading). Raises
    :class:`RehearsalFailed` when the model cannot be built or the child ends without a result; a child that a
    signal ended (:class:`RehearsalCrashed`) is forked once more first.
    """
    try:
        result = _rehearse_once(spec, arguments, family, timeout_s, world_size)
    except RehearsalCrashed:
        result = _rehearse_once(spec, arguments, family, timeout_s, world_size)
    if result.limitation.startswith(FORKED_AUTOGRAD):  # this process ran autograd before: a fresh interpreter
        return _rehearse_fresh(spec, arguments, family, timeout_s, world_size)
    return result


FORKED_AUTOGRAD = "autograd's threads do not survive a fork"
"""The limitation a forked rehearsal reports when the checking process had run autograd before (torch refuses the
backward pass in such a child): the rehearsal is then run in a fresh interpreter instead."""


def _rehearse_fresh(spec: str, arguments: dict[str, Any], family: str | None, timeout_s: float,
                    world_size: int) -> Rehearsal:  # fmt: skip
    """The rehearsal in a fresh interpreter (it imports torch and Lightning again: seconds), its own session killed
    whole at the end or the timeout."""
    import subprocess

    payload = {"spec": spec, "arguments": _jsonable(arguments), "family": family, "world_size": world_size}
    code = "import sys; from lightning_presets.tools.check import rehearsal as r; print(r._fresh_child(sys.argv[1]))"
    child = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(payload)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    timed_out = False
    try:
        with terminated_as_interrupt():
            out, err = child.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        out, err = b"", b""
    finally:
        kill_group(child.pid)
        child.wait()
    return _result(spec, out.splitlines(keepends=True), bytearray(err[-4096:]), child.returncode, timed_out, timeout_s)


def _fresh_child(payload: str) -> str:
    """What a fresh interpreter running the rehearsal prints: its result line (torch single-threaded, as forked)."""
    import torch

    torch.set_num_threads(1)
    return _child_result(json.loads(payload))


def _rehearse_once(
    spec: str, arguments: dict[str, Any], family: str | None, timeout_s: float, world_size: int
) -> Rehearsal:
    import lightning.pytorch  # noqa: F401  (imported before the fork: the child starts with it)

    payload = {"spec": spec, "arguments": _jsonable(arguments), "family": family, "world_size": world_size}
    results, result_end = os.pipe()
    output, output_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _forked_child(payload, results, result_end, output, output_end)
    os.close(result_end)
    os.close(output_end)
    lines: list[bytes] = []
    tail = bytearray()
    readers = [threading.Thread(target=_read_lines, args=(os.fdopen(results, "rb"), lines), daemon=True),
               threading.Thread(target=_read_tail, args=(os.fdopen(output, "rb"), tail), daemon=True)]  # fmt: skip
    for reader in readers:
        reader.start()
    timed_out = False
    try:
        with terminated_as_interrupt():
            deadline = time.monotonic() + timeout_s
            while not _exited(pid):
                if time.monotonic() >= deadline:
                    timed_out = True
                    break
                time.sleep(0.01)
    finally:  # the end, the timeout, Ctrl-C or SIGTERM: nothing the child started outlives the check
        kill_group(pid)
        _, status = os.waitpid(pid, 0)
        for reader in readers:
            reader.join(timeout=5)
    code = os.waitstatus_to_exitcode(status)
    return _result(spec, lines, tail, code, timed_out, timeout_s)


def _forked_child(payload: dict[str, Any], results: int, result_end: int, output: int, output_end: int) -> None:
    """The forked child: a session of its own (the parent kills its group), an empty stdin, its prints into the
    parent's tail, the result on its own pipe; it ends with ``os._exit`` whatever happens."""
    code = 0
    try:
        os.setsid()
        os.close(results)
        os.close(output)
        for number in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(number, signal.SIG_DFL)
        import torch

        torch.set_num_threads(1)  # as torch's DataLoader workers do: OpenMP's pool does not survive a fork
        empty = os.open(os.devnull, os.O_RDONLY)
        os.dup2(empty, 0)
        os.close(empty)
        os.dup2(output_end, 1)
        os.dup2(output_end, 2)
        os.close(output_end)
        with os.fdopen(result_end, "w", encoding="utf-8") as out:
            out.write(_child_result(payload) + "\n")
    except BaseException:
        code = 70
        with contextlib.suppress(BaseException):
            traceback.print_exc()
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        _REAL_EXIT(code)


def _child_result(payload: dict[str, Any]) -> str:
    from lightning_presets.tools.plan.user_model import ModelError

    sys.path.insert(0, os.getcwd())  # --model imports from the current directory first, as ``python -m`` would
    try:
        result = rehearse_in_process(payload["spec"], payload["arguments"], payload.get("family"),
                                     int(payload.get("world_size", 1)))  # fmt: skip
    except ModelError as error:
        text = str(error)
        return json.dumps({"event": "failed", "message": text if text.startswith("--model") else
                           f"--model {payload['spec']}: {text}"})  # fmt: skip
    return json.dumps({"event": "rehearsal", **result.as_dict()})


def _result(spec: str, lines: list[bytes], tail: bytearray, code: int, timed_out: bool, timeout_s: float) -> Rehearsal:
    text = bytes(tail).decode("utf-8", errors="replace")[-1500:].strip()
    what = f"--model {spec}"
    if timed_out:
        raise RehearsalFailed(f"{what}: building and rehearsing the model took longer than {timeout_s:g} s and was "
                              "stopped (a factory that never returns, or waits for input or a lock?); raise --timeout "
                              "if it is only slow")  # fmt: skip
    for line in lines:
        with contextlib.suppress(ValueError):
            data = json.loads(line)
            if isinstance(data, dict) and data.get("event") == "failed":
                raise RehearsalFailed(str(data["message"]))
            if isinstance(data, dict) and data.get("event") == "rehearsal":
                return Rehearsal.from_dict(data)
    last = f"; its last output:\n{text}" if text else ""
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        raise RehearsalCrashed(f"{what}: the rehearsal's process ended with {name} twice before it finished (the "
                               f"factory or the model aborted the interpreter?){last}")  # fmt: skip
    raise RehearsalFailed(f"{what}: the model's process ended with exit code {code} before the rehearsal finished "
                          "(os._exit() in the factory, the module or the model?): a factory must return the model, "
                          f"and the step must not end the process{last}")  # fmt: skip


def _exited(pid: int) -> bool:
    """Whether the child has ended, leaving it unreaped (its group id stays reserved until it is waited for)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _read_lines(stream: IO[bytes] | None, lines: list[bytes]) -> None:
    for line in stream or ():
        lines.append(line)


def _read_tail(stream: IO[bytes] | None, tail: bytearray) -> None:
    while stream is not None and (chunk := stream.read1(65536)):  # type: ignore[attr-defined]
        tail += chunk
        del tail[:-_TAIL]


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _jsonable(each) for key, each in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(each) for each in value]
    return value if isinstance(value, (str, int, float, bool)) or value is None else str(value)


# --------------------------------------------------------------------------------------------- findings


def findings(rehearsal: Rehearsal, spec: str, call: str) -> list[Any]:
    """The check's findings from a rehearsal: an error naming the stage, the exception and the user's line; or the
    warning that it could not (all) run."""
    from lightning_presets.failures import SIGNATURES, matches

    out = []
    where = f" at {rehearsal.line}" if rehearsal.line else ""
    if rehearsal.stage is not None:
        code = _BY_STAGE[rehearsal.stage]
        known = matches(rehearsal.exception, SIGNATURES)
        hint = (f"{known[0].cause}; {known[0].signature.fix}" if known else
                "change what the exception names (a real run raises it on every rank), then check again")  # fmt: skip
        done = f" (completed: {', '.join(rehearsal.completed)})" if rehearsal.completed else ""
        out.append(code.finding(
            f"{call} with --model {spec}: the {rehearsal.stage} raises {rehearsal.exception}{where}; rehearsed with "
            f"Lightning's fit in one CPU process{done}", hint))  # fmt: skip
    if rehearsal.limitation:
        out.append(NOT_REHEARSED.finding(
            f"--model {spec}: {rehearsal.limitation}; rehearsed: {', '.join(rehearsal.completed) or 'nothing'}",
            "the rehearsal's limit, not an error in the job: the rest is decided when the job runs"))  # fmt: skip
    return out


# --------------------------------------------------------------------------------------------- the child


_NOT_THEIRS = (os.sep + "site-packages" + os.sep, os.sep + "lib" + os.sep + "python", "<frozen ", "<string>")


def user_line(error: BaseException) -> str:
    """The innermost frame of ``error``'s traceback in the user's code (not torch's, Lightning's, the standard
    library's or this package's): ``file:line in function``."""
    package = str(Path(__file__).resolve().parents[2])
    found = ""
    for frame in traceback.extract_tb(error.__traceback__):
        name = frame.filename
        if name.startswith(package) or any(part in name for part in _NOT_THEIRS):
            continue
        found = f"{os.path.relpath(name) if not name.startswith('<') else name}:{frame.lineno} in {frame.name}"
    return found


_CPU_LIMITS = ("cuda", "nccl", "nvidia", "triton", "flash_attn", "transformer_engine", "bitsandbytes",
               "process group", "device_mesh", "device mesh")  # fmt: skip


_DATA_HOOKS = ("prepare_data", "setup", "train_dataloader", "val_dataloader")


def _limitation(error: BaseException) -> str:
    """Why ``error`` is the rehearsal's own limit (the model needs what one CPU process lacks, or data this machine
    does not hold), or empty."""
    frames = traceback.extract_tb(error.__traceback__)
    theirs = [frame for frame in frames if not any(part in frame.filename for part in _NOT_THEIRS)]
    data = os.sep.join(("torch", "utils", "data", ""))
    if any(frame.name in _DATA_HOOKS for frame in theirs) or any(data in frame.filename for frame in frames):
        return (f"loading the model's data raised {type(error).__name__}: {_first(error)}; the job's data may be "
                "where the job runs, not here")  # fmt: skip
    if any(frame.name == "configure_model" for frame in traceback.extract_tb(error.__traceback__)):
        return (f"configure_model raised {type(error).__name__}: {_first(error)}; it builds the model for the job's "
                "strategy and device mesh, which one CPU process does not have")  # fmt: skip
    text = f"{type(error).__name__}: {error}".lower()
    if "autograd" in text and "fork" in text:  # torch's own refusal in a child forked after autograd ran
        return f"{FORKED_AUTOGRAD} ({type(error).__name__}: {_first(error)})"
    hit = next((word for word in _CPU_LIMITS if word in text), None)
    return f"the model needs what a CPU process lacks ({hit}: {type(error).__name__}: {_first(error)})" if hit else ""


def _first(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    return lines[0][:300] if lines else ""


def rehearse_in_process(
    spec: str, arguments: dict[str, Any], family: str | None = None, world_size: int = 1
) -> Rehearsal:
    """The rehearsal itself (the child calls it; tests may, in a process that holds no process group)."""
    import logging
    import warnings

    from torch._subclasses.fake_tensor import FakeTensorMode

    from lightning_presets.tools.plan import user_model

    started = time.perf_counter()
    notes: list[str] = []
    factory = user_model.load_factory(spec)
    with FakeTensorMode(allow_non_fake_inputs=True):  # count first: no real memory for a model too large
        numel = sum(p.numel() for p in user_model.build(factory, spec).parameters())
    if numel > MAX_PARAMETERS:
        note = (f"not rehearsed: the model has {numel:,} parameters, above the {MAX_PARAMETERS:,} a CPU rehearsal "
                "runs with real tensors")  # fmt: skip
        return Rehearsal(notes=(note,), seconds=time.perf_counter() - started)
    model = user_model.build(factory, spec)
    from lightning.pytorch import LightningModule

    if not isinstance(model, LightningModule):
        note = f"not rehearsed: {type(model).__name__} is not a LightningModule, so fit has no step of it to run"
        return Rehearsal(notes=(note,), seconds=time.perf_counter() - started)
    trainer_args = dict(arguments)
    precision = str(trainer_args.get("precision", ""))
    if precision.startswith("16"):
        trainer_args["precision"] = "bf16" + precision[2:]
        notes.append(f"precision {precision} rehearsed as {trainer_args['precision']} (a CPU has no float16 autocast)")
    train, validation, source = _loaders(model, spec)
    if not validation:
        notes.append("no first validation step: the model defines no val_dataloader and validation_step")
    recorder = _stages_callback()
    logging.getLogger("lightning.pytorch").setLevel(logging.ERROR)
    from lightning.pytorch import Trainer

    trainer = Trainer(accelerator="cpu", devices=1, max_steps=1, limit_train_batches=1, limit_val_batches=1,
                      num_sanity_val_steps=1 if validation else 0, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                      callbacks=[recorder], **trainer_args)  # fmt: skip
    error: BaseException | None = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with _world(world_size):  # torch.distributed calls of the user's step see the job's world size
                trainer.fit(model, train_dataloaders=train)
        except BaseException as raised:  # the user's code may raise anything, SystemExit included
            error = raised
    if error is None and family == "deepspeed":
        error = _deepspeed_optimizers(model)
        if error is not None:
            recorder.completed = [each for each in recorder.completed if each != "set-up"]
    completed = tuple(each for each in STAGES if each in recorder.completed)
    seconds = time.perf_counter() - started
    notes.append(f"first batch from {source}")
    if error is None:
        return Rehearsal(completed=completed, notes=tuple(notes), seconds=seconds)
    limitation = _limitation(error)
    if limitation:
        return Rehearsal(completed=completed, limitation=limitation, notes=tuple(notes), seconds=seconds)
    if "set-up" in completed and source == "example_input_array":  # forward's input, maybe not the loader's batch
        why = (f"the first training step raised {type(error).__name__}: {_first(error)} on example_input_array, "
               "which Lightning's convention makes the forward's input, not necessarily a batch as the dataloader "
               "yields it; give the model a train_dataloader() to rehearse the step")  # fmt: skip
        return Rehearsal(completed=completed, limitation=why, notes=tuple(notes), seconds=seconds)
    if "set-up" not in completed:
        stage = "set-up"
    elif validation and "first validation step" not in completed:
        stage = "first validation step"
    else:
        stage = "first training step"
    return Rehearsal(completed=completed, stage=stage, exception=f"{type(error).__name__}: {_first(error)}",
                     line=user_line(error), notes=tuple(notes), seconds=seconds)  # fmt: skip


def _world(world_size: int) -> contextlib.AbstractContextManager[None]:
    """torch's fake process group of the job's world size, this process rank 0 (collectives return at once, with the
    right shapes), unless a process group exists already."""
    import torch.distributed as dist

    if world_size <= 1 or not dist.is_available() or dist.is_initialized():
        return contextlib.nullcontext()
    from lightning_presets.tools.plan.trace import fake_world

    return fake_world(world_size)


def _deepspeed_optimizers(model: Any) -> BaseException | None:
    """Lightning's ``DeepSpeedStrategy`` reading of the model's optimizers and schedulers (what its set-up runs)."""
    from lightning_presets.registry import private

    try:
        private.deepspeed_init_optimizers(model)
    except Exception as error:
        return error
    return None


def _loaders(model: Any, spec: str) -> tuple[Any, bool, str]:
    """What fit gets to train on: the model's own dataloader hooks (Lightning calls them after ``prepare_data`` and
    ``setup``, as in the job; one batch of each is used), else a loader of its ``example_input_array``; whether it
    has a validation step to run; where the first batch comes from."""
    from lightning.pytorch import LightningModule
    from torch.utils.data import DataLoader

    from lightning_presets.tools.plan.user_model import ModelError

    def overridden(name: str) -> bool:
        return getattr(type(model), name, None) is not getattr(LightningModule, name)

    validation = overridden("val_dataloader") and overridden("validation_step")
    if overridden("train_dataloader"):
        return None, validation, f"{type(model).__name__}.train_dataloader()"
    if getattr(model, "example_input_array", None) is not None:
        return DataLoader(cast(Any, [model.example_input_array]), batch_size=None), validation, "example_input_array"
    raise ModelError(f"--model {spec}: {type(model).__name__} has neither a train_dataloader() nor an "
                     "example_input_array, so there is no batch to rehearse the first step with; define one "
                     "(a batch as the dataloader yields it, e.g. self.example_input_array = "
                     "(torch.zeros(8, 32), torch.zeros(8, dtype=torch.long)))")  # fmt: skip


def _stages_callback() -> Any:
    from lightning.pytorch import Callback

    class Stages(Callback):  # type: ignore[misc]  # Lightning's class, untyped here
        def __init__(self) -> None:
            self.completed: list[str] = []

        def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
            self.completed.append("set-up")

        def on_sanity_check_end(self, trainer: Any, pl_module: Any) -> None:
            self.completed.append("first validation step")

        def on_train_end(self, trainer: Any, pl_module: Any) -> None:
            self.completed.append("first training step")

    return Stages()
