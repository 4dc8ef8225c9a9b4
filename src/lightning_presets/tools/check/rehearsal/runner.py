"""The rehearsal's processes: :func:`rehearse` forks the child (torch and Lightning already imported) into a session
of its own, reads one JSON result line from a pipe and kills the child's whole process group when it ends, when
``timeout_s`` runs out or when the parent is interrupted or terminated (SIGTERM, SIGHUP): a factory that exits the
interpreter, never returns or starts helper processes cannot end or hang the check, nor outlive it. Where a forked
child cannot run autograd (the parent ran it before), the rehearsal runs in a fresh interpreter instead."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import threading
import time
import traceback
from typing import IO, Any

from lightning_presets.tools.check.rehearsal.child import rehearsal_kind
from lightning_presets.tools.check.rehearsal.findings import (
    FORKED_AUTOGRAD,
    FORKED_CHILD,
    Rehearsal,
    RehearsalCrashed,
    RehearsalFailed,
)
from lightning_presets.tools.simulation.processes import kill_group, terminated_as_interrupt

_REAL_EXIT = os._exit
DEFAULT_TIMEOUT_S = 300.0
_TAIL = 4096


def trainer_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """The job's Trainer arguments the rehearsal repeats (the step's behaviour; not the hardware's or the loop's)."""
    keys = ("precision", "gradient_clip_val", "gradient_clip_algorithm", "accumulate_grad_batches")
    return {key: arguments[key] for key in keys if arguments.get(key) is not None}


def ranks_to_rehearse(world_size: int, num_nodes: int = 1) -> tuple[int, ...]:
    """Rank 0 and the ranks whose code can differ from it: the last rank, and the first rank of the second node when
    the job has several nodes (its ``local_rank`` is 0 but its ``global_rank`` is not)."""
    if world_size <= 1:
        return (0,)
    per_node = max(1, world_size // max(1, num_nodes))
    second_node = (per_node,) if num_nodes > 1 and per_node < world_size else ()
    return tuple(sorted({0, world_size - 1, *second_node}))


def rehearse(
    spec: str, arguments: dict[str, Any], family: str | None, timeout_s: float = DEFAULT_TIMEOUT_S, world_size: int = 1,
    num_nodes: int = 1, datamodule: str | None = None,
) -> Rehearsal:  # fmt: skip
    """Rehearse ``spec`` (``MODULE:FACTORY``) with the job's Trainer ``arguments`` in child processes, one per rank of
    :func:`ranks_to_rehearse`, side by side: each forked from this one, which has imported torch and Lightning
    already (a fresh interpreter would import them again: seconds); then their collectives compared.

    ``family`` is the preset's family (one whose ``rehearsal`` field is ``deepspeed_engine`` adds DeepSpeed's
    optimizer reading, decided here, where the family's declaration is imported); ``datamodule``
    (``MODULE:FACTORY``) the ``LightningDataModule`` whose loaders give the first batches. Raises
    :class:`RehearsalFailed` when the model cannot be built or a child ends without a result; a child that a
    signal ended (:class:`RehearsalCrashed`) is forked once more first.
    """
    base = {"spec": spec, "arguments": _jsonable(arguments), "family": family, "world_size": world_size,
            "num_nodes": num_nodes, "datamodule": datamodule,
            "family_rehearsal": rehearsal_kind(family)}  # fmt: skip
    payloads = [{**base, "rank": rank} for rank in ranks_to_rehearse(world_size, num_nodes)]
    return merged(_side_by_side(payloads, timeout_s))


def _side_by_side(payloads: list[dict[str, Any]], timeout_s: float) -> list[Rehearsal]:
    """One child per payload, all forked before any is waited for; a crashed or forked-autograd one run again."""
    children: list[Started] = []
    try:
        for payload in payloads:
            children.append(Started(payload))
        timed_out = wait_all(children, timeout_s)
    finally:  # the end, the timeout, Ctrl-C or SIGTERM: nothing a child started outlives the check
        codes = [child.finish() for child in children]
    results = []
    for payload, child, code in zip(payloads, children, codes, strict=True):
        try:
            result = result_of(child, code, timed_out, timeout_s)
        except RehearsalCrashed:
            result = _rehearse_once(payload, timeout_s)
        if result.limitation.startswith(FORKED_AUTOGRAD):  # this process ran autograd before: a fresh interpreter
            result = _rehearse_fresh(payload, timeout_s)
        results.append(result)
    return results


def merged(results: list[Rehearsal]) -> Rehearsal:
    """The ranks' rehearsals as one: the first rank that raised (rank 0 first), else the first that could not
    finish, else rank 0's, with the ranks' disagreements on their collectives when every rank finished."""
    from dataclasses import replace

    from lightning_presets.tools.check.rehearsal.collectives import disagreements

    ranks = tuple(result.rank for result in results)
    primary = next((result for result in results if result.stage is not None), None)
    primary = primary or next((result for result in results if result.limitation), results[0])
    finished = all(result.stage is None and not result.limitation for result in results)
    found = disagreements({result.rank: list(result.collectives) for result in results}) if finished else []
    notes = primary.notes
    if len(results) > 1:
        counts = ", ".join(f"rank {result.rank}: {len(result.collectives)}" for result in results)
        notes = (*notes, f"ranks rehearsed side by side: {', '.join(map(str, ranks))} (collectives entered: {counts})")
    return replace(primary, ranks=ranks, disagreements=tuple(found), notes=notes,
                   seconds=max(result.seconds for result in results))  # fmt: skip


def run_child(payload: dict[str, Any], timeout_s: float) -> Rehearsal:
    """One rehearsal child of ``payload`` (``spec``, ``arguments``, ``family``, ``world_size``, ``rank``,
    ``num_nodes``)."""
    try:
        result = _rehearse_once(payload, timeout_s)
    except RehearsalCrashed:
        result = _rehearse_once(payload, timeout_s)
    if result.limitation.startswith(FORKED_AUTOGRAD):  # this process ran autograd before: a fresh interpreter
        return _rehearse_fresh(payload, timeout_s)
    return result


def _rehearse_fresh(payload: dict[str, Any], timeout_s: float) -> Rehearsal:
    """The rehearsal in a fresh interpreter (it imports torch and Lightning again: seconds), its own session killed
    whole at the end or the timeout."""
    import subprocess

    code = ("import sys; from lightning_presets.tools.check.rehearsal import runner as r; "
            "print(r._fresh_child(sys.argv[1]))")  # fmt: skip
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
    return _result(str(payload["spec"]), out.splitlines(keepends=True), bytearray(err[-4096:]), child.returncode,
                   timed_out, timeout_s)  # fmt: skip


def _fresh_child(payload: str) -> str:
    """What a fresh interpreter running the rehearsal prints: its result line (torch single-threaded, as forked)."""
    import torch

    torch.set_num_threads(1)
    return _child_result(json.loads(payload))


class Started:
    """A forked child under way: its pid and the threads reading its result and its output's tail."""

    def __init__(self, payload: dict[str, Any]) -> None:
        import lightning.pytorch  # noqa: F401  (imported before the fork: the child starts with it)

        results, result_end = os.pipe()
        output, output_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            _forked_child(payload, results, result_end, output, output_end)
        os.close(result_end)
        os.close(output_end)
        self.pid = pid
        self.spec = str(payload["spec"])
        self.lines: list[bytes] = []
        self.tail = bytearray()
        self.readers = [threading.Thread(target=_read_lines, args=(os.fdopen(results, "rb"), self.lines), daemon=True),
                        threading.Thread(target=_read_tail, args=(os.fdopen(output, "rb"), self.tail),
                                         daemon=True)]  # fmt: skip
        for reader in self.readers:
            reader.start()
        self.status: int | None = None

    def finish(self) -> int:
        """Kill what is left of the child's group, reap it and its readers; its exit code."""
        kill_group(self.pid)
        if self.status is None:
            _, self.status = os.waitpid(self.pid, 0)
        for reader in self.readers:
            reader.join(timeout=5)
        return os.waitstatus_to_exitcode(self.status)


def wait_all(children: list[Started], timeout_s: float) -> bool:
    """Wait for every child to exit within ``timeout_s``; whether the time ran out (interrupts propagate)."""
    with terminated_as_interrupt():
        deadline = time.monotonic() + timeout_s
        while not all(_exited(child.pid) for child in children):
            if time.monotonic() >= deadline:
                return True
            time.sleep(0.01)
    return False


def _rehearse_once(payload: dict[str, Any], timeout_s: float) -> Rehearsal:
    child = Started(payload)
    try:
        timed_out = wait_all([child], timeout_s)
    finally:  # the end, the timeout, Ctrl-C or SIGTERM: nothing the child started outlives the check
        code = child.finish()
    return _result(child.spec, child.lines, child.tail, code, timed_out, timeout_s)


def result_of(child: Started, code: int, timed_out: bool, timeout_s: float) -> Rehearsal:
    """The rehearsal a finished child reported (or the usage error it amounts to)."""
    return _result(child.spec, child.lines, child.tail, code, timed_out, timeout_s)


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
        os.environ[FORKED_CHILD] = "1"
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
    from lightning_presets.tools.check.rehearsal.child import rehearse_in_process
    from lightning_presets.tools.simulation.user_model import ModelError

    sys.path.insert(0, os.getcwd())  # --model imports from the current directory first, as ``python -m`` would
    try:
        result = rehearse_in_process(payload["spec"], payload["arguments"], payload.get("family"),
                                     int(payload.get("world_size", 1)), rank=int(payload.get("rank", 0)),
                                     num_nodes=int(payload.get("num_nodes", 1)),
                                     datamodule=payload.get("datamodule"),
                                     family_rehearsal=payload.get("family_rehearsal"))  # fmt: skip
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
