"""The start-up handshake: every rank's fingerprint of the job, gathered over a gloo side group right after the process
group exists and compared before the model's first collective.

A setting that must agree and does not is LP030 on every rank (the same verdict everywhere: every rank compares the
same gathered fingerprints); a difference that is legal but unusual is LP031 on rank 0; the handshake's own failure
(a peer that never came, a bug of ours) is LP032 and the run goes on.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import functools
import hashlib
import json
import os
import re
import socket
import sys
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lightning_presets.core.findings import Finding, report
from lightning_presets.core.ranks import on_nodes
from lightning_presets.guards.runtime.codes import HANDSHAKE_FAILED, RANKS_DIFFER, RANKS_DISAGREE
from lightning_presets.registry import private, variables

PROTOCOL = 2
"""The fingerprint's layout (2: JSON; 1 was a pickle): a rank that sends another is not compared (LP032 says so)."""
TIMEOUT_SECONDS = 60.0
"""How long a rank waits for its peers' fingerprints (they all arrive within milliseconds when every rank came)."""
ARGUMENTS = ("accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm", "sync_batchnorm", "max_steps",
             "max_epochs", "min_steps", "min_epochs", "limit_train_batches", "limit_val_batches",
             "val_check_interval", "check_val_every_n_epoch", "num_sanity_val_steps", "use_distributed_sampler",
             "deterministic", "inference_mode", "barebones", "reload_dataloaders_every_n_epochs")  # fmt: skip
"""Trainer/Fabric arguments that change which collectives a rank runs, or what they sum: they must agree."""
PACKAGES = {
    "torch": "torch",
    "lightning": "lightning",
    "pytorch-lightning": "pytorch_lightning",
    "lightning-fabric": "lightning_fabric",
    "deepspeed": "deepspeed",
    "lightning-presets": "lightning_presets",
}
"""Distribution -> module: the version of each one the job imported (its ``__version__``; DeepSpeed only in the
DeepSpeed presets, which import it): a package the job does not use cannot make its ranks disagree, and a metadata
scan costs milliseconds."""
MUST_AGREE_VARIABLES = frozenset({
    "NCCL_PROTO", "NCCL_ALGO", "NCCL_BUFFSIZE", "NCCL_NVLS_ENABLE", "NCCL_COLLNET_ENABLE", "NCCL_MAX_NCHANNELS",
    "NCCL_MIN_NCHANNELS", "NCCL_NTHREADS", "NCCL_CROSS_NIC", "NCCL_LL_BUFFSIZE", "NCCL_LL128_BUFFSIZE",
})  # fmt: skip
"""NCCL variables that change the wire protocol or the channels: ranks that differ in them hang or corrupt data."""
PER_NODE_VARIABLES = frozenset({
    "NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "NCCL_TOPO_FILE",
    "NCCL_TOPO_DUMP_FILE", "NCCL_SOCKET_FAMILY", "GLOO_SOCKET_IFNAME", "GLOO_DEVICE_TRANSPORT", "NCCL_HOSTID",
})  # fmt: skip
"""Variables that legitimately differ from node to node (interfaces, adapters, logging): never compared."""
VARIABLE_PREFIXES = ("NCCL_", "GLOO_", "MASTER_")


@dataclass(frozen=True, slots=True)
class Fingerprint:
    rank: int
    host: str
    fields: Mapping[str, tuple[str, str]]
    """Field name -> (``error`` or ``warning``: how a difference is reported, the value as text)."""


_ADDRESS = re.compile(r" (?:object )?at 0x[0-9a-fA-F]+")
"""The memory address in the default repr of a function or object (``parallelize_fn=<function f at 0x7f...>``):
it differs from process to process, so it is no part of the value the ranks compare."""
_DEPTH = 8
"""How deep :func:`canonical` follows containers and objects' attributes (a cycle or a deep object ends there)."""


def _qualified(value: Any) -> str:
    return f"{getattr(value, '__module__', None) or '?'}.{getattr(value, '__qualname__', None) or value.__name__}"


def canonical(value: Any, depth: int = _DEPTH) -> str:
    """``value`` as text that is the same in every process that holds an equal value: what the ranks compare.

    ``repr`` is not: a set's (and a frozenset's) order follows the hashes of its members, which differ between
    processes (strings' are randomised per interpreter, ``PYTHONHASHSEED``; classes' and functions' are their
    addresses), and a function's or an object's default repr holds its address. Here sets are sorted, recursively
    (inside ``functools.partial``, dicts, lists, tuples and objects' attributes); classes, functions and methods
    are named by module and qualified name; any other object by its repr without addresses, in which the sets it
    holds are printed sorted (never its other attributes: an object may hold what differs per rank, a device, a
    mesh, a counter)."""
    if depth <= 0:
        return _ADDRESS.sub("", repr(value))
    inner = depth - 1
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return repr(value)
    if isinstance(value, enum.Enum):
        return f"{_qualified(type(value))}.{value.name}"
    if isinstance(value, (set, frozenset)):
        return f"{type(value).__name__}({{{', '.join(sorted(canonical(item, inner) for item in value))}}})"
    if isinstance(value, Mapping):
        items = sorted(f"{canonical(key, inner)}: {canonical(item, inner)}" for key, item in value.items())
        return f"{{{', '.join(items)}}}"
    if isinstance(value, (list, tuple)):
        text = ", ".join(canonical(item, inner) for item in value)
        return f"[{text}]" if isinstance(value, list) else f"({text})"
    if isinstance(value, functools.partial):
        arguments = [canonical(value.func, inner), *(canonical(item, inner) for item in value.args)]
        arguments += sorted(f"{key}={canonical(item, inner)}" for key, item in value.keywords.items())
        return f"functools.partial({', '.join(arguments)})"
    if isinstance(value, type):
        return _qualified(value)
    owner = getattr(value, "__self__", None)
    if isinstance(value, (types.MethodType, types.BuiltinMethodType)) and not isinstance(
        owner, (type(None), types.ModuleType)
    ):
        return f"{canonical(owner, inner)}.{value.__name__}"  # a bound method: its object's form and its name
    if isinstance(value, (types.FunctionType, types.BuiltinFunctionType, types.MethodDescriptorType)):
        return _qualified(value)
    if dataclasses.is_dataclass(value):
        fields = (f"{each.name}={canonical(getattr(value, each.name, None), inner)}" for each in
                  dataclasses.fields(value))  # fmt: skip
        return f"{_qualified(type(value))}({', '.join(fields)})"
    text = repr(value)
    attributes = getattr(value, "__dict__", None)
    for attribute in attributes.values() if isinstance(attributes, dict) else ():
        if isinstance(attribute, (set, frozenset)):  # a repr of its own that prints a set in hash order (torch's
            text = text.replace(repr(attribute), canonical(attribute, inner))  # ModuleWrapPolicy does): sorted
    return _ADDRESS.sub("", text)


def _digest(value: Any) -> str:
    text = canonical({str(key): item for key, item in dict(value).items()})
    return text if len(text) <= 120 else "sha1:" + hashlib.sha1(text.encode()).hexdigest()[:12]


def _version(module_name: str) -> str | None:
    version = getattr(sys.modules.get(module_name), "__version__", None)
    return None if version is None else str(version)


_VERSIONS: dict[str, str] = {}


def versions() -> Mapping[str, str]:
    """The packages' versions, read once per process."""
    if not _VERSIONS:
        found = {name: _version(module) for name, module in PACKAGES.items()}
        _VERSIONS.update({name: version for name, version in found.items() if version is not None})
    return _VERSIONS


def _gpu(strategy: Any) -> dict[str, str]:
    """The GPU of this rank, from torch only when this process has a CUDA context already (Lightning's accelerator
    set the device before the process group): never a context of our own."""
    torch: Any = sys.modules.get("torch")
    device = getattr(strategy, "root_device", None)
    if torch is None or getattr(device, "type", None) != "cuda" or not torch.cuda.is_initialized():
        return {}
    properties = torch.cuda.get_device_properties(device)
    return {
        "GPU": str(properties.name),
        "GPU capability": f"{properties.major}.{properties.minor}",
        "GPU memory": f"{int(properties.total_memory) // 2**20} MiB",
    }


def _shm() -> str:
    try:
        stat = os.statvfs("/dev/shm")
    except OSError:
        return "absent"
    return f"{stat.f_blocks * stat.f_frsize // 2**20} MiB"


def _resumed_from() -> str | None:
    """The ``ckpt_path`` that ``Trainer.fit``/``validate``/... is about to load (``Trainer._run``'s argument, on the
    stack above ``setup_environment``); ``None`` when there is none (Fabric loads later, in ``load``)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == private.TRAINER_RUN and "ckpt_path" in frame.f_code.co_varnames:
            path = frame.f_locals.get("ckpt_path")
            return None if path is None else str(path)
        frame = frame.f_back  # type: ignore[assignment]  # typeshed: f_back is FrameType | None
    return None


def _checkpoint(path: str) -> tuple[str, str]:
    """Whether this node sees the checkpoint (must agree: a rank that does not fails to load while the others wait),
    and what it sees (should agree: another file of the same name is a node-local copy)."""
    if "://" in path:  # a URL (s3://, gs://) names the same object for every node
        return "remote", "remote"
    target = Path(path)
    if not target.exists():
        return "absent", "absent"
    if target.is_dir():
        entries = sorted(target.iterdir())  # the top level only: a sharded checkpoint holds thousands of files
        size = sum(entry.stat().st_size for entry in entries if entry.is_file())
        return "present", f"a folder of {len(entries)} entries, {size} bytes at its top level"
    stat = target.stat()
    return "present", f"a file of {stat.st_size} bytes, modified at {int(stat.st_mtime)}"


def fingerprint(strategy: Any, rank: int, environ: Mapping[str, str] | None = None) -> Fingerprint:
    """What this rank knows of the job; see the module's docstring."""
    import torch

    env = os.environ if environ is None else environ
    context = getattr(strategy, "_lp_context", None)
    preset = type(strategy)._lp_preset
    fields: dict[str, tuple[str, str]] = {}

    def must(name: str, value: Any) -> None:
        fields[name] = ("error", str(value))

    def should(name: str, value: Any) -> None:
        fields[name] = ("warning", str(value))

    must("preset", preset.name)
    options = dict(getattr(strategy, "_lp_options", {}) or {})
    resolved = dict(getattr(context, "resolved", {}) or {})
    must("preset arguments", _digest({**options, **{f"resolved {k}": v for k, v in resolved.items()}}))
    must("strategy class", type(strategy).__mro__[-2].__name__ if len(type(strategy).__mro__) > 1 else "?")
    precision = getattr(strategy, "precision_plugin", None) or getattr(strategy, "precision", None)
    must("precision", getattr(precision, "precision", "?"))
    must("precision plugin", type(precision).__name__)
    must("devices per node", getattr(strategy, "num_processes", "?"))
    must("num_nodes", getattr(strategy, "num_nodes", "?"))
    must("accelerator", type(getattr(strategy, "accelerator", None)).__name__)
    must("process group backend", private.process_group_backend_of(strategy))
    arguments = dict(getattr(context, "arguments", {}) or {})
    for name in ARGUMENTS:
        if name in arguments:
            must(name, canonical(arguments[name]))
    for name, version in versions().items():
        must(name, version)
    must("torch CUDA", torch.version.cuda)
    build = getattr(context, "torch_build", None) or {}
    must("torch NCCL", build.get("nccl"))
    for name, value in _gpu(strategy).items():
        should(name, value)
    should("/dev/shm", _shm())
    resumed = _resumed_from()
    if resumed is not None:
        present, seen = _checkpoint(resumed)
        must("checkpoint", present)
        should("checkpoint path", resumed)
        should("checkpoint as seen", seen)
    for name in sorted(env):
        if name.startswith(VARIABLE_PREFIXES) and name not in PER_NODE_VARIABLES:
            (must if name in MUST_AGREE_VARIABLES else should)(f"${name}", env[name])
    return Fingerprint(rank=rank, host=socket.gethostname(), fields=fields)


def _payload(mine: Fingerprint) -> dict[str, Any]:
    return {"protocol": PROTOCOL, "rank": mine.rank, "host": mine.host, "fields": dict(mine.fields)}


def encode(mine: Fingerprint) -> bytes:
    """What this rank sends: its fingerprint as JSON (strings in a dict: nothing a peer could make us execute)."""
    return json.dumps(_payload(mine), sort_keys=True).encode("utf-8")


def decode(data: bytes) -> dict[str, Any] | None:
    """A peer's fingerprint, or ``None`` when ``data`` is not one of this layout. Only JSON is read, never a pickle:
    what a peer sends is data, and nothing in it is executed."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(value, dict) or value.get("protocol") != PROTOCOL:
        return None
    fields = value.get("fields")
    if not isinstance(value.get("rank"), int) or not isinstance(value.get("host"), str) or not isinstance(fields, dict):
        return None
    for entry in fields.values():
        if not (isinstance(entry, list) and len(entry) == 2 and all(isinstance(part, str) for part in entry)):
            return None
    return value


def compare(gathered: Sequence[Mapping[str, Any]]) -> list[Finding]:
    """LP030 for the fields that must agree and do not, LP031 for those that should; at most one finding of each."""
    hosts = {int(each["rank"]): str(each["host"]) for each in gathered}
    names = sorted({name for each in gathered for name in each["fields"]})
    lines: dict[str, list[str]] = {"error": [], "warning": []}
    for name in names:
        values: dict[str, list[int]] = {}
        severity = "warning"
        for each in gathered:
            entry = each["fields"].get(name)
            value = "(not set)" if name.startswith("$") else "(not reported)"
            if entry is not None:
                severity = "error" if entry[0] == "error" else severity
                value = str(entry[1])
            values.setdefault(value, []).append(int(each["rank"]))
        if len(values) > 1:
            ordered = sorted(values.items(), key=lambda item: min(item[1]))
            described = " but ".join(f"{value!r} on {on_nodes(ranks, hosts)}" for value, ranks in ordered)
            lines[severity].append(f"{name}: {described}")
    findings = []
    world = len(gathered)
    if lines["error"]:
        findings.append(RANKS_DISAGREE.finding(
            f"the {world} ranks of this job disagree on {len(lines['error'])} setting(s) that must agree: "
            + "; ".join(lines["error"]),
            "start every rank from the same script, arguments, packages and environment: a value read from the "
            "rank's own environment (LOCAL_RANK, the host) or a node with other packages installed leads here; "
            f"{variables.HANDSHAKE_VARIABLE}=0 switches this check off",
        ))  # fmt: skip
    if lines["warning"]:
        findings.append(RANKS_DIFFER.finding(
            f"the {world} ranks of this job differ in {len(lines['warning'])} setting(s): "
            + "; ".join(lines["warning"]),
            "legal, but usually a node set up differently from the others: give every node the same GPUs, /dev/shm "
            "and variables",
        ))  # fmt: skip
    return findings


def _rank(dist: Any) -> int:
    return int(dist.get_rank())


def gather(mine: Fingerprint) -> list[dict[str, Any]]:
    """Every rank's fingerprint, over a new gloo group (the main group may be NCCL, which moves no Python objects
    without a CUDA tensor), with a short timeout; the group is destroyed again.

    The bytes travel as ``all_gather_object`` sends its pickles (the sizes, then the bytes padded to the longest), but
    they are JSON (:func:`encode`, :func:`decode`), never a pickle; and every tensor the group's worker threads hold
    stays referenced here until the group is gone: a worker that drops
    the last reference to a tensor Python already let go of needs the GIL, and on torch 2.7 the group's destructor
    joins its workers while holding it, so the rank hung there for good."""
    import torch
    import torch.distributed as dist

    world = dist.get_world_size()
    data = encode(mine)
    size = torch.tensor([len(data)], dtype=torch.long)
    sizes = [torch.zeros(1, dtype=torch.long) for _ in range(world)]
    padded: Any = None
    received: list[Any] = []
    group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=TIMEOUT_SECONDS))
    try:
        dist.all_gather(sizes, size, group=group)
        longest = max(int(each.item()) for each in sizes)
        padded = torch.zeros(longest, dtype=torch.uint8)
        padded[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
        received = [torch.empty(longest, dtype=torch.uint8) for _ in range(world)]
        dist.all_gather(received, padded, group=group)
    finally:
        dist.destroy_process_group(group)
        del group  # the last reference: the destructor joins the workers while `sizes` and `received` still live
    gathered = [
        decode(bytes(tensor[: int(length.item())].tolist())) for tensor, length in zip(received, sizes, strict=True)
    ]
    return [each for each in gathered if each is not None]


def handshake(strategy: Any) -> None:
    """Run the handshake on this rank: raises ``PresetConfigError`` (LP030) when the ranks disagree."""
    import torch.distributed as dist

    try:
        rank = _rank(dist)
        gathered = gather(fingerprint(strategy, rank))
        findings = compare(gathered)
        if len(gathered) != dist.get_world_size():
            findings.append(HANDSHAKE_FAILED.finding(
                f"{dist.get_world_size() - len(gathered)} rank(s) sent a fingerprint this version cannot read: they "
                "were not compared", "install the same lightning-presets on every node",
            ))  # fmt: skip
    except Exception as error:  # ours, or a peer that never came: the run goes on as plain Lightning's would
        report([HANDSHAKE_FAILED.finding(
            f"the start-up handshake failed ({type(error).__name__}: {str(error).strip()[:300]}); the ranks were not "
            "compared and the run goes on", f"if a rank never reached it, look at that rank's log; "
            f"{variables.HANDSHAKE_VARIABLE}=0 switches the handshake off",
        )])  # fmt: skip
        return
    errors = [finding for finding in findings if finding.severity == "error"]
    if errors:
        report(errors)
    if rank == 0:
        report(findings)
