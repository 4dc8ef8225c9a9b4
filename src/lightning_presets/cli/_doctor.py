"""``lightning-presets doctor``: explain this environment without starting anything or creating a CUDA context."""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Group
from rich.text import Text

from lightning_presets.cli._output import emit, emit_json, fields, findings, heading, table, verdict
from lightning_presets.core.environment import AUTOLOAD_VARIABLE as _VARIABLE
from lightning_presets.tools import doctor as _doctor


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--import", dest="import_optional", action="store_true",
                        help="import each installed optional dependency to find broken or incompatible ones "
                        "(their own import may touch CUDA); by default they are only looked up")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--strict", action="store_true", help="warnings make the exit code 1 too")


def _yes(value: bool) -> str:
    return "yes" if value else "no"


def _torch(info: dict[str, Any]) -> str:
    if not info["installed"]:
        return "not installed"
    devices = f", {info['cuda_devices']} CUDA device(s) visible" if info["cuda_build"] else ""
    return f"{info['version']} ({info['build']} build{devices}; CUDA context created: {_yes(info['cuda_initialized'])})"


def _gpus(info: dict[str, Any]) -> str:
    """``8 × NVIDIA H100 80GB HBM3 (79.6 GiB each); plan --gpu-type H100-SXM``."""
    if not info["read"]:
        return "not read (no NVIDIA driver library, libnvidia-ml.so.1, or it did not start)"
    if not info["count"]:
        return "none visible (CUDA_VISIBLE_DEVICES hides them, or the driver lists none)"
    counts: dict[str, int] = {}
    for name in info["names"]:
        counts[name] = counts.get(name, 0) + 1
    listed = ", ".join(f"{count} × {name}" for name, count in counts.items()) or f"{info['count']} unnamed"
    memory = f" (smallest {info['memory_bytes'] / 2**30:.1f} GiB)" if info["memory_bytes"] else ""
    kind = info["gpu_type"]
    plan = f"plan --gpu-type {kind}" if kind else "not one type of plan's table: pass plan --gpu-memory"
    return f"{listed}{memory}; {plan}"


def _machine(info: dict[str, Any]) -> list[tuple[str, str | Text]]:
    """The machine against the torch build: the build, the driver, then each comparison's verdict and fix."""
    if not info["compared"]:
        return [("machine vs build", f"not compared ({info['reason']})")]
    build = info["build"]
    arches = " ".join(build["arch_list"]) or "-"
    kind = f"CUDA {build['cuda']}, kernels for {arches}" if build["cuda"] else "CPU-only"
    rows: list[tuple[str, str | Text]] = [("torch build", f"{build['version']} ({kind}; NCCL: {_yes(build['nccl'])})")]
    if not any(each["check"] == "driver" for each in info["verdicts"]):
        rows.append(
            ("driver", f"supports CUDA {info['driver_cuda']}" if info["driver_cuda"] else "CUDA version not read")
        )
    if "reason" in info:
        rows.append(("GPUs vs build", f"nothing to compare: {info['reason']}"))
    for each in info["verdicts"]:
        fix = f"; fix: {each['fix']}" if each["fix"] and each["status"] != "ok" else ""
        subject, text = each["subject"], each["message"]
        if text.startswith(subject) and ": " in text:  # "GPUs 0-7 (NVIDIA B200): compute capability ..."
            subject, text = text.split(": ", 1)
        rows.append((subject, f"{each['status'].upper()}: {text}{fix}"))
    return rows


def _registry(info: dict[str, Any]) -> str:
    if not info["importable"]:
        return f"{info['module']}: not importable" + (f" ({info['error']})" if "error" in info else "")
    missing = f", MISSING {', '.join(info['missing'])}" if info["missing"] else ""
    return f"{info['module']}: {len(info['registered'])} preset(s) registered{missing}"


def _lightning_package(name: str, package: dict[str, Any], supported: str) -> str:
    if package["version"] is not None:
        verdict = "supported" if package["supported"] else "NOT supported"
        return f"{package['version']} ({verdict}: {supported})"
    carriers = [f"{each['distribution']} {each['version'] or ''}".rstrip() for each in package.get("provided_by", [])]
    if carriers:
        module = name.replace("-", "_")
        return f"no distribution of its own; the {module} package comes with {', '.join(carriers)}"
    return "not installed"


def render(report: _doctor.Report, strict: bool) -> Group:
    s = report.sections
    created = s["torch"].get("cuda_initialized_at_end", False)
    context = "a CUDA context exists (an optional dependency's import created it)" if created else (
        "no CUDA context was created")  # fmt: skip
    versions: list[tuple[str, str | Text]] = [
        ("python", f"{s['python']['version']} ({s['python']['executable']})"),
        ("torch", _torch(s["torch"])),
        ("GPUs (NVML)", _gpus(s["gpus"])),
    ]
    for name, package in s["lightning"]["packages"].items():
        versions.append((name, _lightning_package(name, package, s["lightning"]["supported"])))
    auto = s["autoload"]
    trust = "; ".join(f"{key}={value if value is not None else 'unset'}" for key, value in s["trust"].items())
    catalog = s["catalog"]
    setup: list[tuple[str, str | Text]] = [
        ("autoload", f"enabled: {_yes(auto['enabled'])} ({_VARIABLE}={auto['variable'] or 'unset'}); "
                     f"hook importable: {_yes(auto['hook_importable'])}; "
                     f"finder installed: {_yes(auto['finder_installed'])}"),
        ("autoload .pth", auto["pth"] or "not found in the site directories"),
        *(("registry", _registry(info)) for info in s["registries"].values()),
        ("trust", trust),
        ("catalog", f"{catalog['usable']} usable preset(s); {len(catalog['problems'])} not usable"),
        *(("", f"{row['kind']} {row['name']} from {row['source']}: {row['status']}"
               + (f" ({'; '.join(row['install'])})" if row.get("install") else "")) for row in catalog["problems"]),
    ]  # fmt: skip
    dependencies = table(("optional dependency", "status", "version", "used by"), [
        (module, row["status"] + (f" ({row['install']})" if "install" in row else ""), row["version"] or "-",
         ", ".join(row["used_by"]) or "-")
        for module, row in s["optional_dependencies"].items()
    ], wrap=(3,))  # fmt: skip
    cluster = s["cluster"]
    visible = cluster["cuda_visible_devices"]
    shown = "unset" if visible is None else repr(visible)
    machine = _machine(s["machine"])
    where: list[tuple[str, str | Text]] = [("cluster", f"{cluster['detected']}; CUDA_VISIBLE_DEVICES={shown}")]
    where += [("", f"{key}={value}") for key, value in cluster["variables"].items() if key != "CUDA_VISIBLE_DEVICES"]
    errors = sum(1 for f in report.findings if f.severity == "error")
    rejected = report.rejected(strict)
    summary = (
        f"{'PROBLEMS' if rejected else 'OK'}: {errors} error(s), {len(report.findings) - errors} warning(s)"
        f"{' (--strict)' if strict else ''}; exit {report.exit_code(strict)}"
    )
    return Group(
        heading(f"lightning-presets doctor (nothing was launched; {context})"),
        "",
        fields(versions, indent=0),
        "",
        fields(machine, indent=0),
        "",
        fields(setup, indent=0),
        "",
        dependencies,
        "",
        fields(where, indent=0),
        "",
        findings(report.findings),
        "",
        "a run that failed anyway: `lightning-presets explain PATH` (its SLURM output, torchrun's --log-dir or a "
        "pasted traceback with `-`) names the first failure's cause and fix",
        "",
        verdict(summary, ok=not rejected),
    )


def run(args: argparse.Namespace) -> int:
    report = _doctor.diagnose(import_optional=args.import_optional)
    if args.json:
        emit_json(report.as_dict(args.strict))
    else:
        emit(render(report, args.strict))
    return report.exit_code(args.strict)
