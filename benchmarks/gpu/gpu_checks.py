"""Real short trainings of the presets that need CUDA, each in its own process with its own timeout.

    bash benchmarks/gpu/run.sh                      # what a GPU machine runs (see README.md here)
    python benchmarks/gpu/gpu_checks.py [--only fsdp2,tp2d_hybrid] [--out DIR] [--budget 330]
    python benchmarks/gpu/gpu_checks.py --cpu-smoke # the CPU-capable checks on 2 gloo processes
    python benchmarks/gpu/gpu_checks.py --run CHECK [--cpu]   # one check, in this process (the harness does this)

The harness probes the machine, then runs ``python benchmarks/gpu/gpu_checks.py --run CHECK`` for every
check (a file, never ``python -c``: Lightning's launcher re-runs ``sys.argv`` for the other ranks), each
in a new session killed as a group when its timeout or the overall budget runs out. It writes
``gpu_checks.json`` (one record per check: name, status, reason, duration_s, figures) and
``gpu_checks.log`` under ``$OUT`` when set, else under ``benchmarks/results/gpu/``. Nothing is installed:
a check whose optional package does not import is skipped with the reason.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import json
import math
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = Path(__file__).resolve()
SCHEMA = "lightning-presets/gpu-checks"
SCHEMA_VERSION = 1
RESULT_PREFIX = "GPU_CHECK_RESULT "
ENV_PREFIX = "GPU_CHECK_ENV "
NO_CUDA = "no CUDA device"
EXIT_NO_GPU = 2
"""Exit code when no CUDA device is visible (outside ``--cpu-smoke``): not a pass, not a failed check."""
DEFAULT_BUDGET_S = 330.0
MIN_CHECK_S = 20.0
OPTIONAL_PACKAGES = ("deepspeed", "torchao", "bitsandbytes", "transformer_engine")
LEARNING_RATE = 1e-3


# --------------------------------------------------------------------------- what runs


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    """The TinyTransformer of tests/models.py, scaled; dimensions are multiples of 16 (float8 needs it)."""

    vocab: int
    dim: int
    heads: int
    layers: int
    sequence: int
    batch: int
    steps: int


GPU_SIZES = Sizes(vocab=256, dim=1024, heads=16, layers=8, sequence=512, batch=8, steps=8)
CPU_SIZES = Sizes(vocab=32, dim=32, heads=4, layers=2, sequence=8, batch=4, steps=4)


@dataclass(frozen=True, slots=True, kw_only=True)
class Check:
    """One check: a Trainer fit (or the CLI check) and what its result must show."""

    name: str
    what: str
    strategy: str = "auto"
    all_devices: bool = True
    """Use every visible GPU (else one); ``--cpu-smoke`` always uses 2 CPU processes."""
    plugin: str | None = None
    """A precision preset name, passed as ``plugins=[lightning_presets.precision(NAME)]``."""
    precision: str | None = "bf16-mixed"
    requires: tuple[str, ...] = ()
    """Modules that must import, else the check is skipped."""
    min_capability: tuple[int, int] | None = None
    timeout_s: float = 75.0
    cpu_smoke: bool = False
    configure_model: bool = False
    """The LightningModule applies tensor parallelism + FSDP2 itself (the tp2d_hybrid contract)."""
    trainable_only: bool = False
    proves: tuple[str, ...] = ()
    """Error codes this check proves: it runs their configuration with the guards switched off
    (``LIGHTNING_PRESETS_SKIP``) and passes only when the run fails as ``expect`` says."""
    expect: str = ""
    """For a proof: a regular expression over ``ExceptionType: message`` of the failed run, or ``no training step``
    when the run must end without ``training_step`` ever running."""
    lightning_plugin: str | None = None
    """A Lightning precision plugin class of ``lightning.pytorch.plugins`` built as ``Class("bf16-mixed", "cuda")``."""
    below_capability: tuple[int, int] | None = None
    """Runs only on GPUs of a compute capability below this (else skipped)."""


CHECKS: tuple[Check, ...] = (
    Check(name="cli_check", what="`lightning-presets check` for 4×8 GPUs on this GPU host; CUDA stays untouched",
          precision=None, timeout_s=60, cpu_smoke=True),
    Check(name="baseline_auto", what="plain strategy='auto' on one GPU: the memory reference", all_devices=False),
    Check(name="fsdp_offload_ckpt", what="FSDP1 full shard + CPU offload + auto-wrap + activation checkpointing",
          strategy="fsdp_offload_ckpt"),
    Check(name="fsdp_grad_op", what="FSDP1 SHARD_GRAD_OP with auto-wrap", strategy="fsdp_grad_op"),
    Check(name="ddp_bf16_compress", what="DDP over NCCL with the bf16 compression hook", strategy="ddp_bf16_compress"),
    Check(name="ddp_static_graph", what="DDP with static_graph and gradient_as_bucket_view",
          strategy="ddp_static_graph", cpu_smoke=True),
    Check(name="fsdp2", what="FSDP2 (fully_shard) applied by the preset to an unchanged module", strategy="fsdp2",
          cpu_smoke=True),
    Check(name="fsdp2_offload_ckpt", what="FSDP2 with CPUOffloadPolicy and activation checkpointing",
          strategy="fsdp2_offload_ckpt"),
    Check(name="tp2d_hybrid", what="tensor parallel × FSDP2 from the module's configure_model",
          strategy="tp2d_hybrid", configure_model=True, cpu_smoke=True),
    Check(name="precision_bf16_fp32_reduce", what="bf16-fp32-reduce plugin with fsdp_offload_ckpt",
          strategy="fsdp_offload_ckpt", plugin="bf16-fp32-reduce", precision=None),
    Check(name="precision_fp8_torchao", what="fp8-torchao plugin on one GPU: Linear layers become Float8Linear",
          all_devices=False, plugin="fp8-torchao", precision=None, requires=("torchao",), min_capability=(8, 9)),
    Check(name="precision_nf4_bnb", what="nf4-bnb plugin on one GPU: Linear layers become 4-bit",
          all_devices=False, plugin="nf4-bnb", precision=None, requires=("bitsandbytes",), trainable_only=True),
    Check(name="deepspeed_zero2_offload", what="DeepSpeed ZeRO-2 with optimizer state offloaded to CPU",
          strategy="deepspeed_zero2_offload", requires=("deepspeed",), timeout_s=120),
    Check(name="deepspeed_zero3_offload_ckpt", what="DeepSpeed ZeRO-3, parameters + optimizer offloaded, "
          "blocks checkpointed", strategy="deepspeed_zero3_offload_ckpt", requires=("deepspeed",), timeout_s=120),
    Check(name="proof_lp412_deepspeed_closure", what="LP412 off: DeepSpeed ZeRO-2 with Lightning's MixedPrecision "
          "plugin; DeepSpeed's optimizer never calls the closure, so training_step never runs",
          strategy="deepspeed_zero2_offload", all_devices=False, precision=None, lightning_plugin="MixedPrecision",
          requires=("deepspeed",), timeout_s=120, proves=("LP412",), expect="no training step"),
    Check(name="proof_lp604_fp8_below_capability", what="LP604 off: fp8-torchao on a GPU below compute capability "
          "8.9: torch._scaled_mm refuses it at the first step", all_devices=False, plugin="fp8-torchao",
          precision=None, requires=("torchao",), below_capability=(8, 9), proves=("LP604",),
          expect=r"(?i)scaled_mm|capability"),
    Check(name="plan_memory", what="`plan --model`'s traced peak per GPU vs torch.cuda.max_memory_allocated of a "
          "real step, per preset (within 15%)", precision=None, timeout_s=160),
)  # fmt: skip
BY_NAME = {check.name: check for check in CHECKS}
CLI_ARGUMENTS = ("check", "--mode", "trainer", "--strategy", "fsdp_offload_ckpt", "--accelerator", "cuda",
                 "--gpus", "8", "--devices", "8", "--num-nodes", "4", "--precision", "bf16-mixed")  # fmt: skip


class CheckFailed(Exception):
    """The run finished but did not show what the check expects."""


class CheckSkipped(Exception):
    """Something the check needs is missing on this machine."""


# --------------------------------------------------------------------------- inside one check process


def _models() -> Any:
    sys.path.insert(0, str(ROOT / "tests"))
    return importlib.import_module("models")


def _rank() -> int:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return int(os.environ.get("RANK", os.environ.get("LOCAL_RANK", "0")))


def _emit(prefix: str, payload: dict[str, Any]) -> None:
    sys.stdout.write(prefix + json.dumps(payload, default=str) + "\n")  # one write: ranks may share the pipe
    sys.stdout.flush()


def _count(model: Any, predicate: Callable[[Any], bool]) -> int:
    return sum(1 for module in model.modules() if predicate(module))


def _type_names(model: Any, names: tuple[str, ...]) -> list[str]:
    return [name for name, module in model.named_modules() if type(module).__name__ in names]


def _param_devices(model: Any) -> list[str]:
    devices = set()
    for parameter in model.parameters():
        local = parameter.to_local() if hasattr(parameter, "to_local") else parameter
        devices.add(local.device.type)
    return sorted(devices)


def _checkpoint_wrappers(model: Any) -> int:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    return _count(model, lambda module: isinstance(module, CheckpointWrapper))


def _composable(model: Any, api: str) -> int:
    try:
        from torch.distributed._composable.contract import _get_registry
    except ImportError:
        return -1
    return _count(model, lambda module: api in (_get_registry(module) or {}))


def _inspect(strategy: Any, lightning_module: Any) -> dict[str, Any]:
    """What the strategy really built, read while the wrapped model still exists (``on_train_end``)."""
    names = {klass.__name__ for klass in type(strategy).__mro__}
    wrapped = strategy.model
    figures: dict[str, Any] = {"wrapper": type(wrapped).__name__, "preset_blocks": sorted(
        block.__name__ for block in getattr(strategy, "lp_blocks", ()) or ())}  # fmt: skip
    if "FSDPStrategy" in names:
        from torch.distributed.fsdp import FullyShardedDataParallel

        figures["configured_sharding_strategy"] = str(getattr(strategy, "sharding_strategy", None))
        figures["fsdp_units"] = _count(wrapped, lambda module: isinstance(module, FullyShardedDataParallel))
        figures["checkpoint_wrappers"] = _checkpoint_wrappers(wrapped)
        figures["param_devices"] = _param_devices(wrapped)
        root = wrapped if isinstance(wrapped, FullyShardedDataParallel) else None
        if root is not None:
            figures["sharding_strategy"] = str(getattr(root, "sharding_strategy", None))
            policy = getattr(root, "mixed_precision", None)
            figures["mixed_precision"] = {
                key: str(getattr(policy, key, None)) for key in ("param_dtype", "reduce_dtype", "buffer_dtype")
            }
            figures["cpu_offload"] = bool(getattr(getattr(root, "cpu_offload", None), "offload_params", False))
    elif "ModelParallelStrategy" in names:
        from torch.distributed.fsdp import FSDPModule

        model = lightning_module
        figures["fsdp2_modules"] = _count(model, lambda module: isinstance(module, FSDPModule))
        figures["checkpointed_modules"] = _composable(model, "checkpoint")
        figures["dtensor_parameters"] = sum(1 for p in model.parameters() if hasattr(p, "to_local"))
        figures["param_devices"] = _param_devices(model)
        outermost = next((module for module in model.modules() if isinstance(module, FSDPModule)), None)
        if outermost is not None:
            from torch.distributed.fsdp import fully_shard

            group = fully_shard.state(outermost)._fsdp_param_group  # type: ignore[attr-defined]
            figures["offload_policy"] = type(group.offload_policy).__name__ if group is not None else None
        mesh = getattr(strategy, "device_mesh", None)
        if mesh is not None:
            figures["mesh"] = dict(zip(mesh.mesh_dim_names or (), mesh.shape, strict=False))
    elif "DDPStrategy" in names:
        figures["static_graph"] = bool(getattr(wrapped, "static_graph", False))
        figures["gradient_as_bucket_view"] = bool(getattr(wrapped, "gradient_as_bucket_view", False))
        hooks = getattr(wrapped, "_comm_hooks", None)
        figures["comm_hooks"] = None if hooks is None else [getattr(h, "__qualname__", repr(h)) for h, _ in hooks]
        import torch.distributed as dist

        figures["backend"] = dist.get_backend() if dist.is_initialized() else None
    elif "DeepSpeedStrategy" in names:
        figures["zero_stage"] = int(wrapped.zero_optimization_stage())
        figures["offload_optimizer"] = str(wrapped.zero_offload_optimizer())
        figures["offload_param"] = str(wrapped.zero_offload_param())
        figures["checkpoint_wrappers"] = _checkpoint_wrappers(lightning_module)
        figures["bf16"] = bool(strategy.config.get("bf16", {}).get("enabled", False))
    figures["float8_linear"] = _type_names(lightning_module, ("Float8Linear",))
    figures["linear4bit"] = _type_names(lightning_module, ("Linear4bit",))
    return figures


def _expectations(check: Check, figures: dict[str, Any], sizes: Sizes, cpu: bool) -> list[str]:
    """What the run must show; an empty list means it passed."""
    problems = []
    losses = figures["losses"]
    if len(losses) != sizes.steps or not all(math.isfinite(loss) for loss in losses):
        problems.append(f"expected {sizes.steps} finite losses, got {losses}")
    elif min(losses[1:]) >= losses[0]:
        problems.append(f"the loss never went below its first value {losses[0]:.4f}: {losses}")
    blocks = sizes.layers

    def expect(condition: bool, text: str) -> None:
        if not condition:
            problems.append(text)

    strategy = check.strategy
    if strategy in ("fsdp_offload_ckpt", "fsdp_grad_op"):
        expect(figures.get("fsdp_units", 0) >= blocks + 1, f"expected ≥{blocks + 1} FSDP units (each block + root), "
               f"got {figures.get('fsdp_units')}")  # fmt: skip
    if strategy == "fsdp_offload_ckpt":
        expect(figures.get("checkpoint_wrappers") == blocks,
               f"expected {blocks} CheckpointWrapper, got {figures.get('checkpoint_wrappers')}")  # fmt: skip
        expect(figures.get("param_devices") == ["cpu"], f"expected parameters offloaded to cpu, got "
               f"{figures.get('param_devices')}")  # fmt: skip
    if strategy == "fsdp_grad_op":
        expect("SHARD_GRAD_OP" in str(figures.get("configured_sharding_strategy")),
               f"expected SHARD_GRAD_OP configured, got {figures.get('configured_sharding_strategy')}")  # fmt: skip
        # torch's FSDP itself falls back to NO_SHARD when the world size is 1.
        effective = "NO_SHARD" if figures.get("world_size") == 1 else "SHARD_GRAD_OP"
        expect(effective in str(figures.get("sharding_strategy")),
               f"expected {effective} in effect, got {figures.get('sharding_strategy')}")  # fmt: skip
    if strategy == "ddp_bf16_compress":
        expect(any("bf16_compress" in hook for hook in figures.get("comm_hooks") or ()),
               f"expected the bf16 compression hook registered, got {figures.get('comm_hooks')}")  # fmt: skip
    if strategy == "ddp_static_graph":
        expect(figures.get("static_graph") is True, "DDP was not built with static_graph=True")
        expect(figures.get("backend") == ("gloo" if cpu else "nccl"), f"unexpected backend {figures.get('backend')}")
    if strategy in ("fsdp2", "fsdp2_offload_ckpt", "tp2d_hybrid"):
        expect(figures.get("fsdp2_modules", 0) >= blocks + 1,
               f"expected ≥{blocks + 1} FSDP2 modules, got {figures.get('fsdp2_modules')}")  # fmt: skip
    if strategy == "fsdp2_offload_ckpt":
        expect(figures.get("offload_policy") == "CPUOffloadPolicy",
               f"expected CPUOffloadPolicy, got {figures.get('offload_policy')}")  # fmt: skip
        expect(figures.get("checkpointed_modules") == blocks,
               f"expected {blocks} checkpointed blocks, got {figures.get('checkpointed_modules')}")  # fmt: skip
        expect(figures.get("param_devices") == ["cpu"], f"expected local shards on cpu, got "
               f"{figures.get('param_devices')}")  # fmt: skip
    if strategy == "tp2d_hybrid":
        expect(figures.get("dtensor_parameters", 0) > 0, "no parameter is a DTensor")
    if strategy.startswith("deepspeed_"):
        stage = 3 if "zero3" in strategy else 2
        expect(figures.get("zero_stage") == stage, f"expected ZeRO stage {stage}, got {figures.get('zero_stage')}")
    if strategy == "deepspeed_zero3_offload_ckpt":
        expect(figures.get("checkpoint_wrappers") == blocks,
               f"expected {blocks} checkpointed blocks, got {figures.get('checkpoint_wrappers')}")  # fmt: skip
    if check.plugin == "fp8-torchao":
        expect(len(figures["float8_linear"]) > 0, "no Linear layer became Float8Linear")
    if check.plugin == "nf4-bnb":
        expect(len(figures["linear4bit"]) > 0, "no Linear layer became Linear4bit")
    if check.plugin == "bf16-fp32-reduce":
        policy = figures.get("mixed_precision", {})
        expect(policy.get("param_dtype") == "torch.bfloat16" and policy.get("reduce_dtype") == "torch.float32",
               f"expected bf16 params and fp32 reduction, got {policy}")  # fmt: skip
    return problems


def proof_result(check: Check, figures: dict[str, Any], failure: str | None) -> list[str]:
    """What a proof check must show: its configuration failed as ``check.expect`` says; empty when it did."""
    if check.expect == "no training step":
        if failure is not None or not figures.get("losses"):
            return []
        return [f"training_step ran {len(figures['losses'])} time(s): {check.proves} did not fail"]
    if failure is not None and re.search(check.expect, failure):
        return []
    return [f"expected a failure matching {check.expect!r}, got {failure or 'a run that trained'}"]


def _require(check: Check, cpu: bool) -> None:
    for module in check.requires:
        try:
            importlib.import_module(module)
        except Exception as error:  # an optional package that fails to import for any reason
            raise CheckSkipped(f"{module} does not import: {type(error).__name__}: {error}") from None
    if check.below_capability is not None and not cpu:
        import torch

        have = torch.cuda.get_device_capability(0)
        if have >= check.below_capability:
            need = ".".join(map(str, check.below_capability))
            raise CheckSkipped(f"proves a failure below compute capability {need}; the GPU has {have[0]}.{have[1]}")
    if check.min_capability is not None and not cpu:
        import torch

        have = torch.cuda.get_device_capability(0)
        if have < check.min_capability:
            need = ".".join(map(str, check.min_capability))
            raise CheckSkipped(f"needs compute capability {need}, the GPU has {have[0]}.{have[1]}")


def _fit(check: Check, sizes: Sizes, cpu: bool) -> dict[str, Any]:
    import lightning.pytorch as pl
    import torch
    from torch.utils.data import DataLoader

    import lightning_presets

    models = _models()
    timings: list[float] = []
    state: dict[str, Any] = {}

    class Module(pl.LightningModule):  # type: ignore[misc]  # Lightning is not followed by mypy here
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.model = models.TinyTransformer(sizes.vocab, sizes.dim, sizes.heads, sizes.layers)
            self.losses: list[float] = []
            self._started = 0.0

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = models.next_token_loss(self.model, batch)
            self.losses.append(float(loss.detach().float().item()))
            return loss

        def configure_optimizers(self) -> Any:
            parameters = (
                [p for p in self.parameters() if p.requires_grad] if check.trainable_only else self.parameters()
            )
            return torch.optim.AdamW(parameters, lr=LEARNING_RATE)

        def _sync(self) -> None:
            if not cpu:
                torch.cuda.synchronize()

        def on_train_start(self) -> None:
            if not cpu:
                torch.cuda.reset_peak_memory_stats()

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> None:
            self._sync()
            self._started = time.perf_counter()

        def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
            self._sync()
            timings.append(time.perf_counter() - self._started)

        def on_train_end(self) -> None:
            state["figures"] = _inspect(self.trainer.strategy, self)
            if not cpu:
                state["peak_memory_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)

    class TensorParallelModule(Module):
        def configure_model(self) -> None:
            from torch.distributed.tensor import DTensor

            if not any(isinstance(p, DTensor) for p in self.model.parameters()):
                models.parallelize(self.model, self.device_mesh)

    module = TensorParallelModule() if check.configure_model else Module()
    total_parameters = sum(p.numel() for p in module.parameters())
    devices = 2 if cpu else (_visible_gpus() if check.all_devices else 1)
    arguments: dict[str, Any] = {"strategy": check.strategy, "accelerator": "cpu" if cpu else "cuda",
                                 "devices": devices}  # fmt: skip
    if check.precision is not None:
        arguments["precision"] = "32-true" if cpu else check.precision
    if check.plugin is not None:
        arguments["plugins"] = [lightning_presets.precision(check.plugin)]
    if check.lightning_plugin is not None:
        plugins = importlib.import_module("lightning.pytorch.plugins")
        arguments["plugins"] = [getattr(plugins, check.lightning_plugin)("bf16-mixed", "cpu" if cpu else "cuda")]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = pl.Trainer(**arguments, max_steps=sizes.steps, logger=False, enable_checkpointing=False,
                             enable_progress_bar=False, enable_model_summary=False,
                             num_sanity_val_steps=0)  # fmt: skip
        count = sizes.steps * sizes.batch * devices
        data = DataLoader(models.counting_sequences(count, sizes.sequence + 1, sizes.vocab), batch_size=sizes.batch)
        trainer.fit(module, data)
    codes = sorted({code for w in caught for code in re.findall(r"\bLP\d{3}\b", str(w.message))})
    steady = timings[1:] or timings
    figures = {
        "strategy_class": type(trainer.strategy).__name__,
        "precision_plugin": type(trainer.precision_plugin).__name__,
        "accelerator": arguments["accelerator"],
        "devices": devices,
        "world_size": trainer.world_size,
        "parameters": total_parameters,
        "sizes": {key: getattr(sizes, key) for key in Sizes.__slots__},
        "losses": [round(loss, 5) for loss in module.losses],
        "step_time_ms_median": round(statistics.median(steady) * 1000, 2) if steady else None,
        "first_step_ms": round(timings[0] * 1000, 2) if timings else None,
        "peak_memory_mib": state.get("peak_memory_mib"),
        "preset_warnings": codes,
        **state.get("figures", {}),
    }
    if check.strategy.startswith("deepspeed_"):  # the preset's own config lets torch's AdamW step offloaded state
        figures["optimizer"] = "torch.optim.AdamW (the preset sets zero_force_ds_cpu_optimizer=false; LP416 warns)"
        figures["zero_force_ds_cpu_optimizer"] = trainer.strategy.config.get("zero_force_ds_cpu_optimizer")
    return figures


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def _cli_check() -> dict[str, Any]:
    """``lightning-presets check`` through its own parser and engine; afterwards CUDA must still be untouched."""
    import torch

    from lightning_presets.cli import _check as cli_check
    from lightning_presets.tools import verdict as _verdict

    parser = argparse.ArgumentParser(prog="lightning-presets check")
    cli_check.add_arguments(parser)
    report = _verdict.run_check(cli_check.request_from(parser.parse_args(list(CLI_ARGUMENTS[1:]))))
    code = report.exit_code()
    initialized = torch.cuda.is_initialized()  # type: ignore[no-untyped-call]  # read first: nothing below may touch CUDA before it
    figures = {
        "command": "lightning-presets " + " ".join(CLI_ARGUMENTS),
        "exit_code": code,
        "evidence": report.evidence,
        "codes": list(report.codes),
        "check_ms": round(report.elapsed_ms, 2),
        "cuda_initialized_after": initialized,
        "cuda_available": torch.cuda.is_available(),
    }
    problems = []
    if code != 0:
        problems.append(f"exit code {code}, expected 0: {cli_check.render(report, strict=False)[-2000:]}")
    if figures["cuda_initialized_after"]:
        problems.append("the check initialized CUDA in its own process")
    if problems:
        raise CheckFailed("; ".join(problems))
    return figures


PLAN_PRESETS = ("ddp_static_graph", "fsdp2", "fsdp2_offload_ckpt", "tp2d_hybrid")
PLAN_TOLERANCE = 0.15


def _plan_memory(cpu: bool) -> dict[str, Any]:
    """``plan --model`` (traced on this machine's CPU) against the real peak of each preset's second step.

    The plan covers every GPU of this machine; each preset then trains in its own process
    (``benchmarks/gpu/plan_fit.py``, the same model and loss). Within ``PLAN_TOLERANCE`` or the check fails.
    """
    import torch

    sys.path.insert(0, str(SCRIPT.parent))
    plan_fit = importlib.import_module("plan_fit")
    from lightning_presets.tools import plan as _plan

    devices = 2 if cpu else torch.cuda.device_count()
    memory = 80 * 2**30 if cpu else torch.cuda.get_device_properties(0).total_memory
    presets = tuple(name for name in PLAN_PRESETS if devices >= 2 or name != "tp2d_hybrid")
    request = _plan.PlanRequest(model=plan_fit.model_spec(cpu), gpus_per_node=devices, gpu_memory=memory,
                                precision="32-true" if cpu else "bf16-mixed", presets=presets)  # fmt: skip
    planned = {each.preset: each for each in _plan.plan(request).estimates}
    figures: dict[str, Any] = {"model": plan_fit.model_spec(cpu), "devices": devices,
                               "tolerance": PLAN_TOLERANCE, "presets": {}}  # fmt: skip
    problems = []
    for name in presets:
        done = subprocess.run([sys.executable, str(SCRIPT.parent / "plan_fit.py"), "--preset", name,
                               *(["--cpu"] if cpu else [])], capture_output=True, text=True, timeout=120,
                              env=_child_env(), check=False)  # fmt: skip
        lines = [line for line in done.stdout.splitlines() if line.startswith(plan_fit.PREFIX)]
        if done.returncode != 0 or not lines:
            problems.append(f"{name}: the real run failed ({done.returncode}): {done.stderr[-500:]}")
            continue
        real = json.loads(lines[-1][len(plan_fit.PREFIX) :])
        estimate = planned[name]
        row = {"planned_peak_mib": round(estimate.total_peak / 2**20, 1), "evidence": estimate.evidence,
               "planned": {key: value for key, value in estimate.as_dict()["per_gpu_bytes"].items()}}  # fmt: skip
        if "peak_bytes" in real:
            ratio = real["peak_bytes"] / estimate.total_peak
            row.update(measured_peak_mib=round(real["peak_bytes"] / 2**20, 1), ratio=round(ratio, 4))
            if abs(ratio - 1) > PLAN_TOLERANCE:
                problems.append(f"{name}: measured {row['measured_peak_mib']} MiB, planned {row['planned_peak_mib']} "
                                f"MiB (ratio {ratio:.3f})")  # fmt: skip
        figures["presets"][name] = row
    if problems:
        raise CheckFailed("; ".join(problems))
    return figures


def run_child(name: str, cpu: bool) -> int:
    """One check in this process; rank 0 prints one ``GPU_CHECK_RESULT`` line."""
    check = BY_NAME[name]
    sizes = CPU_SIZES if cpu else GPU_SIZES
    if cpu:
        os.environ.setdefault("OMP_NUM_THREADS", "1")
    status, reason, figures = "passed", "", {}
    try:
        _require(check, cpu)
        if name == "cli_check":
            figures = _cli_check()
        elif name == "plan_memory":
            figures = _plan_memory(cpu)
        elif check.proves:
            os.environ["LIGHTNING_PRESETS_SKIP"] = ",".join(check.proves)
            failure = None
            try:
                figures = _fit(check, sizes, cpu)
            except Exception as error:  # the failure the proof is about
                failure = f"{type(error).__name__}: {error}"[:2000]
                figures = {"failure": failure}
            problems = proof_result(check, figures, failure)
            if problems:
                raise CheckFailed("; ".join(problems))
        else:
            figures = _fit(check, sizes, cpu)
            problems = _expectations(check, figures, sizes, cpu)
            if problems:
                raise CheckFailed("; ".join(problems))
    except CheckSkipped as error:
        status, reason = "skipped", str(error)
    except CheckFailed as error:
        status, reason = "failed", str(error)
    except Exception as error:  # the run itself broke: report it as the check's failure
        traceback.print_exc()
        status, reason = "failed", f"{type(error).__name__}: {error}"[:2000]
    if _rank() == 0:
        _emit(RESULT_PREFIX, {"status": status, "reason": reason, "figures": figures})
    _shut_down()
    return 0 if status != "failed" else 1


def _shut_down() -> None:
    """Destroy the process group before exit: a live group can hang or abort the interpreter at shutdown."""
    try:
        import torch.distributed as dist
    except ImportError:
        return
    if dist.is_available() and dist.is_initialized():
        with contextlib.suppress(Exception):
            dist.destroy_process_group()


def run_probe(import_optional: bool) -> int:
    """Versions, devices and optional packages, as one ``GPU_CHECK_ENV`` line."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
    }
    try:
        import torch
    except Exception as error:
        info["torch_error"] = f"{type(error).__name__}: {error}"
        _emit(ENV_PREFIX, info)
        return 0
    info.update(torch=torch.__version__, torch_cuda=torch.version.cuda, cuda_available=torch.cuda.is_available())
    info["gpus"] = torch.cuda.device_count() if info["cuda_available"] else 0
    info["devices"] = []
    for index in range(info["gpus"]):
        properties = torch.cuda.get_device_properties(index)
        info["devices"].append({"name": properties.name, "capability": f"{properties.major}.{properties.minor}",
                                "memory_gib": round(properties.total_memory / 2**30, 1)})  # fmt: skip
    if info["gpus"]:
        info["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))  # type: ignore[no-untyped-call]
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    for module in ("lightning", "lightning_presets"):
        try:
            imported = importlib.import_module(module)
            info[module] = getattr(imported, "__version__", "?")
            info[f"{module}_path"] = str(Path(imported.__file__ or "").parent)
        except Exception as error:
            info[f"{module}_error"] = f"{type(error).__name__}: {error}"
    info["optional"] = {}
    for module in OPTIONAL_PACKAGES:  # imported only where they can run (or when asked)
        info["optional"][module] = _optional(module, import_optional or bool(info["gpus"]))
    _emit(ENV_PREFIX, info)
    return 0


def _optional(module: str, really_import: bool) -> str:
    from importlib.metadata import PackageNotFoundError, version
    from importlib.util import find_spec

    if find_spec(module) is None:
        return "not installed"
    if not really_import:
        return "installed (not imported: no CUDA device)"
    try:
        imported = importlib.import_module(module)
    except Exception as error:
        return f"fails to import: {type(error).__name__}: {str(error)[:300]}"
    with contextlib.suppress(PackageNotFoundError, ValueError):
        return version(module.replace("_", "-"))
    return str(getattr(imported, "__version__", "importable"))


# --------------------------------------------------------------------------- the harness


@dataclass(slots=True)
class Record:
    name: str
    status: str
    reason: str
    duration_s: float
    figures: dict[str, Any] = field(default_factory=dict)
    command: str = ""
    returncode: int | None = None
    log_tail: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "reason": self.reason,
                "duration_s": round(self.duration_s, 2), "figures": self.figures, "command": self.command,
                "returncode": self.returncode, "log_tail": self.log_tail}  # fmt: skip


@dataclass(slots=True)
class Running:
    check: Check
    process: subprocess.Popen[str]
    started: float
    timeout_s: float
    command: str


def source_metadata(folder: Path) -> Path | None:
    """When lightning-presets is not installed, a ``.dist-info`` made from pyproject.toml, under ``folder``.

    The presets are found through entry points, which come from installed metadata; with only ``src/`` on
    the path (a GPU machine that got this working tree) no preset name would resolve. The folder holds
    metadata only (name, version, entry points): the code is still imported from ``src/``.
    """
    from importlib.metadata import PackageNotFoundError, distribution

    try:
        distribution("lightning-presets")
    except PackageNotFoundError:
        pass
    else:
        return None
    try:
        import tomllib
    except ImportError:  # Python 3.10: no TOML reader in the standard library
        return None
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    match = re.search(r'__version__ = "([^"]+)"', (ROOT / "src/lightning_presets/_version.py").read_text())
    version = match.group(1) if match else "0"
    info = folder / f"lightning_presets-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: lightning-presets\nVersion: {version}\n")
    groups = project.get("entry-points", {})
    text = "".join(
        f"[{group}]\n" + "".join(f"{name} = {value}\n" for name, value in entries.items()) + "\n"
        for group, entries in groups.items()
    )
    (info / "entry_points.txt").write_text(text)
    return folder


_METADATA_PATHS: list[str] = []


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    source = str(ROOT / "src")
    existing = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != source]
    paths = [source, *_METADATA_PATHS, *existing]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def _free_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _start(check: Check, cpu: bool, timeout_s: float) -> Running:
    command = [sys.executable, str(SCRIPT), "--run", check.name, *(["--cpu"] if cpu else [])]
    env = _child_env()
    if cpu:  # the CPU smoke's checks run side by side (run_harness): each rendezvous gets a port of its own
        env["MASTER_PORT"] = str(_free_port())
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True,  # its own process group: a timeout kills every rank it launched
    )  # fmt: skip
    shown = " ".join(["python", str(SCRIPT.relative_to(ROOT)), *command[2:]])
    return Running(check=check, process=process, started=time.monotonic(), timeout_s=timeout_s, command=shown)


def _kill_group(process: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _finish(running: Running) -> tuple[Record, str]:
    remaining = max(1.0, running.timeout_s - (time.monotonic() - running.started))
    timed_out = False
    try:
        output, _ = running.process.communicate(timeout=remaining)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(running.process)
        output, _ = running.process.communicate()
    _kill_group(running.process)  # ranks left behind by a finished rank 0
    duration = time.monotonic() - running.started
    result = None
    for line in output.splitlines():
        if line.startswith(RESULT_PREFIX):
            result = json.loads(line[len(RESULT_PREFIX) :])
    tail = "\n".join(output.splitlines()[-40:])
    record = Record(name=running.check.name, status="failed", reason="", duration_s=duration,
                    command=running.command, returncode=running.process.returncode)  # fmt: skip
    if timed_out:
        record.reason = f"timed out after {running.timeout_s:.0f} s (process group killed)"
    elif result is None:
        record.reason = f"exited with {running.process.returncode} without a result line"
    else:
        record.status, record.reason, record.figures = result["status"], result["reason"], result["figures"]
        if record.status == "passed" and running.process.returncode not in (0, None):
            record.status, record.reason = "failed", f"result passed but exit code {running.process.returncode}"
    if record.status == "failed":
        record.log_tail = tail
    return record, output


def _probe(import_optional: bool, timeout_s: float = 120) -> dict[str, Any]:
    command = [sys.executable, str(SCRIPT), "--probe", *(["--import-optional"] if import_optional else [])]
    try:
        done = subprocess.run(command, cwd=ROOT, env=_child_env(), capture_output=True, text=True,
                              timeout=timeout_s, check=False)  # fmt: skip
    except subprocess.TimeoutExpired:
        return {"probe_error": f"the environment probe timed out after {timeout_s:.0f} s"}
    for line in done.stdout.splitlines():
        if line.startswith(ENV_PREFIX):
            info: dict[str, Any] = json.loads(line[len(ENV_PREFIX) :])
            return info
    return {"probe_error": f"exit {done.returncode}: {done.stderr[-1500:]}"}


def _skip_reason(check: Check, env: dict[str, Any], cpu: bool) -> str | None:
    """Why a check cannot run here, decided before starting it."""
    if "torch_error" in env or "probe_error" in env:
        return f"torch does not work here: {env.get('torch_error') or env.get('probe_error')}"
    if not cpu and not env.get("gpus"):
        return NO_CUDA
    for module in ("lightning", "lightning_presets"):
        if f"{module}_error" in env:
            return f"{module} does not import: {env[f'{module}_error']}"
    optional = env.get("optional", {})
    for module in check.requires:
        state = optional.get(module, "not installed")
        if state == "not installed" or state.startswith("fails"):
            return f"{module} {state}"
    if check.below_capability is not None and not cpu:
        capability = tuple(int(part) for part in env["devices"][0]["capability"].split("."))
        if capability >= check.below_capability:
            need = ".".join(map(str, check.below_capability))
            return f"proves a failure below compute capability {need}; the GPU has {env['devices'][0]['capability']}"
    if check.min_capability is not None and not cpu:
        capability = tuple(int(part) for part in env["devices"][0]["capability"].split("."))
        if capability < check.min_capability:
            need = ".".join(map(str, check.min_capability))
            return f"needs compute capability {need}, the GPU has {env['devices'][0]['capability']}"
    return None


def _selected(only: str | None, cpu: bool) -> list[Check]:
    checks = [check for check in CHECKS if check.cpu_smoke] if cpu else list(CHECKS)
    if only:
        wanted = [name.strip() for name in only.split(",") if name.strip()]
        unknown = sorted(set(wanted) - set(BY_NAME))
        if unknown:
            raise SystemExit(f"unknown check(s) {', '.join(unknown)}; known: {', '.join(BY_NAME)}")
        checks = [check for check in checks if check.name in wanted]
    return checks


def _memory_ratio(records: dict[str, Record]) -> None:
    """Peak GPU memory of fsdp_offload_ckpt over the plain baseline (per GPU; both trained the same model)."""
    offload, baseline = records.get("fsdp_offload_ckpt"), records.get("baseline_auto")
    if not (offload and baseline and offload.status == baseline.status == "passed"):
        return
    ours, reference = offload.figures.get("peak_memory_mib"), baseline.figures.get("peak_memory_mib")
    if not ours or not reference:
        return
    offload.figures["baseline_peak_memory_mib"] = reference
    offload.figures["memory_ratio_vs_auto"] = round(ours / reference, 4)
    if ours >= reference:
        offload.status = "failed"
        offload.reason = f"peak GPU memory {ours} MiB is not below the plain run's {reference} MiB"


def _log_lines(record: Record) -> Iterator[str]:
    reason = f": {record.reason}" if record.reason else ""
    yield f"[{record.status.upper():7}] {record.name} ({record.duration_s:.1f} s){reason}"
    keys = ("peak_memory_mib", "memory_ratio_vs_auto", "step_time_ms_median", "losses", "fsdp_units",
            "checkpoint_wrappers", "param_devices", "fsdp2_modules", "checkpointed_modules", "offload_policy",
            "comm_hooks", "zero_stage", "float8_linear", "linear4bit", "mixed_precision", "preset_warnings",
            "exit_code", "cuda_initialized_after")  # fmt: skip
    for key in keys:
        if key in record.figures and record.figures[key] not in (None, [], {}):
            yield f"          {key}: {record.figures[key]}"


def run_harness(args: argparse.Namespace) -> int:
    started_at = datetime.now(timezone.utc)
    start = time.monotonic()
    deadline = start + args.budget
    cpu = args.cpu_smoke
    checks = _selected(args.only, cpu)
    out = (
        Path(args.out)
        if args.out
        else Path(os.environ["OUT"])
        if os.environ.get("OUT")
        else ROOT / "benchmarks/results/gpu"
    )
    out.mkdir(parents=True, exist_ok=True)
    log: list[str] = []
    scratch = Path(tempfile.mkdtemp(prefix="lp-gpu-checks-"))
    made = source_metadata(scratch)
    if made is not None:
        _METADATA_PATHS.append(str(made))

    def say(text: str) -> None:
        print(text, flush=True)
        log.append(text)

    env = _probe(import_optional=False)
    say(f"lightning-presets GPU checks ({'cpu-smoke' if cpu else 'gpu'}), {started_at:%Y-%m-%d %H:%M:%S} UTC")
    if made is not None:
        say(f"  lightning-presets is not installed: its entry points come from pyproject.toml ({made})")
        env["entry_points_from"] = "pyproject.toml (not installed)"
    for key in ("python", "torch", "torch_cuda", "nccl", "lightning", "lightning_presets", "gpus", "devices",
                "optional", "torch_error", "lightning_error", "lightning_presets_error", "probe_error"):  # fmt: skip
        if key in env:
            say(f"  {key}: {env[key]}")
    records: dict[str, Record] = {}
    background: list[Running] = []
    outputs: dict[str, str] = {}
    for check in checks:
        reason = _skip_reason(check, env, cpu)
        left = deadline - time.monotonic()
        if reason is None and left < MIN_CHECK_S:
            reason = f"the overall budget of {args.budget:.0f} s was used up"
        if reason is not None:
            records[check.name] = Record(name=check.name, status="skipped", reason=reason, duration_s=0.0)
            continue
        running = _start(check, cpu, min(check.timeout_s * (3 if cpu else 1), left))
        if cpu or check.name == "cli_check":
            # cli_check is CPU-only: it runs beside the GPU checks. The CPU smoke's checks all run side by side:
            # each is its own process group with its own timeout, and most of their time is interpreter start-up
            # (rank 0's, then rank 1's), which one at a time leaves a core idle.
            background.append(running)
            continue
        records[check.name], outputs[check.name] = _finish(running)
        say(next(_log_lines(records[check.name])))
    for running in background:
        records[running.check.name], outputs[running.check.name] = _finish(running)
        if cpu:
            say(next(_log_lines(records[running.check.name])))
    _memory_ratio(records)
    ordered = [records[check.name] for check in checks]
    summary = {status: sum(1 for r in ordered if r.status == status) for status in ("passed", "failed", "skipped")}
    report = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "mode": "cpu-smoke" if cpu else "gpu",
        "started_utc": started_at.isoformat(timespec="seconds"),
        "duration_s": round(time.monotonic() - start, 2),
        "budget_s": args.budget,
        "environment": env,
        "summary": summary,
        "checks": [record.as_dict() for record in ordered],
    }
    say("")
    for record in ordered:
        for line in _log_lines(record):
            say(line)
    say(f"summary: {summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped "
        f"in {report['duration_s']} s")  # fmt: skip
    (out / "gpu_checks.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
    details = [f"\n===== {name} =====\n{text}" for name, text in outputs.items()]
    (out / "gpu_checks.log").write_text("\n".join(log) + "\n" + "".join(details))
    shutil.rmtree(scratch, ignore_errors=True)
    say(f"wrote {out / 'gpu_checks.json'} and {out / 'gpu_checks.log'}")
    if summary["failed"]:
        return 1
    if not cpu and not env.get("gpus"):
        # A GPU node whose CUDA is broken must not pass: nothing ran, so nothing was shown to work.
        say(f"no CUDA device is visible: every GPU check was skipped; exit {EXIT_NO_GPU}")
        return EXIT_NO_GPU
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", choices=sorted(BY_NAME), help="run one check in this process (used by the harness)")
    parser.add_argument("--cpu", action="store_true", help="with --run: accelerator cpu, 2 gloo processes")
    parser.add_argument("--probe", action="store_true", help="print the environment as one line (used by the harness)")
    parser.add_argument("--import-optional", action="store_true", help="with --probe: import the optional packages")
    parser.add_argument("--cpu-smoke", action="store_true", help="run the CPU-capable checks on 2 CPU processes")
    parser.add_argument("--only", help="comma-separated check names")
    parser.add_argument("--out", help="output folder (default $OUT, else benchmarks/results/gpu)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="overall seconds for all checks")
    args = parser.parse_args(argv)
    if args.probe:
        return run_probe(args.import_optional)
    if args.run:
        return run_child(args.run, args.cpu)
    return run_harness(args)


if __name__ == "__main__":
    sys.exit(main())
