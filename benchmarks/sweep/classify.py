"""Classify a run against its single-process reference: ``trains``, ``crashes``, ``hangs`` or ``trains_wrong``.

The reference is plain Lightning on one device with the same Trainer arguments, the same seed and initial weights,
and the global batch of the run's data-parallel ranks in the order Lightning's distributed sampler gives them;
BatchNorm statistics are taken per rank's share of the batch unless the run asked for ``sync_batchnorm``. What is
compared, batch by batch and step by step: the samples seen, the mean loss over the ranks, the global norm of the
gradients each optimizer step applied (after clipping) and its learning rate, the number of optimizer steps, the
validation losses, the dtypes and modes training ran in, and the final parameters, gathered whole. Besides the
reference, what the strategy was asked for (the preset's declared options and the overrides, ``sync_batchnorm``)
is checked on the wrapped model the run really trained.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sweep.launch import Processes

LOW_PRECISION = ("bf16", "16-")


@dataclass(frozen=True)
class Tolerance:
    name: str
    loss: float
    """Largest relative difference of a batch's mean loss."""
    grad_norm: float
    """Largest relative difference of a step's gradient norm."""
    parameters: float
    """Largest distance of the final parameters from the reference's, relative to how far the reference moved."""
    why: str

    def limits(self) -> dict[str, float]:
        return {"loss_deviation": self.loss, "grad_norm_deviation": self.grad_norm,
                "parameter_deviation": self.parameters}  # fmt: skip


_SIDES = (
    "the result's `numerics` lists, per class, the largest deviation among runs that trained and the smallest beyond"
)
EXACT = Tolerance(
    "exact", loss=1e-4, grad_norm=1e-3, parameters=1e-3,
    why="fp32/fp64: the run and the reference differ only in the order of floating-point sums (two half-batch "
    "gradients all-reduced against one full-batch backward), a 1e-7-level relative effect on losses and gradient "
    "norms; an ignored setting moves at least one figure by orders of magnitude more (a BatchNorm left "
    "unsynchronised: ~1e-2 on the loss and ~0.3 of the update on the parameters; clipping skipped: the gradient "
    f"norm ×20) or changes a count or a sample set that is compared exactly; {_SIDES}",
)  # fmt: skip
LOW = Tolerance(
    "low_precision", loss=5e-3, grad_norm=1e-2, parameters=0.15,
    why="bf16/fp16 (precision, the bf16-fp32-reduce plugin, bf16 gradient compression): one bf16 rounding is ~4e-3 "
    "relative and another sum order rounds differently; AdamW divides by the root of tiny second moments, so "
    f"rounding noise in small gradients moves parameters by a few percent of the update; {_SIDES}",
)  # fmt: skip
FP8 = Tolerance(
    "fp8", loss=1e-2, grad_norm=2e-2, parameters=0.5,
    why="fp8-torchao: tensorwise float8 scales come from the amax of each rank's own activations, so a rank "
    "quantizes its half of the batch differently from the reference's whole batch, by design (few runs: most fp8 "
    f"jobs use a model-parallel preset, which refuses the plugin); {_SIDES}",
)  # fmt: skip
TOLERANCES = (EXACT, LOW, FP8)


def tolerance(config: dict[str, Any]) -> Tolerance:
    if config.get("plugin") == "fp8-torchao":
        return FP8
    precision = str(config["trainer"].get("precision", "32-true"))
    compressed = config["preset"] == "ddp_bf16_compress" and config["overrides"].get("ddp_comm_hook", ...) is not None
    low = precision.startswith(LOW_PRECISION) or config.get("plugin") is not None or compressed
    return LOW if low else EXACT


@dataclass
class Outcome:
    outcome: str
    """``trains``, ``crashes``, ``hangs`` or ``trains_wrong``."""
    detail: str
    stage: str | None = None
    """For a crash: ``construction`` (Lightning refused it in ``Trainer(...)``, before any process) or ``fit``."""
    reasons: list[str] = field(default_factory=list)
    measures: dict[str, Any] = field(default_factory=dict)
    left_out: list[str] = field(default_factory=list)
    """Settings the job asked for that the run silently did without, though it trained what the reference trained
    (offload, activation checkpointing, DDP's flags and communication hook): a warning's business, not an error's."""

    def as_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"outcome": self.outcome, "detail": self.detail}
        if self.stage:
            data["stage"] = self.stage
        if self.reasons:
            data["reasons"] = self.reasons
        if self.measures:
            data["measures"] = self.measures
        if self.left_out:
            data["left_out"] = self.left_out
        return data


_SECONDARY = ("Connection closed by peer", "Connection reset by peer", "Broken pipe", "[Rank", "DistBackendError")


def crash_line(processes: Processes) -> str | None:
    """The error of the first rank that reported one of its own (not a peer's disconnect), or a dead rank's exit."""
    errors = {role: result for role, result in sorted(processes.results.items()) if result.get("status") == "error"}
    lines = [str(r["last_line"]) for r in errors.values()]
    primary = [line for line in lines if not any(mark in line for mark in _SECONDARY)]
    if lines:
        return (primary or lines)[0]
    for role, code in sorted(processes.exit_codes.items()):
        if role not in processes.results and role not in processes.killed and code not in (0, None):
            tail = processes.log_tail(role, 1)
            return f"{role} died with exit code {code}" + (f": {tail}" if tail else "")
    return None


def classify_processes(processes: Processes, world_size: int) -> Outcome | None:
    """``crashes`` or ``hangs`` from the processes alone; ``None`` when every rank finished."""
    line = crash_line(processes)
    if line is not None:
        first = [f"{role}: {r['first_line']}" for role, r in sorted(processes.results.items()) if r.get("first_line")]
        return Outcome("crashes", line, stage="fit", reasons=first)
    if processes.timed_out:
        done = sorted(role for role, r in processes.results.items() if r.get("status") == "ok")
        return Outcome("hangs", f"no result after {processes.seconds:.0f} s" + (f" ({', '.join(done)} finished)"
                                                                             if done else ""))  # fmt: skip
    missing = [f"rank{r}" for r in range(world_size) if f"rank{r}" not in processes.results]
    if missing:
        return Outcome("crashes", f"{', '.join(missing)} exited without a result", stage="fit")
    return None


def replicas(rank0: dict[str, Any]) -> tuple[int, bool]:
    """(data-parallel ranks the training data was split over, whether it was shuffled the way Lightning does)."""
    samplers = rank0.get("samplers", {})
    distributed = samplers.get("train_sampler") == "DistributedSampler"
    return (int(samplers.get("num_replicas", 1)) if distributed else 1), distributed


def _relative(a: float, b: float) -> float:
    if a == b:
        return 0.0
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    return abs(a - b) / max(abs(b), 1e-12)


def _mean_by_position(ranks: list[list[float]]) -> list[float]:
    length = min(len(each) for each in ranks)
    return [sum(each[i] for each in ranks) / len(ranks) for i in range(length)]


def _union_by_position(ranks: list[list[list[int]]]) -> list[list[int]]:
    length = min(len(each) for each in ranks)
    return [sorted({sample for each in ranks for sample in each[i]}) for i in range(length)]


def compare(
    config: dict[str, Any],
    ranks: list[dict[str, Any]],
    reference: dict[str, Any],
    folder: Path,
    expected: list[str],
    left_out: Sequence[str] = (),
) -> Outcome:
    """``trains`` or ``trains_wrong`` for a run whose ranks all finished, against a reference that finished.

    ``expected``: what :func:`requested` found missing from the run that changes what trains; ``left_out``: what
    :func:`left_out` found missing that does not (recorded on the outcome, never ``trains_wrong`` by itself). The
    tensors are read from ``folder``.
    """
    tol = tolerance(config)
    measures: dict[str, Any] = {"tolerance": tol.name}
    reasons = [
        *_finite(ranks, reference),
        *_counts(ranks, reference),
        *_data(ranks, reference),
        *_curves(ranks, reference, tol, measures),
        *_validation(config, ranks, reference, tol),
        *_observed(ranks, reference),
        *_parameters(folder, len(ranks), tol, measures),
        *expected,
    ]
    if reasons:
        return Outcome("trains_wrong", reasons[0], reasons=reasons, measures=measures, left_out=list(left_out))
    return Outcome("trains", "matches the single-process reference", measures=measures, left_out=list(left_out))


def _finite(ranks: list[dict[str, Any]], reference: dict[str, Any]) -> list[str]:
    if not diverged(ranks[0]):
        return []
    also = " (so does the reference's: plain Lightning trains this job wrong too)" if diverged(reference) else ""
    losses = _mean_by_position([r["losses"] for r in ranks])
    return [f"the loss or the gradients are not finite: losses {_short(losses)}, gradient norms "
            f"{_short(ranks[0]['grad_norms'])}{also}"]  # fmt: skip


def _largest_deviation(run: list[float], reference: list[float]) -> float:
    return max((_relative(a, b) for a, b in zip(run, reference, strict=False)), default=0.0)


def _curves(
    ranks: list[dict[str, Any]], reference: dict[str, Any], tol: Tolerance, measures: dict[str, Any]
) -> list[str]:
    """The mean loss per batch; the gradient norm and learning rate of each optimizer step."""
    reasons = []
    losses = _mean_by_position([r["losses"] for r in ranks])
    measures["loss_deviation"] = deviation = _largest_deviation(losses, reference["losses"])
    if deviation > tol.loss:
        reasons.append(f"losses differ: run {_short(losses)}, reference {_short(reference['losses'])} "
                       f"(relative {deviation:.2g} > {tol.loss:g})")  # fmt: skip
    norms = ranks[0]["grad_norms"]
    measures["grad_norm_deviation"] = deviation = _largest_deviation(norms, reference["grad_norms"])
    if deviation > tol.grad_norm:
        reasons.append(f"the optimizer applied gradients of norm {_short(norms)}, the reference "
                       f"{_short(reference['grad_norms'])} (relative {deviation:.2g} > {tol.grad_norm:g})")  # fmt: skip
    if _largest_deviation(ranks[0]["lrs"], reference["lrs"]) > 1e-9:
        reasons.append(f"learning rates differ: run {ranks[0]['lrs']}, reference {reference['lrs']}")
    return reasons


def diverged(result: dict[str, Any]) -> bool:
    """Whether a finished run's loss or gradients went non-finite."""
    return not all(math.isfinite(x) for x in result.get("losses", []) + result.get("grad_norms", []))


def _short(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.5g}" for v in values) + "]"


def _counts(ranks: list[dict[str, Any]], reference: dict[str, Any]) -> list[str]:
    wanted = (reference["optimizer_steps"], len(reference["losses"]))
    for rank, result in enumerate(ranks):
        if (result["optimizer_steps"], len(result["losses"])) != wanted:
            return [f"rank {rank} took {result['optimizer_steps']} optimizer step(s) over {len(result['losses'])} "
                    f"batch(es); the reference {wanted[0]} over {wanted[1]}"]  # fmt: skip
    return []


def _data(ranks: list[dict[str, Any]], reference: dict[str, Any]) -> list[str]:
    seen = _union_by_position([r["ids"] for r in ranks])
    for index, (run, ref) in enumerate(zip(seen, reference["ids"], strict=False)):
        if run != sorted(ref):
            return [f"batch {index}: the ranks together saw samples {run}, the reference's global batch is {ref}"]
    return []


def _validation(
    config: dict[str, Any], ranks: list[dict[str, Any]], reference: dict[str, Any], tol: Tolerance
) -> list[str]:
    reasons = []
    counts = [len(r["val"]) for r in ranks]
    if any(count != len(reference["val"]) for count in counts):
        return [f"validation ran {counts} batch(es) per rank, the reference {len(reference['val'])}"]
    if not reference["val"]:
        return []
    for key in ("inference_mode", "grad_enabled"):
        run_modes = {r["val"][0][key] for r in ranks}
        if run_modes != {reference["val"][0][key]}:
            reasons.append(f"validation ran with {key}={sorted(run_modes)}, the reference with "
                           f"{reference['val'][0][key]}")  # fmt: skip
    batchnorm_statistics_differ = config["architecture"] == "batchnorm" and not any(
        r.get("wrapping", {}).get("sync_batchnorm_layers") for r in ranks
    )  # each rank's running statistics are its own: the reference has no counterpart to compare with
    if not batchnorm_statistics_differ:
        losses = _mean_by_position([[v["loss"] for v in r["val"]] for r in ranks])
        expected = [v["loss"] for v in reference["val"]]
        deviation = max((_relative(a, b) for a, b in zip(losses, expected, strict=False)), default=0.0)
        if deviation > tol.loss:
            reasons.append(f"validation losses differ: run {_short(losses)}, reference {_short(expected)}")
    return reasons


OBSERVED = ("logits_dtype", "parameter_dtype", "anomaly_detection", "deterministic_algorithms")


def _observed(ranks: list[dict[str, Any]], reference: dict[str, Any]) -> list[str]:
    reasons = []
    for key in OBSERVED:
        values = {str(r.get("observed", {}).get(key)) for r in ranks}
        wanted = str(reference.get("observed", {}).get(key))
        if values != {wanted}:
            reasons.append(f"training ran with {key}={', '.join(sorted(values))}, the reference with {wanted}")
    for key in ("float8_layers",):
        values = {r.get("wrapping", {}).get(key) for r in ranks}
        if values != {reference.get("wrapping", {}).get(key)}:
            reasons.append(f"{key}: run {sorted(values)}, reference {reference['wrapping'].get(key)}")
    if {r.get("cudnn_benchmark") for r in ranks} != {reference.get("cudnn_benchmark")}:
        reasons.append(f"torch.backends.cudnn.benchmark: run {ranks[0].get('cudnn_benchmark')}, reference "
                       f"{reference.get('cudnn_benchmark')}")  # fmt: skip
    return reasons


def _parameters(folder: Path, world_size: int, tol: Tolerance, measures: dict[str, Any]) -> list[str]:
    """Rank 0's final parameters against the reference's, relative to how far the reference moved them; and the
    ranks against each other."""
    import torch

    reference = torch.load(folder / "reference.pt")
    final, initial = reference["final_parameters"], reference["initial_parameters"]
    runs = [torch.load(folder / f"rank{rank}.pt")["final_parameters"] for rank in range(world_size)]
    if set(runs[0]) != set(final):
        return [f"parameter names differ: run {sorted(set(runs[0]) ^ set(final))} not in both"]
    moved = math.sqrt(sum(float((final[k] - initial[k]).pow(2).sum()) for k in final))
    off = math.sqrt(sum(float((runs[0][k] - final[k]).pow(2).sum()) for k in final))
    ratio = off / moved if moved else (0.0 if off == 0 else math.inf)
    measures["parameter_deviation"] = ratio
    reasons = []
    if not math.isfinite(ratio) or ratio > tol.parameters:
        reasons.append(f"final parameters are {ratio:.3g} of the reference's update away from the reference "
                       f"(> {tol.parameters:g})")  # fmt: skip
    spread = max((float((other[k] - runs[0][k]).abs().max()) for other in runs[1:] for k in final), default=0.0)
    measures["rank_spread"] = spread
    if spread > 0 and moved and spread / moved > tol.parameters:
        reasons.append(f"the ranks ended with different parameters (largest difference {spread:.3g})")
    return reasons


def requested(config: dict[str, Any], ranks: list[dict[str, Any]]) -> list[str]:
    """Settings the job asked for that change what trains (synchronised batch norm, the mesh), checked on what the
    ranks really trained: one missing is ``trains_wrong``."""
    wrapping = ranks[0].get("wrapping", {})
    reasons = []
    synced = wrapping.get("sync_batchnorm_layers")
    if config["trainer"].get("sync_batchnorm") and config["architecture"] == "batchnorm" and not synced:
        reasons.append("sync_batchnorm=True was asked for, the model trained without a SyncBatchNorm layer")
    mesh = wrapping.get("mesh", {})
    for key, dim in (("data_parallel_size", "data_parallel"), ("tensor_parallel_size", "tensor_parallel")):
        if isinstance(config["overrides"].get(key), int) and mesh and mesh.get(dim) != config["overrides"][key]:
            reasons.append(f"{key}={config['overrides'][key]} was asked for, the device mesh has {dim}={mesh.get(dim)}")
    return reasons


def left_out(config: dict[str, Any], ranks: list[dict[str, Any]]) -> list[str]:
    """Settings the job asked for that change how it trains but not what (DDP's flags and communication hook, CPU
    offload, activation checkpointing), checked on what the ranks really trained. One missing from a run that
    matches its reference is legal and silent: the guards owe a warning (the severity policy), not an error."""
    from lightning_presets import get_preset

    preset = get_preset(config["preset"])
    asked = {**preset.init_params, **config["overrides"]}
    wrapping = ranks[0].get("wrapping", {})
    reasons = []
    ddp = wrapping.get("ddp")
    if ddp is not None:
        for key, value in asked.items():
            if key in ddp and key != "comm_hooks" and value != ddp[key]:
                reasons.append(f"{key}={value!r} was asked for, DistributedDataParallel has {ddp[key]!r}")
        hook = asked.get("ddp_comm_hook")
        if hook is not None and getattr(hook, "__qualname__", None) not in ddp["comm_hooks"]:
            reasons.append(f"ddp_comm_hook={getattr(hook, '__qualname__', hook)} was asked for, DistributedDataParallel"
                           f" has {ddp['comm_hooks'] or 'no communication hook'}")  # fmt: skip
    if preset.cpu_offload and "CPUOffloadPolicy" not in wrapping.get("offload_policies", []):
        reasons.append(f"{config['preset']!r} promises CPU offload, the model trained with "
                       f"{wrapping.get('offload_policies') or 'no FSDP2 unit'}")  # fmt: skip
    if preset.activation_checkpointing and not wrapping.get("checkpointed"):
        reasons.append(f"{config['preset']!r} promises activation checkpointing, no module was checkpointed")
    return reasons
