"""The compatibility matrix: ``check`` over strategy × accelerator × devices/nodes × precision.

The committed ``docs/matrix.md`` and ``docs/matrix.json`` come from::

    lightning-presets matrix --format markdown --output docs/matrix.md
    lightning-presets matrix --format json --output docs/matrix.json
"""

from __future__ import annotations

import importlib.util
import json
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.namespaces import Kind, constructor
from lightning_presets.tools import check as _check
from lightning_presets.tools import verdict as _verdict
from lightning_presets.tools.check.construct import session
from lightning_presets.tools.check.names import registered_strategies

MATRIX_SCHEMA = "lightning-presets/matrix"
MATRIX_SCHEMA_VERSION = 1
COMMANDS = {
    "markdown": "lightning-presets matrix --format markdown --output docs/matrix.md",
    "json": "lightning-presets matrix --format json --output docs/matrix.json",
}
PRECISIONS = ("32-true", "16-mixed", "bf16-mixed", "16-true", "bf16-true", "64-true")
_SHORT = {"32-true": "32", "16-mixed": "16m", "bf16-mixed": "bf16m", "16-true": "16t", "bf16-true": "bf16t",
          "64-true": "64"}  # fmt: skip
_OPTIONAL = ("deepspeed", "torch_xla", "transformer_engine", "bitsandbytes")


@dataclass(frozen=True, slots=True)
class Topology:
    """One column of the matrix: an accelerator, devices per node, nodes and the simulated node."""

    accelerator: str
    devices: int
    num_nodes: int
    gpus: int
    cluster: str

    @property
    def label(self) -> str:
        nodes = f" × {self.num_nodes} nodes (slurm)" if self.num_nodes > 1 else ""
        return f"{self.accelerator} {self.devices}{nodes}"


TOPOLOGIES = (
    Topology("cpu", 1, 1, 0, "none"),
    Topology("cpu", 2, 1, 0, "none"),
    Topology("cuda", 1, 1, 8, "none"),
    Topology("cuda", 8, 1, 8, "none"),
    Topology("cuda", 8, 4, 8, "slurm"),
)


def environment() -> dict[str, Any]:
    """What the matrix depends on besides the code: versions and which optional packages are installed."""
    from importlib.metadata import version

    return {
        "lightning": version("lightning"),
        "torch": version("torch").split("+")[0],
        "installed": {name: importlib.util.find_spec(name) is not None for name in _OPTIONAL},
        "simulated_gpu": "8 per node, compute capability 9.0, 80 GiB (an H100 node)",
    }


def strategies(mode: str) -> list[str]:
    package = "lightning.pytorch" if mode == "trainer" else "lightning.fabric"
    return ["auto", *sorted(registered_strategies(package))]


def requests(modes: Iterable[Kind] = ("trainer", "fabric")) -> Iterator[_check.CheckRequest]:
    for mode in modes:
        for strategy in strategies(mode):
            for topology in TOPOLOGIES:
                for precision in PRECISIONS:
                    yield _check.CheckRequest(
                        mode=mode,
                        arguments={
                            "accelerator": topology.accelerator,
                            "devices": topology.devices,
                            "num_nodes": topology.num_nodes,
                            "strategy": strategy,
                            "precision": precision,
                        },
                        gpus=topology.gpus,
                        gpu_memory=80 * 2**30 if topology.gpus else None,
                        cluster=topology.cluster,
                    )


def _row(report: _check.CheckReport) -> dict[str, Any]:
    request = report.request
    errors = sorted({f.code for f in report.findings if f.severity == "error"})
    # what every model of the preset must do (source "model") is not about this combination of arguments
    warnings_ = sorted({each.finding.code for each in report.reported
                        if each.finding.severity == "warning" and each.source != "model"})  # fmt: skip
    return {
        "mode": request.mode,
        **{key: request.arguments[key] for key in ("strategy", "accelerator", "devices", "num_nodes", "precision")},
        "cluster": request.cluster,
        "verdict": "rejected" if errors else ("warning" if warnings_ else "valid"),
        "errors": errors,
        "warnings": warnings_,
        "evidence": report.evidence,
        "strategy_class": report.resolved.strategy_class if report.resolved else None,
    }


def compute(
    modes: Iterable[Kind] = ("trainer", "fabric"), progress: Callable[[str, int, int], None] | None = None
) -> tuple[list[dict[str, Any]], float]:
    """Every row of the matrix, and the seconds the checks took (imports excluded).

    ``progress(what, done, total)`` is called every 50 configurations and at the end.
    """
    import lightning.fabric
    import lightning.pytorch  # noqa: F401

    all_requests = list(requests(modes))
    start = time.perf_counter()
    rows = []
    with session():
        for done, request in enumerate(all_requests, 1):
            rows.append(_row(_verdict.run_check(request)))
            if progress is not None and (done % 50 == 0 or done == len(all_requests)):
                progress(f"checking {request.mode} configurations", done, len(all_requests))
    return rows, time.perf_counter() - start


def to_json(rows: list[dict[str, Any]]) -> str:
    data = {
        "schema": MATRIX_SCHEMA,
        "schema_version": MATRIX_SCHEMA_VERSION,
        "command": COMMANDS["json"],
        "environment": environment(),
        "precisions": list(PRECISIONS),
        "topologies": [topology.label for topology in TOPOLOGIES],
        "configurations": "ROWS",
    }
    head = json.dumps(data, indent=1, ensure_ascii=False)
    body = ",\n".join("  " + json.dumps(row, ensure_ascii=False) for row in rows)  # one configuration a line
    return head.replace('"ROWS"', f"[\n{body}\n ]") + "\n"


def _cell(cells: list[dict[str, Any]]) -> str:
    accepted = [
        _SHORT[row["precision"]] + ("⚠" if row["verdict"] == "warning" else "")
        for row in cells
        if row["verdict"] != "rejected"
    ]
    if accepted:
        return " ".join(accepted)
    codes = Counter(code for row in cells for code in row["errors"])
    return "✗ " + " ".join(code for code, _ in codes.most_common(2))


def to_markdown(rows: list[dict[str, Any]]) -> str:
    env = environment()
    installed = ", ".join(f"{name} {'yes' if flag else 'no'}" for name, flag in env["installed"].items())
    lines = [
        "# Compatibility matrix",
        "",
        f"<!-- Generated by `{COMMANDS['markdown']}` (and `{COMMANDS['json']}`); a test fails when it is stale. -->",
        "",
        "Each cell lists the precisions `lightning-presets check` accepts for that strategy, accelerator and",
        "device layout: a real Trainer/Fabric constructed on simulated hardware (evidence level *construction*;",
        "nothing was launched). `⚠` marks a configuration accepted with warnings (not counting the conditions every",
        "model of a preset must meet, which `check` names and `check --model` decides); `✗` lists the codes that",
        "reject every precision there (see `docs/errors.md`; LP700 is Lightning's own error).",
        "",
        f"Precisions: {', '.join(f'`{_SHORT[p]}` = {p}' for p in PRECISIONS)}.",
        f"Environment: lightning {env['lightning']}, torch {env['torch']}; {installed}.",
        f"Simulated GPU node: {env['simulated_gpu']}; 4 nodes use SLURM's variables.",
    ]
    for mode in ("trainer", "fabric"):
        mode_rows = [row for row in rows if row["mode"] == mode]
        if not mode_rows:
            continue
        lines += ["", f"## {constructor(mode)}", "", "| strategy | " + " | ".join(t.label for t in TOPOLOGIES) + " |"]
        lines.append("|---|" + "---|" * len(TOPOLOGIES))
        names = list(dict.fromkeys(row["strategy"] for row in mode_rows))
        for name in names:
            cells = []
            for topology in TOPOLOGIES:
                group = [
                    row for row in mode_rows
                    if row["strategy"] == name and row["accelerator"] == topology.accelerator
                    and row["devices"] == topology.devices and row["num_nodes"] == topology.num_nodes
                ]  # fmt: skip
                cells.append(_cell(group))
            lines.append(f"| `{name}` | " + " | ".join(cells) + " |")
    total = len(rows)
    valid = sum(row["verdict"] != "rejected" for row in rows)
    lines += ["", f"{total} configurations, {valid} accepted, {total - valid} rejected."]
    return "\n".join(lines) + "\n"
