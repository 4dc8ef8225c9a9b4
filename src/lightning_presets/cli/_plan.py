"""``lightning-presets plan``: which preset fits a model, by an arithmetic estimate of per-GPU memory."""

from __future__ import annotations

import argparse
import sys

from lightning_presets.cli._check import memory
from lightning_presets.cli._output import emit_json, table
from lightning_presets.core.findings import UsageError
from lightning_presets.tools import plan as _plan

_EVIDENCE = (
    "evidence: none. An ESTIMATE of model states (weights, grads, optimizer) per GPU by arithmetic; activations "
    "are not modelled, a fixed {headroom:.0%} of each GPU is set aside for them and working memory."
)


def _count(text: str) -> int:
    try:
        return _plan.parse_count(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be 1 or more")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction such as 0.3 or 30%") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0 and below 1")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--params", type=_count, metavar="COUNT", help="parameter count: 7B, 350M, 7000000000")
    model.add_argument("--model", metavar="MODULE:ATTR",
                       help="count the parameters of an nn.Module or a factory (built on the meta device)")  # fmt: skip
    parser.add_argument("--gpus", type=_positive, required=True, help="GPUs per node")
    parser.add_argument("--num-nodes", dest="num_nodes", type=_positive, default=1, help="nodes (default 1)")
    parser.add_argument("--gpu-memory", dest="gpu_memory", type=memory, default=80 * _plan.GIB, metavar="SIZE",
                        help="memory per GPU, e.g. 80GiB (default 80GiB)")  # fmt: skip
    parser.add_argument("--precision", choices=_plan.PRECISIONS, default="bf16-mixed",
                        help="Trainer precision (default bf16-mixed)")  # fmt: skip
    parser.add_argument("--optimizer", choices=_plan.OPTIMIZERS, default="adamw",
                        help="adamw (2 states) or sgd with momentum (1 state); default adamw")  # fmt: skip
    parser.add_argument("--headroom", type=_fraction, default=_plan.DEFAULT_HEADROOM, metavar="FRACTION",
                        help="share of each GPU kept for activations and working memory (default 0.3)")  # fmt: skip
    parser.add_argument("--cpu-memory", dest="cpu_memory", type=memory, metavar="SIZE",
                        help="CPU memory per node, to check offload presets against (default: unchecked)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def request_from(args: argparse.Namespace) -> _plan.PlanRequest:
    params = args.params
    if params is None:
        try:
            params = _plan.count_parameters(args.model)
        except (ImportError, AttributeError, ValueError, TypeError) as error:
            raise UsageError(f"--model {args.model}: {type(error).__name__}: {error}") from None
    try:
        return _plan.PlanRequest(params=params, gpus_per_node=args.gpus, num_nodes=args.num_nodes,
                                 gpu_memory=args.gpu_memory, precision=args.precision, optimizer=args.optimizer,
                                 headroom=args.headroom, cpu_memory=args.cpu_memory)  # fmt: skip
    except ValueError as error:
        raise UsageError(str(error)) from None


def render(result: _plan.Plan) -> str:
    r = result.request
    gib = _plan.GIB
    lines = [
        f"lightning-presets plan: {_plan.format_count(r.params)} parameters ({r.params:,}), {r.gpus_per_node} GPU(s) "
        f"× {r.num_nodes} node(s) of {r.gpu_memory / gib:g} GiB, precision {r.precision}, optimizer {r.optimizer}",
        f"  {_EVIDENCE.format(headroom=r.headroom)}",
        f"  usable for model states: {r.usable_gpu_bytes / gib:.1f} GiB per GPU",
        "",
    ]
    rows = []
    for each in result.estimates:
        verdict = "fits" if each.fits else ("n/a" if not each.applicable else "no")
        mark = "*" if each is result.recommended else ""
        rows.append((f"{mark}{each.preset}", verdict, f"{each.gpu_bytes / gib:.1f}",
                     f"{each.headroom_bytes / gib:+.1f}", each.why))  # fmt: skip
    lines.append(table(("preset", "fits", "GiB/GPU (est.)", "headroom GiB", "why"), rows, wrap_last=60))
    lines.append("")
    best = result.recommended
    if best is None:
        lines += ["NOTHING FITS (estimate).", f"hint: {result.hint()}"]
    else:
        lines += [
            f"recommended (estimate): {best.preset}, the fastest preset that fits",
            f"  {result.trainer_line()}",
            f"  {result.fabric_line()}",
            f"  validate it: {result.check_command()}",
        ]
    lines += [f"note: {note}" for note in result.notes]
    lines.append(f"exit {result.exit_code}")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    result = _plan.plan(request_from(args), notes=_plan.unmodelled())
    if args.json:
        emit_json(result.as_dict())
    else:
        sys.stdout.write(render(result) + "\n")
    return result.exit_code
