"""``lightning-presets plan``: per-GPU memory and step time of a model under every preset, traced or by arithmetic."""

from __future__ import annotations

import argparse

from rich.console import Group, RenderableType
from rich.text import Text

from lightning_presets.cli._check import memory, positive
from lightning_presets.cli._output import emit, emit_json, fields, heading, indented, progress, table, verdict
from lightning_presets.core.findings import UsageError
from lightning_presets.tools import plan as _plan

_EVIDENCE_PARAMS = (
    "evidence: none. An ESTIMATE of model states (weights, grads, optimizer) per GPU by arithmetic; activations "
    "are not modelled, {headroom:.0%} of each GPU is set aside for them and working memory. Trace your model with "
    "--model MODULE:FACTORY."
)
_EVIDENCE_MODEL = (
    "evidence: per preset. traced = the preset's wrapping and one training step of your model ran under fake "
    "tensors at world size {world}, as the Trainer runs it (below); arithmetic + traced activations = the named "
    "formula for model states (the strategy needs CUDA to wrap), plus the traced activations; (...), 3 and 4 of N "
    "blocks extrapolated = the step traced with 3 and 4 of the model's N identical blocks, every figure extended "
    "linearly to N; failed = the trace broke, nothing is judged. {headroom:.0%} of each GPU is kept for the CUDA "
    "context, NCCL buffers and fragmentation, which no trace sees."
)
_SPEED = (
    "step time: an ESTIMATE from the traced step's FLOPs and bytes per operator (roofline) on {cluster}, plus "
    "the communication compute cannot hide and offload traffic; calibrated per GPU generation on one published "
    "run each (llm-foundry's MPT-7B on 8 × H100 and on 8 × A100; judged on 15 other published runs, "
    "docs/plan.md); range = how far to trust it"
)
_GIB = _plan.GIB


def _cluster_text(r: _plan.PlanRequest) -> str:
    c = r.cluster
    return (
        f"{c.gpu.name} ({c.gpu.peak_flops['bf16'] / 1e12:g} TFLOP/s bf16 dense, "
        f"{c.gpu.memory_bandwidth / 1e12:g} TB/s; in-node {c.gpu.in_node_bandwidth / 1e9:g} GB/s, between nodes "
        f"{c.inter_node_bandwidth / 1e9:g} GB/s per GPU)" + (" under torch.compile" if r.compile else "")
    )


def _tokens(result: _plan.Plan) -> bool:
    return any(each.throughput is not None and each.throughput.tokens_per_s_per_gpu is not None
               for each in result.estimates)  # fmt: skip


def _speed_cells(each: _plan.Estimate) -> list[str | Text]:
    speed = each.throughput
    if speed is None or each.evidence == "failed":
        return ["-", "-"]
    return [f"{speed.rate:,.0f}", f"{speed.step_time_s:.3g}"]


def _speed_details(each: _plan.Estimate) -> list[str]:
    speed = each.throughput
    if speed is None or each.evidence == "failed":
        return []
    return [f"step {speed.step_time_s:.3g} s = compute {speed.compute_s:.3g} + exposed communication "
            f"{speed.exposed_comm_s:.3g} ({speed.comm_source}) + offload {speed.offload_s:.3g}; MFU {speed.mfu:.0%}; "
            f"range {speed.low:,.0f}-{speed.high:,.0f}", *speed.notes]  # fmt: skip


def _count(text: str) -> int:
    try:
        return _plan.parse_count(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _fraction(text: str) -> float:
    try:
        value = float(text.rstrip("%")) / (100 if text.endswith("%") else 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a fraction such as 0.3 or 30%") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 0 and below 1")
    return value


def _bandwidth(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a bandwidth in GB/s such as 50 or 450") from None
    if not value > 0 or value != value or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number of GB/s")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--model", metavar="MODULE:FACTORY",
                       help="trace your model: a function or class returning a LightningModule (or nn.Module) with "
                       "an example_input_array, built under fake tensors (no memory, no GPU)")  # fmt: skip
    model.add_argument("--params", type=_count, metavar="COUNT",
                       help="a bare parameter count (7B, 350M, 7000000000): model states by arithmetic")  # fmt: skip
    parser.add_argument("--gpus", type=positive, required=True, help="GPUs per node")
    parser.add_argument("--num-nodes", dest="num_nodes", type=positive, default=1, help="nodes (default 1)")
    parser.add_argument("--gpu-memory", dest="gpu_memory", type=memory, metavar="SIZE",
                        help="memory per GPU, e.g. 80GiB (default: the --gpu-type's, 80GiB for H100-SXM)")  # fmt: skip
    parser.add_argument("--precision", choices=_plan.PRECISIONS, default="bf16-mixed",
                        help="Trainer precision (default bf16-mixed)")  # fmt: skip
    parser.add_argument("--optimizer", choices=_plan.OPTIMIZERS, default="adamw",
                        help="with --params, or a model without configure_optimizers: adamw (2 states) or sgd "
                        "with momentum (1 state); default adamw")  # fmt: skip
    parser.add_argument(
        "--batch-size",
        dest="batch_size",
        type=positive,
        metavar="N",
        help="--model: the micro-batch per GPU (replaces the batch dimension of example_input_array)",
    )
    parser.add_argument(
        "--batch",
        metavar="MODULE:FUNCTION",
        help="--model: a function returning one batch as your dataloader yields it, for training_step (built under "
        "fake tensors; default: example_input_array)",
    )
    parser.add_argument(
        "--kernels",
        choices=_plan.KERNELS,
        default="cuda",
        help="--model: plan attention and the optimizer as CUDA runs them (default) or as a run on CPU does, to "
        "compare the plan with one",
    )
    parser.add_argument(
        "--max-batch",
        dest="max_batch",
        action="store_true",
        help="--model: also find the largest micro-batch that fits, per preset (more traced runs)",
    )
    parser.add_argument(
        "--preset",
        dest="presets",
        action="append",
        default=[],
        metavar="NAME",
        help="plan only this preset (repeatable; default: every preset with a GPU memory layout)",
    )
    parser.add_argument("--headroom", type=_fraction, metavar="FRACTION",
                        help="share of each GPU not planned for (default 0.3 with --params: activations are not "
                        "modelled; 0.1 with --model: CUDA context, NCCL buffers, fragmentation)")  # fmt: skip
    parser.add_argument("--cpu-memory", dest="cpu_memory", type=memory, metavar="SIZE",
                        help="CPU memory per node, for the offload presets (default: assumed 2 × the node's GPU "
                        "memory)")  # fmt: skip
    parser.add_argument("--gpu-type", dest="gpu_type", choices=tuple(_plan.GPUS), default=None,
                        metavar="GPU", help="the GPU that times the step: its peak FLOP/s, memory bandwidth and "
                        f"in-node link ({', '.join(_plan.GPUS)}; default: this machine's GPUs, read through NVML, "
                        f"when they are all one of these, else {_plan.DEFAULT_GPU}); --gpu-memory defaults to its "
                        "memory")  # fmt: skip
    parser.add_argument("--inter-node-bandwidth", dest="inter_node_bandwidth", type=_bandwidth, metavar="GB/S",
                        help="network bandwidth per GPU between nodes, GB/s (default 50: a 400 Gb/s port)")  # fmt: skip
    parser.add_argument(
        "--nvlink-bandwidth",
        dest="nvlink_bandwidth",
        type=_bandwidth,
        metavar="GB/S",
        help="in-node link bandwidth per GPU per direction, GB/s (default: the GPU type's)",
    )
    parser.add_argument("--activation-checkpointing", dest="activation_checkpointing",
                        choices=_plan.ACTIVATION_CHECKPOINTING, default="none",
                        help="--model: full plans the presets that do not checkpoint activations as if they "
                        "checkpointed every block (memory and recomputation); default none (as declared)")  # fmt: skip
    parser.add_argument("--compile", action="store_true",
                        help="--model: time the step as torch.compile runs it (fused pointwise operators, fewer "
                        "launches; FLOPs and communication unchanged)")  # fmt: skip
    parser.add_argument("--faster", action="store_true",
                        help="--model: when a preset fits but a faster one misses, also plan the changes "
                        "(checkpointing, a smaller micro-batch) that make it fit (more traces)")  # fmt: skip
    parser.add_argument("--fp8", choices=("none", "torchao", "te"), default="none",
                        help="--model: time the Linear layers in fp8 (torchao's Float8Linear or Transformer Engine): "
                        "fp8 peak plus the casts, memory as bf16; modelled, not run (default none)")  # fmt: skip
    parser.add_argument("--full-trace", dest="full_trace", action="store_true",
                        help="--model: trace every block, even where the model's identical blocks allow tracing 3 "
                        "and 4 of them and extrapolating (slower; to check the extrapolation on your "
                        "model)")  # fmt: skip
    parser.add_argument("--timeout", type=positive, default=900, metavar="SECONDS",
                        help="stop tracing after this long (default 900)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the plan as JSON")


def gpu_type(args: argparse.Namespace) -> tuple[str, bool]:
    """``--gpu-type``, else the type of this machine's GPUs (NVML), else the default; and whether it was read here."""
    if args.gpu_type is not None:
        return args.gpu_type, False
    from lightning_presets.tools.plan.hardware import machine_gpu_type

    found = machine_gpu_type()
    return (found, True) if found is not None else (_plan.DEFAULT_GPU, False)


def request_from(args: argparse.Namespace) -> _plan.PlanRequest:
    args.gpu_type, args.gpu_type_read = gpu_type(args)
    try:
        gpu_memory = args.gpu_memory if args.gpu_memory is not None else _plan.GPUS[args.gpu_type].memory_bytes
        return _plan.PlanRequest(params=args.params, model=args.model, gpus_per_node=args.gpus,
                                 num_nodes=args.num_nodes, gpu_memory=gpu_memory, precision=args.precision,
                                 optimizer=args.optimizer, headroom=args.headroom, cpu_memory=args.cpu_memory,
                                 batch_size=args.batch_size, batch=args.batch, kernels=args.kernels,
                                 max_batch=args.max_batch, presets=tuple(args.presets),
                                 timeout_s=args.timeout, gpu_type=args.gpu_type,
                                 inter_node_bandwidth=args.inter_node_bandwidth,
                                 nvlink_bandwidth=args.nvlink_bandwidth,
                                 activation_checkpointing=args.activation_checkpointing,
                                 compile=args.compile, full_trace=args.full_trace, fp8=args.fp8)  # fmt: skip
    except ValueError as error:
        raise UsageError(str(error)) from None


def run(args: argparse.Namespace) -> int:
    from lightning_presets.tools.plan.worker import PlanFailed

    request = request_from(args)
    try:
        with progress(request.traced and not args.json, "loading the model") as update:
            result = _plan.plan(request, update, suggest_changes=True, faster_changes=args.faster)
    except (ValueError, PlanFailed) as error:
        raise UsageError(str(error)) from None
    if args.json:
        emit_json({**result.as_dict(), "gpu_type_read_from_this_machine": args.gpu_type_read})
    else:
        emit(render(result, gpu_type_read=args.gpu_type_read))
    return result.exit_code


def _in(value: float | None) -> str:
    """One figure in its own unit (``14.6 GiB``, ``812.0 MiB``): a table of a 70B model's offload rows and its
    DDP rows mixes MiB and TiB."""
    return "-" if value is None else "0" if value == 0 else _plan.format_bytes(value)


_EVIDENCE_WORDS = (("failed", "failed"), ("arithmetic + traced activations", "formula+trace"),
                   ("traced", "traced"), ("arithmetic", "formula"))  # fmt: skip


def evidence_word(evidence: str) -> str:
    """The table's one word for an estimate's evidence (the whole of it is in ``how and why`` and ``--json``):
    ``traced``, ``formula+trace`` (model states by formula, activations traced), ``formula`` or ``failed``; a
    ``~`` after it when the figures were extrapolated from 3 and 4 blocks."""
    word = next((short for prefix, short in _EVIDENCE_WORDS if evidence.startswith(prefix)), evidence)
    return word + ("~" if "extrapolated" in evidence else "")


def _faster_lines(result: _plan.Plan) -> list[tuple[str, str]]:
    """The changes planned that make a faster preset fit (``--faster``), or the faster preset that misses."""
    if result.suggestions:
        return [("faster with", "; ".join(each.text() for each in result.suggestions))]
    missed = result.missed()
    if missed is None or missed.throughput is None:
        return []
    over = missed.total_peak - missed.usable_gpu_bytes
    return [("faster", f"{missed.preset} would run at {missed.throughput.rate:,.0f} but misses by "
             f"{_plan.format_bytes(over)} per GPU; --faster plans the change (checkpointing, a smaller micro-batch) "
             "that makes it fit")]  # fmt: skip


def render(result: _plan.Plan, *, gpu_type_read: bool = False) -> Group:
    r = result.request
    subject = (f"{_plan.format_count(r.params)} parameters ({r.params:,})" if r.params is not None
               else f"--model {r.model}" + (f", batch {r.batch_size}" if r.batch_size else ""))  # fmt: skip
    evidence = (_EVIDENCE_MODEL if r.traced else _EVIDENCE_PARAMS).format(headroom=r.effective_headroom,
                                                                           world=r.world_size)  # fmt: skip
    parts: list[RenderableType] = [
        heading(
            f"lightning-presets plan: {subject}, {r.gpus_per_node} GPU(s) × {r.num_nodes} node(s) of "
            f"{r.gpu_memory / _GIB:g} GiB, precision {r.precision}"
        ),
        indented(evidence),
        *[indented(line) for line in result.step],
        indented(f"usable per GPU: {r.usable_gpu_bytes / _GIB:.1f} GiB; CPU: {r.cpu_memory_text()}"),
        *([indented(_SPEED.format(cluster=_cluster_text(r)))] if r.traced else []),
        *(
            [indented(f"GPU type {r.gpu_type}: read from this machine's GPUs (NVML); --gpu-type overrides it")]
            if gpu_type_read
            else []
        ),
        "",
    ]
    headers = ["preset", "fits", "evidence", "params", "grads", "optim", "activ", "peak", "CPU/node"]
    timed = any(each.throughput is not None for each in result.estimates)
    if timed:
        headers += ["tokens/s/GPU" if _tokens(result) else "samples/s", "step s"]
    if r.max_batch:
        headers.append("max batch")
    rows = []
    for each in result.estimates:
        verdict_ = (Text("fits", style="green") if each.fits else Text("n/a", style="dim") if not each.applicable
                    else Text("failed", style="bold yellow") if each.evidence == "failed"
                    else Text("no", style="bold red"))  # fmt: skip
        name = Text(("*" if each is result.recommended else "") + each.preset,
                    style="bold" if each is result.recommended else "")  # fmt: skip
        row: list[str | Text] = [name, verdict_, evidence_word(each.evidence),
               _in(each.parameters), _in(each.gradients), _in(each.optimizer),
               _in(each.activations), _in(each.total_peak),
               _in(each.cpu_bytes_per_node) if each.cpu_bytes_per_node else "-"]  # fmt: skip
        if timed:
            row += _speed_cells(each)
        if r.max_batch:
            row.append(str(each.max_batch) if each.max_batch else "-")
        rows.append(row)
    parts.append(
        heading(
            "memory per GPU (" + ("ESTIMATE" if not r.traced else "one traced training step") + "); "
            "evidence: traced, formula+trace, formula, failed; ~ extrapolated from 3 and 4 blocks"
        )
    )
    parts += [table(headers, rows), "", heading("how and why")]
    reasons = []
    for each in result.estimates:
        details = [f"evidence: {each.evidence}", each.formula, *each.why[1:], *_speed_details(each)]
        if each.max_batch_note:
            details.append(f"max batch: {each.max_batch_note}")
        reasons.append((each.preset, "; ".join(part for part in details if part)))
    parts.append(fields(reasons))
    parts.append("")
    best = result.recommended
    if best is None:
        judged = "" if not result.failed else f" of the {len(result.estimates) - len(result.failed)} presets traced"
        parts += [
            verdict("NOTHING FITS" + judged + (" (estimate)." if not r.traced else "."), ok=False),
            fields([("hint", result.hint() or "")], indent=0),
            *(
                [fields([("fits with", "; ".join(each.text() for each in result.suggestions))], indent=0)]
                if result.suggestions
                else []
            ),
        ]
    else:
        parts += [
            verdict(f"recommended{' (estimate)' if not r.traced else ''}: {best.preset}", ok=True),
            fields(
                [
                    ("fastest", result.fastest_text() or ""),
                    *_faster_lines(result),
                    ("rule", _plan.RULE),
                    ("Trainer", result.trainer_line() or ""),
                    ("Fabric", result.fabric_line() or ""),
                    ("validate it", result.check_command() or ""),
                ]
            ),
        ]
    parts += [fields([("note", note)], indent=0) for note in result.notes]
    parts.append(f"exit {result.exit_code}")
    return Group(*parts)
