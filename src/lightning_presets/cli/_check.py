"""``lightning-presets check``: validate a job for a target cluster without launching anything."""

from __future__ import annotations

import argparse
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from lightning_presets.cli._output import emit, emit_json, fields, findings, heading, indented, verdict
from lightning_presets.tools import check as _check
from lightning_presets.tools import verdict as _verdict
from lightning_presets.tools.check.flags import flag_parameters
from lightning_presets.tools.simulation import CLUSTERS

_UNITS = {"b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}  # fmt: skip
MAX_MEMORY = 2**60
"""The largest memory size accepted (1 EiB): far above any device or node, far below what overflows."""
_TYPED_FLAGS = ("accelerator", "devices", "num_nodes", "strategy", "precision", "accumulate_grad_batches")
"""The job's flags with a type or help of their own; every other Trainer argument is a flag too (``trainer_flags``)."""


def memory(text: str) -> int:
    """``80GiB``, ``80GB``, ``80G`` or ``85899345920B``; a number without a unit is refused (bytes or GiB?)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not match or match.group(2).lower() not in {*_UNITS, ""}:
        raise argparse.ArgumentTypeError(f"{text!r} is not a memory size such as 80GiB, 80GB or 85899345920B")
    number, unit = match.group(1), match.group(2).lower()
    if not unit:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no unit: write {number}GiB or {number}GB ({number}B if you mean bytes)"
        )
    value = Decimal(number) * _UNITS[unit]
    if not 1 <= value <= MAX_MEMORY:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1 byte and at most 1 EiB")
    return int(value)


def capability(text: str) -> tuple[int, int]:
    """``9.0`` -> ``(9, 0)``."""
    match = re.fullmatch(r"(\d+)\.(\d+)", text.strip())
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not a compute capability such as 8.0 or 9.0")
    return int(match.group(1)), int(match.group(2))


def key_value(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key.strip() or "\0" in text:
        raise argparse.ArgumentTypeError(f"{text!r} is not KEY=VALUE (without NUL characters)")
    return key.strip(), value


def non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 0 or more")
    return value


def positive(text: str) -> int:
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value <= 86400:
        raise argparse.ArgumentTypeError(f"{text!r} must be more than 0 and at most 86400 seconds")
    return value


def devices(text: str) -> Any:
    """Like LightningCLI: ``8`` is an int, ``-1``/``auto``/``0,1`` stay as Lightning reads them."""
    stripped = text.strip()
    return int(stripped) if re.fullmatch(r"-?\d+", stripped) else stripped


def add_arguments(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("the job (as in your script or LightningCLI config)")
    job.add_argument(
        "--mode", choices=("trainer", "fabric"), default="trainer", help="Trainer or Fabric (default trainer)"
    )
    job.add_argument("--accelerator", help="cpu, cuda, gpu, mps, tpu or auto")
    job.add_argument("--devices", type=devices, help="devices per node: N, -1, auto or a list such as 0,1")
    job.add_argument("--num-nodes", dest="num_nodes", type=int, help="number of nodes")
    job.add_argument("--strategy", help="any registered name: Lightning's (ddp, fsdp, ...) or a preset")
    job.add_argument("--precision", help="32-true, bf16-mixed, 16-mixed, bf16-true, 16-true, 64-true, ...")
    job.add_argument("--accumulate-grad-batches", dest="accumulate_grad_batches", type=positive, metavar="N",
                     help="Trainer(accumulate_grad_batches=N); DeepSpeed's batch arithmetic depends on it")  # fmt: skip
    trainer = parser.add_argument_group(
        "every other Trainer argument, read from the installed Lightning (values as Python literals or JSON)"
    )
    for name in flag_parameters():
        if name not in _TYPED_FLAGS:
            trainer.add_argument(f"--{name.replace('_', '-')}", dest=name, type=_check.parse_value, metavar="VALUE")
    job.add_argument("--plugin", dest="plugins", action="append", default=[], metavar="NAME",
                     help="a precision preset (repeatable)")  # fmt: skip
    job.add_argument("--set", dest="overrides", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                     help="a strategy argument override, e.g. --set cpu_offload=False (repeatable)")  # fmt: skip
    job.add_argument(
        "--resume-from",
        dest="resume_from",
        metavar="PATH",
        help="a checkpoint the job resumes from: a preset's resume rules check it; with --model, the rehearsal "
        "loads it into the model as fit(ckpt_path=...) does (LP745 when it does not load)",
    )
    job.add_argument("--config", metavar="FILE", help="a LightningCLI YAML file: its trainer: section is used")
    target = parser.add_argument_group("the simulated target (nothing is launched)")
    target.add_argument("--gpus", type=non_negative, default=0, help="GPUs per node (default 0: a CPU node)")
    target.add_argument("--gpu-capability", dest="gpu_capability", type=capability, default=(9, 0),
                        metavar="X.Y", help="compute capability (default 9.0)")  # fmt: skip
    target.add_argument(
        "--gpu-memory", dest="gpu_memory", type=memory, metavar="SIZE", help="memory per GPU, e.g. 80GiB"
    )
    target.add_argument("--driver-cuda", dest="driver_cuda", metavar="X.Y",
                        help="the target driver's CUDA version (nvidia-smi's 'CUDA Version'), against the torch "
                        "build (LP122)")  # fmt: skip
    target.add_argument("--torch-cuda", dest="torch_cuda", metavar="X.Y",
                        help="the target's torch build (torch.version.cuda there; its architectures from torch's own "
                        "table of its release's wheels); default: this torch, when it is a CUDA build")  # fmt: skip
    target.add_argument("--torch-arch-list", dest="torch_arch_list", metavar="LIST",
                        help="the target torch's torch.cuda.get_arch_list(), e.g. sm_80,sm_90,compute_90")  # fmt: skip
    target.add_argument("--torch-without-nccl", dest="torch_without_nccl", action="store_true",
                        help="the target's torch was built without NCCL (LP123)")  # fmt: skip
    target.add_argument("--cluster", choices=CLUSTERS, default="none",
                        help="the launcher whose environment variables the job sees (default none)")  # fmt: skip
    target.add_argument("--env", action="append", default=[], type=key_value, metavar="KEY=VALUE",
                        help="an environment variable of the job, applied last (repeatable)")  # fmt: skip
    target.add_argument("--interactive", action="store_true", help="simulate a notebook / interactive session")
    target.add_argument("--model", metavar="MODULE:FACTORY",
                        help="plan this model's memory per GPU under the job's preset (traced, as `lightning-presets "
                        "plan --model`) and compare it with --gpu-memory (LP730, LP731)")  # fmt: skip
    target.add_argument("--datamodule", metavar="MODULE:FACTORY",
                        help="with --model: the LightningDataModule whose train_dataloader() (and val_dataloader()) "
                        "gives the rehearsal's first batches, as fit(model, datamodule=...) takes them")  # fmt: skip
    target.add_argument("--timeout", type=_seconds, default=None, metavar="SECONDS",
                        help="with --model: stop building and rehearsing the model after this long (default "
                        "300); a factory that never returns is then an error, not a hang")  # fmt: skip
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print the report as JSON (schema in docs/check-schema.json)")
    out.add_argument(
        "--strict",
        action="store_true",
        help="warnings reject the configuration too (not the model's conditions, which --model decides)",
    )


def request_from(args: argparse.Namespace) -> _check.CheckRequest:
    """The engine's request from parsed flags: the config file's trainer section under the flags."""
    from lightning_presets.tools.check.config import check_values, trainer_section

    arguments: dict[str, Any] = {}
    notes: list[str] = []
    if args.config:
        arguments, notes = trainer_section(args.config)
    for key in (*_TYPED_FLAGS, *flag_parameters()):
        value = getattr(args, key, None)
        if value is not None:
            arguments[key] = value
    if args.mode == "fabric":
        ignored = sorted(key for key in arguments if key not in _check.FABRIC_KEYS)
        if ignored:
            notes.append(f"Fabric takes no {', '.join(ignored)}; left out")
        arguments = {key: value for key, value in arguments.items() if key in _check.FABRIC_KEYS}
    if getattr(args, "datamodule", None) and not args.model:
        from lightning_presets.core.findings import UsageError

        raise UsageError(f"--datamodule {args.datamodule} gives the batches of the model that --model names: give "
                         "--model MODULE:FACTORY too")  # fmt: skip
    overrides = {key: _check.parse_value(value) for key, value in args.overrides}
    for flag, pairs in (("--set", overrides.items()), ("--env", ((k, _check.parse_value(v)) for k, v in args.env))):
        for key, value in pairs:  # what the check reads as literals, bounded as a config file is
            check_values(f"{flag} {key}", value)
    request = _check.CheckRequest(
        mode=args.mode,
        arguments=arguments,
        plugins=tuple(args.plugins),
        overrides=overrides,
        gpus=args.gpus,
        gpu_capability=args.gpu_capability,
        gpu_memory=args.gpu_memory,
        cluster=args.cluster,
        env=dict(args.env),
        interactive=args.interactive,
        notes=tuple(notes),
        model=args.model,
        datamodule=getattr(args, "datamodule", None),
        resume_from=args.resume_from,
    )
    return request


def _simulated_text(simulated: dict[str, Any]) -> str:
    gpus = simulated["gpus_per_node"]
    node = (
        "a CPU-only node"
        if not gpus
        else (
            f"{gpus} GPU(s) per node of compute capability {simulated['gpu_capability']}"
            + (f", {simulated['gpu_memory_bytes'] / 2**30:g} GiB each" if simulated["gpu_memory_bytes"] else "")
            + (f" ({simulated['gpus_visible']} visible)" if simulated["gpus_visible"] != gpus else "")
        )
    )
    cluster = simulated["cluster"]
    extra = " (interactive session)" if simulated["interactive"] else ""
    return f"{node}; cluster: {cluster}{extra}"


_EVIDENCE = {
    "import": "import: the packages import; the arguments were not checked",
    "syntax": "syntax: names and arguments checked; nothing was constructed",
    "construction": "construction: a real {constructor} was built on the simulated hardware; nothing was launched",
}
_REJECTED_AT_CONSTRUCTION = (
    "construction: building a real {constructor} on the simulated hardware was attempted and it rejected the "
    "configuration; nothing was launched"
)


def _process_seconds() -> float | None:
    """Wall seconds since this process started (Linux: its start time in ``/proc``), else ``None``."""
    import os

    try:
        ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def _waited() -> str:
    """What the user waited, beside the check's own time: the wall time since the command started."""
    seconds = _process_seconds()
    if seconds is None:
        return " (the check's own time: imports of torch and Lightning excluded)"
    return (f" ({seconds:.1f} s of wall time since the command started; the check's own time excludes the "
            "interpreter's start and the imports of torch and Lightning)")  # fmt: skip


def render(report: _check.CheckReport, strict: bool) -> Group:
    data = report.as_dict(strict)
    constructed = report.evidence != "construction" or report.constructed
    template = _EVIDENCE[report.evidence] if constructed else _REJECTED_AT_CONSTRUCTION
    evidence = template.format(constructor=report.request.constructor)
    about = [("simulated", _simulated_text(data["evidence"]["simulated"])), ("evidence", evidence)]
    about += [("note", note) for note in report.request.notes]
    parts: list[RenderableType] = [
        Text.assemble(("lightning-presets check: ", "bold"), data["call"]),
        fields(about),
        "",
    ]
    if report.resolved is not None:
        r = report.resolved
        mesh = " × ".join(f"{name}={size}" for name, size in r.device_mesh.items())
        rows = [
            ("strategy", r.strategy_class + (f" (preset {r.preset!r})" if r.preset else "")),
            ("accelerator", r.accelerator),
            ("precision", f"{r.precision} ({r.precision_plugin})"),
            ("world size", f"{r.world_size} = {r.devices_per_node} device(s) × {r.num_nodes} node(s)"),
            ("device mesh", mesh),
            ("cluster env", r.cluster_environment),
            ("launcher", r.launcher or "none"),
        ]
        parts += [heading("resolved"), fields(rows), ""]
    parts.append(findings(report.findings))
    if report.lightning_warnings:
        parts += ["", heading("Lightning warned:")]
        parts += [indented(Text(f"- {text}")) for text in report.lightning_warnings]
    errors = sum(1 for f in report.findings if f.severity == "error")
    warnings_ = len(report.findings) - errors
    rejected = report.rejected(strict)
    summary = (
        f"{'REJECTED' if rejected else 'VALID'}: {errors} error(s), {warnings_} warning(s)"
        f"{' (--strict)' if strict else ''}; exit {report.exit_code(strict)}; checked in {report.elapsed_ms:.1f} ms"
        f"{_waited()}"
    )
    parts += ["", verdict(summary, ok=not rejected)]
    return Group(*parts)


def run(args: argparse.Namespace) -> int:
    from lightning_presets.inspection.machine import simulating_target
    from lightning_presets.tools.check.machine import target_from

    machine = target_from(args.driver_cuda, args.torch_cuda, args.torch_arch_list, args.torch_without_nccl)
    with simulating_target(machine):
        report = _verdict.run_check(request_from(args), getattr(args, "timeout", None))
    if args.json:
        emit_json(report.as_dict(args.strict))
    else:
        emit(render(report, args.strict))
    return report.exit_code(args.strict)
