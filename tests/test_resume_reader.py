"""The checkpoint reader behind the resume guards, on what real jobs and damaged files hand it: a legal resume is never
broken by it, nothing but findings comes out of it, its work is bounded, special files never block it."""

from __future__ import annotations

import json
import os
import pickletools
import random
import shutil
import struct
import sys
import threading
import time
import tracemalloc
import warnings
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from torch import nn

from lightning_presets import PresetConfigError, checkpoints
from lightning_presets.checkpoints import CheckpointReadError, formats, limits, read_checkpoint
from lightning_presets.core.context import Context
from lightning_presets.core.findings import Finding, PresetWarning
from lightning_presets.core.namespaces import Kind
from lightning_presets.guards import resume
from lightning_presets.guards.resume import resume_findings

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "scripts"))

from checkpoint_layouts import LIGHTNING_STATE, deepspeed_folder  # noqa: E402

FAMILIES = {"ddp_static_graph": "ddp", "fsdp2": "model_parallel", "deepspeed_zero2_offload": "deepspeed"}


def ctx(preset: str = "ddp_static_graph", devices: int = 2, kind: Kind = "trainer") -> Context:
    return Context(
        preset=preset, target=kind, kind=kind, accelerator="cpu", devices_per_node=devices, num_nodes=1,
        precision="32-true", precision_plugin="Precision", cluster_environment="LightningEnvironment",
        family=FAMILIES[preset],
    )  # fmt: skip


class Lookahead(torch.optim.Optimizer):
    """An optimizer whose ``state_dict()`` is not torch.optim's ``{"state", "param_groups"}`` (torch-optimizer's
    Lookahead: ``fast_state``, ``slow_state``, ``param_groups``)."""

    def __init__(self, params: Any) -> None:
        super().__init__(params, {"lr": 0.1})

    def state_dict(self) -> dict[str, Any]:
        inner = super().state_dict()
        return {"fast_state": inner["state"], "slow_state": {}, "param_groups": inner["param_groups"]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        super().load_state_dict({"state": state_dict["fast_state"], "param_groups": state_dict["param_groups"]})


class Foreign(torch.optim.Optimizer):
    """An optimizer whose ``state_dict()`` shares no key with torch.optim's."""

    def __init__(self, params: Any) -> None:
        super().__init__(params, {"lr": 0.1})

    def state_dict(self) -> dict[str, Any]:
        return {"inner": {"k": 5, "steps": [1, 2]}, "version": 3}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        pass


def trainer_file(path: Path, optimizer_states: list[Any]) -> Path:
    model = nn.Linear(2, 2)
    torch.save({"state_dict": model.state_dict(), "optimizer_states": optimizer_states, "lr_schedulers": [],
                **LIGHTNING_STATE}, path)  # fmt: skip
    return path


def findings_codes(findings: list[Finding]) -> list[str]:
    return [each.code for each in findings]


# --------------------------------------------------------------------------- 1. a legal resume is never broken


OPTIMIZER_STATES: dict[str, Callable[[], list[Any]]] = {
    "no optimizer (a fit without one saves [{}])": lambda: [{}],
    "an empty list": lambda: [],
    "Lookahead's keys": lambda: [Lookahead(nn.Linear(2, 2).parameters()).state_dict()],
    "keys of its own": lambda: [Foreign(nn.Linear(2, 2).parameters()).state_dict()],
    "not a mapping": lambda: [None, 3, "x"],
}


@pytest.mark.parametrize("states", OPTIMIZER_STATES.values(), ids=OPTIMIZER_STATES.keys())
def test_trainer_files_with_unusual_optimizer_states_resume(tmp_path: Path, states: Callable[[], list[Any]]) -> None:
    path = trainer_file(tmp_path / "run.ckpt", states())
    facts = read_checkpoint(path)
    assert (facts.format, facts.writer, facts.model_key) == ("file", "trainer", "state_dict")
    for preset in ("ddp_static_graph", "fsdp2"):
        assert resume_findings(path, ctx(preset)) == []


def test_a_fit_without_an_optimizer_resumes_in_lightning(tmp_path: Path) -> None:
    """The real load: Lightning's own ``load_checkpoint`` of the preset runs and returns the checkpoint."""
    from lightning.pytorch import Trainer

    path = trainer_file(tmp_path / "run.ckpt", [{}])
    strategy = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, logger=False).strategy
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        loaded = strategy.load_checkpoint(str(path))
    assert loaded["optimizer_states"] == [{}]


@pytest.mark.parametrize(
    "error", [KeyError("state"), TypeError("x"), RecursionError(), MemoryError(), SystemExit(3), StopIteration()]
)
def test_any_failure_inside_the_reader_is_lp809_and_the_load_proceeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    from lightning.pytorch import Trainer

    def failing(*args: Any) -> Any:
        raise error

    path = trainer_file(tmp_path / "run.ckpt", [{}])
    monkeypatch.setattr(formats, "file_facts", failing)
    with pytest.raises(CheckpointReadError) as raised:
        read_checkpoint(path)
    assert raised.value.internal
    strategy = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, logger=False).strategy
    with pytest.warns(PresetWarning) as caught:
        loaded = strategy.load_checkpoint(str(path))
    assert loaded["optimizer_states"] == [{}]  # Lightning loaded it
    [finding] = [each.message.finding for each in caught if isinstance(each.message, PresetWarning)]  # type: ignore[attr-defined]
    assert (finding.code, finding.severity) == ("LP809", "warning")
    assert "Lightning will try to load it" in finding.message
    assert "a bug of lightning-presets" in finding.message
    assert "report" in finding.hint


@pytest.mark.parametrize("skip", ["all", "LP801,LP802,LP803,LP804,LP805,LP806,LP807,LP808,LP809"])
def test_skipping_every_resume_rule_does_not_even_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, skip: str
) -> None:
    from lightning.pytorch import Trainer

    def never(*args: Any) -> Any:
        raise AssertionError("the reader ran")

    monkeypatch.setattr(resume, "read_checkpoint", never)
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", skip)
    path = trainer_file(tmp_path / "run.ckpt", [{}])
    strategy = Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2, logger=False).strategy
    with warnings.catch_warnings():
        warnings.simplefilter("error", PresetWarning)
        assert strategy.load_checkpoint(str(path))["optimizer_states"] == [{}]
    assert resume_findings(path, ctx()) == []
    monkeypatch.setenv("LIGHTNING_PRESETS_SKIP", "LP801")  # other rules still run: the reader too
    with pytest.raises(AssertionError, match="the reader ran"):
        resume_findings(path, ctx())


def test_a_strategy_whose_settings_raise_still_gets_its_checkpoint_read(tmp_path: Path) -> None:
    class Odd:
        @property
        def config(self) -> Any:
            raise RuntimeError("config is not ready")

    path = trainer_file(tmp_path / "run.ckpt", [])
    assert resume_findings(path, ctx(), strategy=Odd()) == []
    torch.save({"state_dict": {}, **LIGHTNING_STATE}, tmp_path / "weights.ckpt")
    assert findings_codes(resume_findings(tmp_path / "weights.ckpt", ctx(), strategy=Odd())) == ["LP804"]


def test_check_resume_from_reports_lp809_never_an_internal_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from helpers import run_cli

    path = trainer_file(tmp_path / "run.ckpt", [{}])
    job = ("check", "--strategy", "ddp_static_graph", "--accelerator", "cpu", "--devices", "2", "--json")
    code, out, err = run_cli(capsys, *job, "--resume-from", str(path))
    assert (code, json.loads(out)["findings"]) == (0, []), err
    lookahead = trainer_file(tmp_path / "lookahead.ckpt", OPTIMIZER_STATES["Lookahead's keys"]())
    code, out, err = run_cli(capsys, *job, "--resume-from", str(lookahead))
    assert (code, json.loads(out)["findings"]) == (0, []), err

    def failing(*args: Any) -> Any:
        raise KeyError("state")

    monkeypatch.setattr(formats, "file_facts", failing)
    code, out, err = run_cli(capsys, *job, "--resume-from", str(path))
    assert code == 0, err
    assert "internal error" not in err
    assert [(each["code"], each["severity"]) for each in json.loads(out)["findings"]] == [("LP809", "warning")]


# --------------------------------------------------------------------------- 2. only findings come out


def sharded_folder(path: Path) -> Path:
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model = nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ...: assuming a single process"
        dcp.save(
            {"state_dict": model.state_dict(), "optimizer_0": get_optimizer_state_dict(model, optimizer)},
            checkpoint_id=str(path),
        )
    torch.save({"loops": {}, "pytorch-lightning_version": "2.6.6"}, path / "meta.pt")
    return path


def adam_file(path: Path) -> Path:
    model = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    return trainer_file(path, [optimizer.state_dict()])


def zip_edit(data: bytearray, rng: random.Random) -> None:
    """One edit of a zip's headers: a field of a local or central header, or of the end record."""
    signatures = [b"PK\x03\x04", b"PK\x01\x02", b"PK\x05\x06", b"PK\x06\x06", b"PK\x06\x07"]
    starts = [index for signature in signatures for index in _find_all(bytes(data), signature)]
    if not starts:
        return
    at = rng.choice(starts) + rng.randrange(4, 46)
    if at + 2 <= len(data):
        data[at : at + 2] = struct.pack("<H", rng.choice([0, 1, 0x3F, 0x64, 0xFFFF, rng.randrange(65536)]))


def _find_all(data: bytes, needle: bytes) -> Iterator[int]:
    start = data.find(needle)
    while start >= 0:
        yield start
        start = data.find(needle, start + 1)


def corrupt(file: Path, rng: random.Random) -> None:
    data = bytearray(file.read_bytes())
    kind = rng.choice(["flip", "flip", "truncate", "zip", "bytes"])
    if not data:
        return
    if kind == "flip":
        for _ in range(rng.choice([1, 1, 2, 8])):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del data[rng.randrange(len(data)) :]
    elif kind == "zip":
        zip_edit(data, rng)
    else:
        at = rng.randrange(len(data))
        data[at : at + 8] = bytes(rng.randrange(256) for _ in range(8))
    file.write_bytes(bytes(data))


LAYOUTS: dict[str, Callable[[Path], Path]] = {
    "trainer file": lambda root: adam_file(root / "run.ckpt"),
    "distributed folder": lambda root: sharded_folder(root / "run.ckpt"),
    "deepspeed folder": lambda root: deepspeed_folder(root / "run.ckpt", stage=2, data_parallel=2),
}
JOBS = {
    "trainer file": "ddp_static_graph",
    "distributed folder": "fsdp2",
    "deepspeed folder": "deepspeed_zero2_offload",
}


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUTS)
def test_fuzzed_checkpoints_give_findings_never_exceptions(tmp_path: Path, layout: str) -> None:
    rng = random.Random(f"resume-reader-{layout}")
    (tmp_path / "pristine").mkdir()
    pristine = LAYOUTS[layout](tmp_path / "pristine")
    files = sorted(path for path in ([pristine] if pristine.is_file() else pristine.rglob("*")) if path.is_file())
    job = ctx(JOBS[layout], devices=2)
    deadline = time.monotonic() + 4.0
    runs = 0
    while time.monotonic() < deadline or runs < 50:
        case = tmp_path / f"case{runs}"
        shutil.copytree(pristine.parent, case)
        target = case / files[rng.randrange(len(files))].relative_to(pristine.parent)
        corrupt(target, rng)
        error = refusal(case / pristine.name)
        assert error is None or not error.internal, f"{target.name}: {error}"
        found = resume_findings(case / pristine.name, job)
        assert all(isinstance(each, Finding) and each.code.startswith("LP8") for each in found), found
        shutil.rmtree(case)
        runs += 1
    assert runs >= 50


def refusal(path: Path) -> CheckpointReadError | None:
    """The reader's refusal of ``path`` (``None``: read); any other exception escapes."""
    try:
        read_checkpoint(path)
    except CheckpointReadError as error:
        return error
    except FileNotFoundError:
        return None
    return None


def _rezip(path: Path, edit: Callable[[zipfile.ZipInfo, bytes], bytes] | None = None) -> Path:
    """``path`` rewritten member by member (stored), with ``edit`` applied to each member's bytes."""
    with zipfile.ZipFile(path) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for info, data in members:
            archive.writestr(info.filename, edit(info, data) if edit else data)
    return path


def test_an_unusual_version_needed_is_read_as_torch_reads_it(tmp_path: Path) -> None:
    path = adam_file(tmp_path / "run.ckpt")
    data = bytearray(path.read_bytes())
    for at in _find_all(bytes(data), b"PK\x01\x02"):
        data[at + 6 : at + 8] = struct.pack("<H", 0x64)  # "version needed to extract": 10.0 (zipfile reads <= 6.3)
    for at in _find_all(bytes(data), b"PK\x03\x04"):
        data[at + 4 : at + 6] = struct.pack("<H", 0x64)
    path.write_bytes(bytes(data))
    assert "state_dict" in torch.load(path, weights_only=False)  # torch (and Lightning) load it
    facts = read_checkpoint(path)
    assert (facts.writer, facts.optimizers, facts.weight_dtypes) == ("trainer", 1, ("float32",))
    assert resume_findings(path, ctx()) == []


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        (lambda data: data[: len(data) // 2], "no zip directory"),
        (lambda data: data.replace(b"data.pkl", b"dada.pkl", 1), None),  # the local header's name: torch ignores it
        (lambda data: data.replace(b"PK\x01\x02", b"PK\x01\x03", 1), "zip directory is damaged"),
    ],
)
def test_damaged_zips_are_lp809_or_read(tmp_path: Path, damage: Callable[[bytes], bytes], expected: str | None) -> None:
    path = adam_file(tmp_path / "run.ckpt")
    path.write_bytes(damage(path.read_bytes()))
    if expected is None:
        assert read_checkpoint(path).writer == "trainer"
        return
    with pytest.raises(CheckpointReadError, match=expected):
        read_checkpoint(path)
    assert findings_codes(resume_findings(path, ctx())) == ["LP809"]


def test_a_damaged_pickle_is_lp809_whatever_the_error(tmp_path: Path) -> None:
    edits: list[Callable[[bytes], bytes]] = [
        lambda pkl: pkl[: len(pkl) // 2],  # EOFError / UnpicklingError
        lambda pkl: pkl.replace(b"X", b"\xff\xff\xff\x7f", 1),  # a BINUNICODE length beyond the end
        lambda pkl: b"\x80\x02X\x02\x00\x00\x00\xff\xfe.",  # not UTF-8
        lambda pkl: b"\x80\x02}q\x00(K\x01]q\x01u.",  # a list as a key: unhashable
        lambda pkl: b"\x80\x02c__builtin__\nint\nK\x01\x85R.",  # REDUCE of a placeholder
        lambda pkl: b"\x80\x02\x82\x01.",  # an extension code
    ]
    for index, edit in enumerate(edits):

        def edited(info: zipfile.ZipInfo, data: bytes, edit: Callable[[bytes], bytes] = edit) -> bytes:
            return edit(data) if info.filename.endswith("data.pkl") else data

        path = _rezip(adam_file(tmp_path / f"run{index}.ckpt"), edited)
        error = refusal(path)
        assert error is None or not error.internal, error
        assert set(findings_codes(resume_findings(path, ctx()))) <= {"LP809", "LP808"}


# --------------------------------------------------------------------------- 3. bounded by work, not bytes


def raw_zip(path: Path, pickle_bytes: bytes, compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as archive:
        archive.writestr("archive/data.pkl", pickle_bytes)
        archive.writestr("archive/version", b"3\n")
    return path


def measured(call: Callable[[], Any]) -> tuple[int, BaseException | None]:
    """(peak bytes traced, the error raised) of ``call``."""
    tracemalloc.start()
    raised: BaseException | None = None
    try:
        call()
    except Exception as error:
        raised = error
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak, raised


@dataclass
class Work:
    """What the reader did, counted (a machine's speed changes none of it): pickle opcodes run, bytes read from the
    checkpoint's file and bytes inflated from its compressed pickle."""

    opcodes: int = 0
    read: int = 0
    inflated: int = 0


@pytest.fixture
def work(monkeypatch: pytest.MonkeyPatch) -> Work:
    """Counts the reader's :class:`Work` while the test runs."""
    from lightning_presets.checkpoints import torch_file, unpickler

    counted = Work()

    def counting(handler: Callable[[Any], None]) -> Callable[[Any], None]:
        def run(self: Any) -> None:
            counted.opcodes += 1
            handler(self)

        return run

    class Handle:
        def __init__(self, handle: Any) -> None:
            self._handle = handle

        def read(self, size: int = -1) -> bytes:
            data: bytes = self._handle.read(size)
            counted.read += len(data)
            return data

        def readline(self, size: int = -1) -> bytes:
            data: bytes = self._handle.readline(size)
            counted.read += len(data)
            return data

        def __getattr__(self, name: str) -> Any:
            return getattr(self._handle, name)

        def __enter__(self) -> Handle:
            return self

        def __exit__(self, *exc: object) -> None:
            self._handle.close()

    class Inflater:
        def __init__(self, wbits: int) -> None:
            self._inflater = zlib.decompressobj(wbits)

        def decompress(self, data: bytes, max_length: int = 0) -> bytes:
            out = self._inflater.decompress(data, max_length)
            counted.inflated += len(out)
            return out

        @property
        def unconsumed_tail(self) -> bytes:
            return self._inflater.unconsumed_tail

        @property
        def eof(self) -> bool:
            return self._inflater.eof

    opened = torch_file.open_regular
    dispatch = {code: counting(handler) for code, handler in unpickler._Unpickler.dispatch.items()}
    monkeypatch.setattr(unpickler._Unpickler, "dispatch", dispatch)
    monkeypatch.setattr(torch_file, "open_regular", lambda *args: Handle(opened(*args)))
    monkeypatch.setattr(torch_file, "zlib", SimpleNamespace(decompressobj=Inflater, MAX_WBITS=zlib.MAX_WBITS,
                                                            error=zlib.error))  # fmt: skip
    return counted


def cpu_seconds(call: Callable[[], Any], repeat: int = 3) -> float:
    """The least CPU time of this thread that ``call`` took over ``repeat`` runs (other processes add nothing to
    it; for a ratio of two costs measured alike in the same run, never for an absolute figure)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.thread_time()
        call()
        best = min(best, time.thread_time() - start)
    return best


def test_a_compressed_pickle_of_empty_dicts_costs_nothing(tmp_path: Path, work: Work) -> None:
    bomb = b"\x80\x02" + b"}" * (64 * 2**20) + b"."  # 64 MiB of EMPTY_DICT: about 65 KB deflated
    path = raw_zip(tmp_path / "bomb.ckpt", bomb, zipfile.ZIP_DEFLATED)
    del bomb
    assert path.stat().st_size < 100_000
    peak, raised = measured(lambda: read_checkpoint(path))
    assert isinstance(raised, CheckpointReadError)
    assert "expands more than" in str(raised)
    assert work.inflated <= limits.MAX_COMPRESSION_RATIO * work.read + 2 * 16 * 2**10  # stopped at the ratio
    assert work.opcodes == 0  # and unpickled nothing
    assert peak < 20 * 2**20
    assert findings_codes(resume_findings(path, ctx())) == ["LP809"]


def test_a_stored_pickle_of_empty_dicts_stops_at_the_object_budget(tmp_path: Path, work: Work) -> None:
    from lightning_presets.checkpoints.unpickler import _CHECK_EVERY

    path = raw_zip(tmp_path / "dicts.ckpt", b"\x80\x02" + b"}" * (3 * checkpoints.MAX_PICKLE_OBJECTS) + b".")
    with pytest.raises(CheckpointReadError, match="creates more than"):
        read_checkpoint(path)
    assert work.opcodes <= checkpoints.MAX_PICKLE_OBJECTS + 2 * _CHECK_EVERY, work  # an object an opcode: it stopped


def test_keys_of_one_hash_are_not_quadratic(tmp_path: Path) -> None:
    modulus = 2**61 - 1  # ints that differ by it share a hash

    def keys(name: str, step: int) -> Path:
        body = bytearray(b"\x80\x02}(")
        for index in range(40_000):
            key = (index * step).to_bytes(16, "little", signed=True)
            body += b"\x8a\x10" + key + b"N"  # LONG1 key, None
        body += b"u."  # one SETITEMS of every pair
        return raw_zip(tmp_path / f"{name}.ckpt", bytes(body))

    collide, distinct = keys("collide", modulus), keys("distinct", 1)  # the same opcodes and sizes
    assert len(read_checkpoint(collide).top_level) == 40_000
    ratio = cpu_seconds(lambda: read_checkpoint(collide)) / cpu_seconds(lambda: read_checkpoint(distinct))
    assert ratio < 5, f"keys of one hash cost {ratio:.1f} times distinct keys"  # about 1.4; quadratic: 100 and more


@pytest.mark.parametrize(
    ("limit", "value", "message"),
    [
        ("MAX_PICKLE_OPCODES", 1000, "runs more than"),
        ("MAX_PICKLE_OBJECTS", 1000, "creates more than"),
        ("MAX_PICKLE_SECONDS", 0.0, "CPU time"),
        ("MAX_PICKLE_CLASSES", 1, "names more than"),
        ("MAX_COMPRESSION_RATIO", 1, "expands more than"),
    ],
)
def test_each_budget_is_lp809(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, limit: str, value: float, message: str
) -> None:
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(300)])
    path = trainer_file(tmp_path / "run.ckpt", [torch.optim.Adam(model.parameters()).state_dict()])
    torch.save({"state_dict": model.state_dict(), **LIGHTNING_STATE}, path)
    if limit == "MAX_COMPRESSION_RATIO":
        with zipfile.ZipFile(path) as archive:
            pkl = archive.read(next(name for name in archive.namelist() if name.endswith("data.pkl")))
        raw_zip(path, pkl, zipfile.ZIP_DEFLATED)
    assert read_checkpoint(path).writer == "trainer"  # within the real budgets
    monkeypatch.setattr(limits, limit, value)
    with pytest.raises(CheckpointReadError, match=message):
        read_checkpoint(path)
    [finding] = resume_findings(path, ctx())
    assert (finding.code, finding.severity) == ("LP809", "warning")


# --------------------------------------------------------------------------- 4. special files never block


def _fifo_cases() -> dict[str, Callable[[Path], tuple[Path, Path]]]:
    def metadata(root: Path) -> tuple[Path, Path]:
        folder = sharded_folder(root / "run.ckpt")
        return folder, folder / ".metadata"

    def meta(root: Path) -> tuple[Path, Path]:
        folder = sharded_folder(root / "run.ckpt")
        return folder, folder / "meta.pt"

    def latest(name: str) -> Callable[[Path], tuple[Path, Path]]:
        def build(root: Path) -> tuple[Path, Path]:
            folder = deepspeed_folder(root / "run.ckpt", stage=2, data_parallel=2, universal=True)
            return folder, folder / name

        return build

    def model_states(root: Path) -> tuple[Path, Path]:
        folder = deepspeed_folder(root / "run.ckpt", stage=2, data_parallel=2)
        return folder, folder / "checkpoint" / "mp_rank_00_model_states.pt"

    def shard(root: Path) -> tuple[Path, Path]:
        folder = deepspeed_folder(root / "run.ckpt", stage=2, data_parallel=2, config_stage=False)
        return folder, folder / "checkpoint" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"

    return {
        ".metadata": metadata, "meta.pt": meta, "latest": latest("latest"),
        "latest_universal": latest("latest_universal"), "model_states": model_states, "optim_states": shard,
    }  # fmt: skip


FIFO_CASES = _fifo_cases()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are POSIX")
@pytest.mark.parametrize("case", FIFO_CASES, ids=FIFO_CASES)
def test_a_fifo_inside_a_checkpoint_is_refused_without_blocking(tmp_path: Path, case: str) -> None:
    folder, special = FIFO_CASES[case](tmp_path)
    special.unlink()
    os.mkfifo(special)
    outcome: list[Any] = []

    def read() -> None:
        try:
            outcome.append(resume_findings(folder, ctx("fsdp2" if "meta" in case else "deepspeed_zero2_offload")))
        except BaseException as error:
            outcome.append(error)

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    thread.join(10)
    if thread.is_alive():  # it blocked opening the FIFO: open the other end to release it, then fail
        descriptor = os.open(special, os.O_WRONLY | os.O_NONBLOCK)
        os.close(descriptor)
        thread.join(10)
        pytest.fail(f"reading {special.name} as a FIFO blocked")
    [findings] = outcome
    assert isinstance(findings, list), findings
    [finding] = findings
    assert finding.code == "LP809"
    assert "FIFO" in finding.message


# --------------------------------------------------------------------------- 5. Fabric.load of other optimizers


@pytest.fixture
def lightning_loads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from lightning.fabric.strategies import ModelParallelStrategy

    calls: list[str] = []
    monkeypatch.setattr(ModelParallelStrategy, "load_checkpoint", lambda self, *a, **k: calls.append("load") or {})
    return calls


@pytest.mark.parametrize("optimizer", [Lookahead, Foreign])
def test_fabric_load_of_an_optimizer_not_shaped_like_torch_optims(
    tmp_path: Path, lightning_loads: list[str], optimizer: type[torch.optim.Optimizer]
) -> None:
    from lightning.fabric import Fabric

    strategy = Fabric(strategy="fsdp2", accelerator="cpu", devices=2).strategy
    model = nn.Linear(2, 2)
    own = optimizer(model.parameters())
    torch.save({"model": model.state_dict(), "optimizer": own.state_dict(), "step": 3}, tmp_path / "run.pt")
    strategy.load_checkpoint(path=tmp_path / "run.pt", state={"model": model, "optimizer": own}, strict=True)
    assert lightning_loads == ["load"]  # accepted: Lightning's own load ran
    assert resume_findings(tmp_path / "run.pt", ctx("fsdp2", kind="fabric"), how="load(...)") == []  # check: too
    torch.save({"model": model.state_dict(), "step": 3}, tmp_path / "weights.pt")
    with pytest.raises(PresetConfigError) as raised:  # the rejected case: no 'optimizer' in it
        strategy.load_checkpoint(path=tmp_path / "weights.pt", state={"model": model, "optimizer": own}, strict=True)
    assert raised.value.codes == ("LP804",)
    assert "'optimizer'" in raised.value.findings[0].message
    strategy.load_checkpoint(path=tmp_path / "weights.pt", state={"model": model, "optimizer": own}, strict=False)
    assert lightning_loads == ["load", "load"]  # strict=False: Fabric skips what the checkpoint lacks
    renamed = {"model": model, "opt": own}
    torch.save({"model": model.state_dict(), "opt": own.state_dict()}, tmp_path / "renamed.pt")
    strategy.load_checkpoint(path=tmp_path / "renamed.pt", state=renamed, strict=True)
    assert lightning_loads == ["load", "load", "load"]


# --------------------------------------------------------------------------- 6. legacy files, escape sequences


def test_a_legacy_torch_save_file_is_read(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    state = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], **LIGHTNING_STATE}
    torch.save(state, tmp_path / "legacy.ckpt", _use_new_zipfile_serialization=False)
    facts = read_checkpoint(tmp_path / "legacy.ckpt")
    assert (facts.format, facts.writer, facts.optimizers, facts.weight_dtypes) == ("file", "trainer", 1, ("float32",))
    assert resume_findings(tmp_path / "legacy.ckpt", ctx()) == []
    del state["optimizer_states"]
    torch.save(state, tmp_path / "weights.ckpt", _use_new_zipfile_serialization=False)
    assert findings_codes(resume_findings(tmp_path / "weights.ckpt", ctx())) == ["LP804"]


def test_escape_sequences_read_from_a_checkpoint_never_reach_messages(tmp_path: Path) -> None:
    model = nn.Linear(2, 2)
    torch.save({"model": model.state_dict(), "\x1b]0;owned\x07": 1}, tmp_path / "run.ckpt")

    def evil(info: zipfile.ZipInfo, data: bytes) -> bytes:
        return data.replace(b"\nFloatStorage\n", b"\n\x1b[2JFloatStorage\n") if info.filename.endswith(".pkl") else data

    _rezip(tmp_path / "run.ckpt", evil)
    [finding] = resume_findings(tmp_path / "run.ckpt", ctx())  # LP808: fit of a file the Trainer did not save
    assert finding.code == "LP808"
    for text in (finding.message, finding.hint, *read_checkpoint(tmp_path / "run.ckpt").top_level):
        assert "\x1b" not in text, text
        assert "\x07" not in text, text
    assert "\\x1b[2j" in finding.message  # the dtype it read, visible but inert
    broken = raw_zip(tmp_path / "broken.ckpt", b"\x80\x02X\x05\x00\x00\x00\x1b[2J\x07\x93.")
    [finding] = resume_findings(broken, ctx())
    assert finding.code == "LP809"
    assert "\x1b" not in finding.message


def test_the_reader_costs_little_on_a_real_checkpoint(
    tmp_path: Path, work: Work, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = nn.Sequential(*[nn.Linear(2, 2) for _ in range(500)])
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()
    path = trainer_file(tmp_path / "run.ckpt", [optimizer.state_dict()])
    torch.save(
        {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], **LIGHTNING_STATE}, path
    )
    facts = read_checkpoint(path)
    assert (facts.optimizers, facts.optimizer_keys, facts.weight_dtypes) == (1, "ids", ("float32",))
    with zipfile.ZipFile(path) as archive:
        [pickled] = [info for info in archive.infolist() if info.filename.endswith("/data.pkl")]
        data = archive.read(pickled)
        directory = path.stat().st_size - archive.start_dir
    opcodes = sum(1 for _ in pickletools.genops(data))
    assert work.opcodes == opcodes  # each of the pickle's opcodes run once
    assert work.read <= len(data) + directory + 2**16  # the zip's directory and the pickle: no tensor's bytes
    monkeypatch.undo()  # the reader uncounted from here
    # pickletools' walk of the same pickle in pure Python is the reference: about 1.5 times cheaper
    ratio = cpu_seconds(lambda: read_checkpoint(path)) / cpu_seconds(lambda: list(pickletools.genops(data)))
    assert ratio < 6, f"the reader costs {ratio:.1f} times a walk of its pickle's opcodes"


@pytest.mark.distributed
@pytest.mark.parametrize("devices", [1, 2])
@pytest.mark.parametrize("optimizer", ["none", "lookahead", "foreign"])
def test_a_real_resume_of_an_unusual_optimizer_proceeds(tmp_path: Path, optimizer: str, devices: int) -> None:
    """Plain Lightning resumes these (``ddp``, the control); with the presets installed the preset resumes them too,
    on 1 and 2 processes (before: ``KeyError: 'state'`` on every rank, even with ``LIGHTNING_PRESETS_SKIP=all``)."""
    from harness import SCRIPTS_PATH, run_job

    script = Path(SCRIPTS_PATH) / "resume_unusual.py"
    for strategy in ("ddp", "ddp_static_graph"):
        job = run_job(script, "--strategy", strategy, "--optimizer", optimizer, "--devices", str(devices), "--out",
                      str(tmp_path / f"{strategy}.ckpt"), world_size=devices, cwd=tmp_path, timeout=180)  # fmt: skip
        reports = job.reports()
        assert len(reports) == devices, job.describe()
        for report in reports:
            assert report["error"] is None, report
            assert report["epochs"] == 2, report  # resumed after the first epoch, then trained the second
            assert report["step"] == (4 if optimizer != "none" else 0), report  # (no optimizer: no optimizer step)
