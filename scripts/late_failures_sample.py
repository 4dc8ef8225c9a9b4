"""A broad sample of ``Trainer(...)``/``Fabric(...)`` constructions on simulated hardware, traced line by line.

``python scripts/late_failures_sample.py FILE...`` constructs every case (``late_failures_cases``) in this fresh
interpreter, with ``sys.settrace`` recording which lines of the given source files execute, from Lightning's import to
the end of the last construction. Whatever executes here can run while a user builds a Trainer or Fabric (or the
strategy and plugins handed to it); what never executes happens later. Nothing trains: no process starts, no process
group or CUDA context is created. Then, untraced, it builds the config each DeepSpeed strategy passes and runs
DeepSpeed's config parser on those and on user configs, tracing DeepSpeed's own files only. It prints JSON: ``lines``
(``{file: [line, ...]}``, while constructing), ``deepspeed_lines`` (the same, while DeepSpeed's parser runs),
``cases``, ``outcomes`` (how many constructions ended how), ``deepspeed_configs`` and ``deepspeed_models`` (the
pydantic config classes the parser built).

The files traced include the backends' areas (DeepSpeed's engine and ZeRO optimizers, torch's FSDP, DDP, DTensor and
rendezvous modules): none of their functions may run while constructing.
"""

from __future__ import annotations

import contextlib
import importlib
import itertools
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any
from unittest import mock

from late_failures_cases import DEEPSPEED_PRECISIONS, Case, Namespace, cases, namespace, strategy_names

# --- DeepSpeed's config parser ------------------------------------------------------------------------------------


def lightning_deepspeed_configs(namespaces: dict[str, Namespace]) -> Iterator[dict[str, Any]]:
    """The config each DeepSpeed strategy of each registry passes to ``deepspeed.initialize``, for each precision.

    Lightning completes it at setup: the precision section (its own ``_format_config``), the batch size it logs with
    and, for the Trainer, ``gradient_accumulation_steps`` and ``gradient_clipping`` from the Trainer's flags.
    """
    import copy

    from lightning_presets.tools.simulation import simulated_cuda

    with simulated_cuda(2), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for ns in namespaces.values():
            deepspeed_class = ns.get("DeepSpeedStrategy")
            for name in strategy_names(ns):
                for precision in DEEPSPEED_PRECISIONS:
                    try:
                        built = ns.factory(strategy=name, accelerator="cuda", devices=2, precision=precision)
                    except Exception:
                        continue
                    strategy = built.strategy
                    if not isinstance(strategy, deepspeed_class):
                        break
                    strategy._format_config()
                    config = copy.deepcopy(strategy.config)
                    if ns.target == "trainer":
                        config.setdefault("gradient_accumulation_steps", 1)
                        config.setdefault("gradient_clipping", 0.0)
                    yield config


USER_CONFIGS: tuple[dict[str, Any], ...] = (
    {"train_batch_size": 16, "train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 4},
    {"train_batch_size": 16}, {"train_micro_batch_size_per_gpu": 2}, {"train_batch_size": 15,
     "train_micro_batch_size_per_gpu": 4}, {"train_batch_size": 0}, {"gradient_accumulation_steps": 2},
    {"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "gradient_accumulation_steps": "auto"},
    {"fp16": {"enabled": True, "loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
              "hysteresis": 2, "min_loss_scale": 1}},
    {"fp16": {"enabled": True, "loss_scale": True}}, {"fp16": {"enabled": True, "loss_scale": -1}},
    {"fp16": {"enabled": True, "loss_scale": float("inf")}}, {"fp16": {"enabled": True, "loss_scale": "x"}},
    {"fp16": {"enabled": True, "loss_scale_window": True, "min_loss_scale": 0.5}},
    {"fp16": {"enabled": True, "loss_scale_window": float("nan")}}, {"fp16": {"enabled": True, "min_loss_scale": 0}},
    {"fp16": {"enabled": True, "loss_scale_window": 0}}, {"fp16": {"enabled": "auto"}},
    {"fp16": {"enabled": True}, "bf16": {"enabled": True}}, {"bf16": {"enabled": True}},
    {"bfloat16": {"enabled": True}},
    {"amp": {"enabled": True}}, {"fp16": {"enabled": True, "auto_cast": True}},
    {"bf16": {"enabled": True, "bf16_master_weights_and_grads": True, "bf16_optimizer_states": True}},
    {"bf16": {"enabled": True, "bf16_optimizer_states": True}},
    {"torch_autocast": {"enabled": True, "dtype": "bfloat16"}},
    {"zero_optimization": True}, {"zero_optimization": False}, {"zero_optimization": 2},
    {"zero_optimization": {"stage": 0}}, {"zero_optimization": {"stage": 1}}, {"zero_optimization": {"stage": 2}},
    {"zero_optimization": {"stage": 3}}, {"zero_optimization": {"stage": 4}}, {"zero_optimization": {"stage": "auto"}},
    {"zero_optimization": {"stage": 2, "cpu_offload": True}},
    {"zero_optimization": {"stage": 3, "cpu_offload_param": True}},
    {"zero_optimization": {"stage": 3, "cpu_offload_use_pin_memory": True, "cpu_offload": True}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "pin_memory": True}}},
    {"zero_optimization": {"stage": 2, "offload_param": {"device": "cpu"}}},
    {"zero_optimization": {"stage": 3, "offload_param": {"device": "nvme", "nvme_path": "/tmp"},
                           "offload_optimizer": {"device": "nvme", "nvme_path": "/tmp", "ratio": 0.5}}},
    {"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}},
    {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "bogus"}}},
    {"zero_optimization": {"stage": 2, "bogus_key": 1}}, {"zero_optimization": {"stage": 2, "overlap_comm": "auto"}},
    {"zero_optimization": {"stage": 3, "stage3_gather_fp16_weights_on_model_save": True}},
    {"zero_optimization": {"stage": 3, "stage3_gather_16bit_weights_on_model_save": True,
                           "stage3_max_live_parameters": "auto", "stage3_prefetch_bucket_size": "auto",
                           "stage3_param_persistence_threshold": "auto", "reduce_bucket_size": "auto"}},
    {"zero_optimization": {"stage": 1, "compute_grad_norm": False}},
    {"zero_optimization": {"stage": 3, "compute_grad_norm": False}},
    {"zero_optimization": {"stage": 3, "elastic_checkpoint": True}},
    {"zero_optimization": {"stage": 2, "zenflow": {"topk_ratio": 0.1}}},
    {"zero_optimization": {"stage": 3, "zero_hpz_partition_size": 2, "zero_quantized_weights": True,
                           "mics_shard_size": 2, "leaf_module": {"classes": ["Linear"]}}},
    {"zero_optimization": {"stage": 2, "reduce_scatter": False, "contiguous_gradients": False,
                           "round_robin_gradients": True, "allgather_partitions": False}},
    {"zero_optimization": {"stage": 3}, "gradient_allreduce_op": "sum"},
    {"zero_optimization": {"stage": 1}, "gradient_allreduce_op": "bogus"},
    {"zero_optimization": {"stage": 1}, "gradient_allreduce_op": "mean"},
    {"zero_allow_untested_optimizer": True, "zero_force_ds_cpu_optimizer": False},
    {"optimizer": {"type": "AdamW", "params": {"lr": 1e-3}}, "scheduler": {"type": "WarmupLR", "params": {}}},
    {"optimizer": {"type": "Adam", "params": {"lr": "auto"}}},
    {"optimizer": {"type": "OneBitAdam"}}, {"optimizer": {"type": "Lamb"}},
    {"gradient_clipping": 1.0}, {"gradient_clipping": "auto"}, {"gradient_clipping": -1},
    {"activation_checkpointing": {"partition_activations": True, "cpu_checkpointing": True,
                                  "contiguous_memory_optimization": True, "number_checkpoints": 2,
                                  "synchronize_checkpoint_boundary": True, "profile": True}},
    {"activation_checkpointing": {"contiguous_memory_optimization": True}},
    {"activation_checkpointing": {"bogus": 1}},
    {"communication_data_type": "fp16"}, {"communication_data_type": "bogus"},
    {"seq_parallel_communication_data_type": "bf16"}, {"prescale_gradients": True, "gradient_predivide_factor": 2.0},
    {"sparse_gradients": True}, {"disable_allgather": True}, {"steps_per_print": 0}, {"wall_clock_breakdown": True},
    {"dump_state": True}, {"memory_breakdown": True}, {"eigenvalue": {"enabled": True}},
    {"tensorboard": {"enabled": True, "output_path": "/tmp"}}, {"wandb": {"enabled": True}},
    {"csv_monitor": {"enabled": True}}, {"comet": {"enabled": True}}, {"comms_logger": {"enabled": True}},
    {"flops_profiler": {"enabled": True}}, {"aio": {"block_size": 1048576, "queue_depth": 8}},
    {"elasticity": {"enabled": True, "max_train_batch_size": 16, "micro_batch_sizes": [2]}},
    {"checkpoint": {"tag_validation": "bogus"}}, {"checkpoint": {"tag_validation": "Warn", "load_universal": True}},
    {"checkpoint": {"parallel_write": {"pipeline_stage": True}}},
    {"data_types": {"grad_accum_dtype": "bf16"}}, {"data_types": {"keep_in_fp32_modules": 3}},
    {"pipeline": {"stages": "auto"}}, {"pld": {"enabled": True}}, {"curriculum_learning": {"enabled": True}},
    {"data_efficiency": {"enabled": True}}, {"compile": {"deepcompile": True}}, {"tensor_parallel": {"autotp_size": 2}},
    {"sequence_parallel_size": 2}, {"zenflow": {}}, {"weight_quantization": {}}, {"compression_training": {}},
    {"nebula": {"enabled": True}}, {"autotuning": {"enabled": True}}, {"hybrid_engine": {"enabled": True}},
    {"quantize_training": {"enabled": True}}, {"graph_harvesting": True}, {"use_data_before_expert_parallelism": True},
    {"zero_optimisation": {"stage": 3}}, {"bogus_top_level": 1},
)  # fmt: skip
"""Configs a user passes in ``DeepSpeedStrategy(config=...)``: every section the parser reads, valid and not."""


def deepspeed_configs(namespaces: dict[str, Namespace]) -> Iterator[dict[str, Any]]:
    yield from lightning_deepspeed_configs(namespaces)
    for config in USER_CONFIGS:
        yield {"train_micro_batch_size_per_gpu": 1, **config}


def _models(value: Any, seen: set[int]) -> Iterator[type]:
    """The pydantic model classes (with their bases) reachable from a parsed config's attributes."""
    import pydantic

    if id(value) in seen:
        return
    seen.add(id(value))
    if isinstance(value, pydantic.BaseModel):
        yield from type(value).__mro__
        for name in type(value).model_fields:
            yield from _models(getattr(value, name, None), seen)
    elif isinstance(value, dict | list | tuple):
        for each in value.values() if isinstance(value, dict) else value:
            yield from _models(each, seen)
    elif hasattr(value, "__dict__") and type(value).__module__.startswith("deepspeed"):
        for each in vars(value).values():
            yield from _models(each, seen)


# --- running the sample -------------------------------------------------------------------------------------------


def _returning(value: object) -> Callable[..., object]:
    def probe(*args: object, **kwargs: object) -> object:
        return value

    return probe


_XLA_MODULES = (
    "lightning.pytorch.strategies.xla", "lightning.pytorch.strategies.single_xla",
    "lightning.pytorch.strategies.launchers.xla", "lightning.pytorch.plugins.precision.xla",
    "lightning.fabric.strategies.xla", "lightning.fabric.strategies.single_xla",
    "lightning.fabric.strategies.launchers.xla", "lightning.fabric.strategies.xla_fsdp",
    "lightning.fabric.plugins.precision.xla", "lightning.fabric.plugins.environments.xla",
)  # fmt: skip


def _xla_device(index: int | None = None, *args: Any, **kwargs: Any) -> Any:
    import torch

    return torch.device("xla", index or 0)


@contextlib.contextmanager
def _settings(case: Case) -> Iterator[None]:
    from lightning_presets.tools.simulation import simulated_cluster, simulated_cuda
    from lightning_presets.tools.simulation.lightning import interactive_session
    from lightning_presets.tools.simulation.stand_ins import standing_in

    devices, nodes = 2, 2
    with contextlib.ExitStack() as stack:
        stack.enter_context(simulated_cuda(case.gpus))
        # A rank file the case names is Lightning's to read (the sample wants its failure); the simulation would refuse
        # an unreadable one, so it gets the case's variables without it, and the patch below sets it as given.
        simulated = {key: value for key, value in case.env.items() if key != "LSB_DJOB_RANKFILE"}
        stack.enter_context(simulated_cluster(case.cluster, devices, nodes, simulated))
        stack.enter_context(mock.patch.dict(os.environ, {k: v for k, v in case.env.items()}))
        stack.enter_context(standing_in(*(name for name in case.stand_ins if name != "bitsandbytes")))
        if "bitsandbytes" in case.stand_ins:  # its import skipped: the plugin's own argument checks run without it
            module = importlib.import_module("lightning.fabric.plugins.precision.bitsandbytes")
            stack.enter_context(mock.patch.object(module, "_import_bitsandbytes", _returning(None)))
        if "torch_xla" in case.stand_ins:  # the stand-in turns XLA on in Fabric's modules; the Trainer's too
            sys.modules["torch_xla"].core.xla_model.xla_device = _xla_device  # a real device, as torch_xla gives
            for name in _XLA_MODULES:
                module = importlib.import_module(name)
                if hasattr(module, "_XLA_AVAILABLE"):
                    stack.enter_context(mock.patch.object(module, "_XLA_AVAILABLE", True))
        if "mps" not in case.stand_ins:
            from lightning_presets.tools.simulation import without_mps

            stack.enter_context(without_mps())
        if case.interactive:
            stack.enter_context(interactive_session())
            launcher = importlib.import_module("lightning.fabric.strategies.launchers.multiprocessing")
            stack.enter_context(mock.patch.object(launcher, "_IS_INTERACTIVE", True))
        if case.no_fork:
            stack.enter_context(
                mock.patch("torch.multiprocessing.get_all_start_methods", _returning(["spawn", "forkserver"]))
            )
        yield


def _setting(case: Case) -> tuple[Any, ...]:
    return (case.gpus, case.cluster, tuple(sorted(case.env.items())), case.stand_ins, case.interactive, case.no_fork)


def run(namespaces: dict[str, Namespace]) -> dict[str, int]:
    """Construct every case, those of one simulated setting together (entering a setting costs more than most
    constructions); returns how many ended how (``built``, an exception's name, ``skipped``)."""
    outcomes: dict[str, int] = {}
    for _, group in itertools.groupby(sorted(cases(), key=lambda case: repr(_setting(case))), key=_setting):
        batch = list(group)
        with _settings(batch[0]), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for case in batch:
                for target in case.targets:
                    outcome = _construct(case, namespaces[target])
                    outcomes[outcome] = outcomes.get(outcome, 0) + 1
    return outcomes


def _construct(case: Case, ns: Namespace) -> str:
    try:
        arguments = case.arguments(ns)
        if arguments is None:
            return "skipped"
        if not case.build_only:
            ns.factory(**arguments)
    except Exception as error:
        return type(error).__name__
    return "built"


SCRATCH_CALLERS = {
    (os.path.join("lightning_presets", "strategies", "deepspeed", "parser.py"), "formatted_by_lightning"),
    (os.path.join("lightning_presets", "guards", "strategy.py"), "environment_refusal"),
    (os.path.join("lightning_presets", "guards", "strategy.py"), "launched_world"),
}
"""Where the guards run Lightning's own checks early, on a copy or ahead of time (the DeepSpeed config Lightning will
pass; the cluster environment's validate_settings and the world size a launcher made, whose errors the guard keeps
to itself): lines executed from there are not Lightning's construction."""


def _on_scratch(frame: FrameType | None) -> bool:
    while frame is not None:
        code = frame.f_code
        if any(code.co_name == name and code.co_filename.endswith(path) for path, name in SCRATCH_CALLERS):
            return True
        frame = frame.f_back
    return False


class _Tracer:
    """Records the executed lines of the watched files (a set of paths, or every file under a directory)."""

    def __init__(self, files: set[str], under: str = "") -> None:
        self.executed: dict[str, set[int]] = {}
        executed = self.executed

        def local(frame: FrameType, event: str, arg: Any) -> Any:
            if event == "line":
                executed[frame.f_code.co_filename].add(frame.f_lineno)
            return local

        def in_files(frame: FrameType, event: str, arg: Any) -> Any:
            filename = frame.f_code.co_filename
            if filename not in files or _on_scratch(frame.f_back):
                return None
            executed.setdefault(filename, set()).add(frame.f_lineno)
            return local

        def under_directory(frame: FrameType, event: str, arg: Any) -> Any:
            filename = frame.f_code.co_filename
            if not filename.startswith(under):
                return None
            executed.setdefault(filename, set()).add(frame.f_lineno)
            return local

        self.tracer = under_directory if under else in_files

    @contextlib.contextmanager
    def on(self) -> Iterator[None]:
        sys.settrace(self.tracer)
        try:
            yield
        finally:
            sys.settrace(None)


def _parse_deepspeed(namespaces: dict[str, Namespace]) -> tuple[dict[str, set[int]], list[str], int]:
    """Run DeepSpeed's config parser on every sampled config, tracing DeepSpeed's own files only while it parses."""
    import copy
    import importlib.util

    spec = importlib.util.find_spec("deepspeed")
    if spec is None or not spec.submodule_search_locations:
        return {}, [], 0
    from deepspeed.runtime.config import DeepSpeedConfig

    tracer = _Tracer(set(), under=next(iter(spec.submodule_search_locations)) + os.sep)
    models: set[str] = set()
    count = 0
    configs = list(deepspeed_configs(namespaces))
    for config in configs:  # once untraced: what the parser imports lazily is imported before the trace starts
        with warnings.catch_warnings(), contextlib.suppress(Exception):
            warnings.simplefilter("ignore")
            DeepSpeedConfig(copy.deepcopy(config))
    for config in configs:
        count += 1
        with tracer.on(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                parsed = DeepSpeedConfig(copy.deepcopy(config))
            except Exception:
                continue
        models.update(f"{cls.__module__}:{cls.__qualname__}" for cls in _models(vars(parsed), set()))
    return tracer.executed, sorted(models), count


UNTRACED_IMPORTS = ("torch", "torch.distributed", "torchmetrics", "lightning_utilities", "fsspec", "yaml", "deepspeed",
                    "bitsandbytes")  # fmt: skip
"""What Lightning imports that is not Lightning (deepspeed and bitsandbytes when a case builds their plugins):
imported before the trace starts, as tracing their import is slow."""


def main(files: list[str]) -> int:
    tracer = _Tracer(set(files))
    logging.disable(logging.WARNING)
    with contextlib.redirect_stdout(sys.stderr), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in UNTRACED_IMPORTS:
            with contextlib.suppress(Exception):
                importlib.import_module(name)
    with contextlib.redirect_stdout(sys.stderr):
        with tracer.on():
            import lightning_presets  # noqa: F401  (Lightning's import, and the presets' registration)
            from lightning_presets.tools.simulation.lightning import entry_points_scanned_once

            namespaces = {target: namespace(target) for target in ("trainer", "fabric")}
            with entry_points_scanned_once():  # Lightning's scan for callback entry points, once instead of per case
                outcomes = run(namespaces)
        deepspeed_lines, models, configs = _parse_deepspeed(namespaces)
    lines = {name: sorted(numbers) for name, numbers in tracer.executed.items()}
    parsed = {name: sorted(numbers) for name, numbers in deepspeed_lines.items()}
    report = {"lines": lines, "deepspeed_lines": parsed, "cases": sum(outcomes.values()), "outcomes": outcomes,
              "deepspeed_configs": configs, "deepspeed_models": models}  # fmt: skip
    json.dump(report, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
