"""The machine against the torch build at ``Trainer``/``Fabric`` construction (LP120-LP124).

The comparisons are ``core.machine``'s; their inputs, the GPUs, the driver and the torch build (or the simulated
target's), are read by :mod:`lightning_presets.inspection.machine`, without a CUDA context. A rule never raises: what
cannot be read is not compared.
"""

from __future__ import annotations

import os

from lightning_presets.core import hardware
from lightning_presets.core.context import Context
from lightning_presets.core.machine import (
    Build,
    Machine,
    Verdict,
    assignment_verdict,
    cpu_build_verdict,
    driver_verdict,
    kernel_verdicts,
    nccl_verdict,
)
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.inspection import machine as inspected

__all__ = ["MACHINE_RULES"]


def _facts() -> tuple[Machine, Build] | None:
    try:
        build = inspected.target_build()
        return (inspected.observed_machine(), build) if build is not None else None
    except Exception:  # reading the machine failed: ours, never the user's; nothing is compared
        return None


def _problem(ctx: Context, verdict: Verdict | None, *parts: str) -> Problem | None:
    if verdict is None or verdict.status not in ("warning", "error"):
        return None
    return Problem(f"{ctx.call(*parts)}: {verdict.message}", verdict.fix)


def _kernels(ctx: Context, kind: str) -> Problem | None:
    facts = _facts() if ctx.accelerator == "cuda" else None
    if facts is None:
        return None
    for verdict in kernel_verdicts(*facts):
        if verdict.status == "warning" and ("through its PTX" in verdict.message) == (kind == "ptx"):
            return _problem(ctx, verdict, "accelerator")
    return None


_BLACKWELL = 'Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8)   # torch 2.13.0+cu126 (sm_50..sm_90)'


@rule(
    "LP120", "warning", "construction", "GPUs this torch build has no kernels for",
    fails=f"{_BLACKWELL} on B200 GPUs (compute capability 10.0)",
    fixed='Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8)   # torch 2.13.0+cu128 on B200 GPUs',
)  # fmt: skip
def gpus_have_kernels(ctx: Context) -> Problem | None:
    """torch's own check (``torch.cuda._check_capability``, at CUDA's initialisation) only warns; the first kernel
    then fails on the GPU, which no CPU run shows: a warning."""
    return _kernels(ctx, "none")


@rule(
    "LP121", "warning", "construction", "GPUs that run this torch build only through PTX compiled at start",
    fails='Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8)   # a torch built for sm_80 and '
    "compute_80 on H100s",
    fixed='Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8)   # a torch built for sm_80, sm_90 on '
    "H100s",
)  # fmt: skip
def gpus_have_cubins(ctx: Context) -> Problem | None:
    return _kernels(ctx, "ptx")


@rule(
    "LP122", "warning", "construction", "a driver older than the CUDA major torch was built with",
    fails='Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8)   # torch 2.13.0+cu126, nvidia-smi: '
    "CUDA Version: 11.8",
    fixed='Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8)   # torch 2.13.0+cu126, nvidia-smi: '
    "CUDA Version: 12.2",
)  # fmt: skip
def driver_runs_the_build(ctx: Context) -> Problem | None:
    facts = _facts() if ctx.accelerator == "cuda" else None
    return None if facts is None else _problem(ctx, driver_verdict(*facts), "accelerator")


def requested_backend(ctx: Context) -> str | None:
    """The process-group backend the job asks for: the strategy's ``process_group_backend``, else Lightning's default
    for the device (NCCL on CUDA); ``None`` off CUDA without one."""
    given = ctx.options.get("process_group_backend")
    if isinstance(given, str):
        return given
    return "nccl" if ctx.accelerator == "cuda" else None


_TARGET_NO_NCCL = (
    "lightning-presets check --accelerator cpu --devices 2 --strategy ddp_static_graph --torch-cuda 12.8 "
    "--torch-arch-list sm_90 --torch-without-nccl"
)
"""LP123's examples as ``check`` runs them off the node: the build is the target's (``--torch-*``), which a
construction under simulation does not compare (``inspection.machine.target_build``); on the node, the installed torch
is read."""


@rule(
    "LP123", "error", "construction", "an NCCL process group on a torch built without NCCL",
    fails=f"{_TARGET_NO_NCCL} --set process_group_backend=nccl",
    fixed=f"{_TARGET_NO_NCCL} --set process_group_backend=gloo",
    evidence="runtime: torch's init_process_group('nccl') raises RuntimeError \"Distributed package doesn't have NCCL "
    'built in" when fit sets up the process group',
)  # fmt: skip
def nccl_is_built(ctx: Context) -> Problem | None:
    """Off CUDA without a backend given (XLA's jobs among them) nothing asks for NCCL: ``nccl_verdict`` says
    nothing."""
    try:
        build = inspected.target_build()
    except Exception:  # the build could not be read: nothing compared
        return None
    return None if build is None else _problem(ctx, nccl_verdict(requested_backend(ctx), build), "accelerator")


@rule(
    "LP124", "warning", "construction", "more GPUs used than the scheduler assigned the job",
    fails='import os\nos.environ.update(SLURM_STEP_GPUS="0,1", CUDA_VISIBLE_DEVICES="0,1,2,3")\n'
    'Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=4)',
    fixed='import os\nos.environ.update(SLURM_STEP_GPUS="0,1,2,3", CUDA_VISIBLE_DEVICES="0,1,2,3")\n'
    'Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=4)',
)  # fmt: skip
def gpus_assigned(ctx: Context) -> Problem | None:
    """Under a simulation, an unset ``CUDA_VISIBLE_DEVICES`` is SLURM's to set (``check``'s LP735 says what follows);
    on a real node it means SLURM did not narrow it."""
    if ctx.accelerator != "cuda":
        return None
    try:
        env = os.environ
        if hardware.current() is not None and "CUDA_VISIBLE_DEVICES" not in env:
            return None
        verdict = assignment_verdict(inspected.observed_machine(env), ctx.devices_per_node)
    except Exception:  # reading the machine failed: nothing compared
        return None
    return _problem(ctx, verdict, "accelerator", "devices")


@rule(
    "LP125", "warning", "construction", "GPUs on the node and a CPU-only torch: the job trains on the CPU",
    fails='Trainer(strategy="ddp_static_graph", devices=2)   # nvidia-smi lists 8 GPUs; torch 2.13.0+cpu',
    fixed='Trainer(strategy="ddp_static_graph", devices=2)   # nvidia-smi lists 8 GPUs; torch 2.13.0+cu126',
)  # fmt: skip
def gpus_usable(ctx: Context) -> Problem | None:
    """``accelerator='auto'`` picks the CPU when torch has no CUDA: legal, and rarely what a job on a GPU node meant.
    Only on a real node (a simulation's GPUs are not this machine's)."""
    if ctx.accelerator != "cpu" or ctx.arguments.get("accelerator", "auto") != "auto" or hardware.current() is not None:
        return None
    try:
        import torch

        machine, build = inspected.observed_machine(), inspected.installed_build()
        verdict = cpu_build_verdict(machine, build, hip=torch.version.hip is not None)
    except Exception:  # reading the machine failed: nothing compared
        return None
    return _problem(ctx, verdict, "accelerator")


MACHINE_RULES: tuple[Rule, ...] = (gpus_have_kernels, gpus_have_cubins, driver_runs_the_build, nccl_is_built,
                                   gpus_assigned, gpus_usable)  # fmt: skip
"""Run for every strategy preset at construction (the guard head adds them)."""
