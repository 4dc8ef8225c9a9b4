"""One configuration of the guard sweep (``benchmarks/bench_guard_sweep.py``): the job, a rank of it, its reference.

A configuration is a JSON object: ``preset``, ``overrides`` (for ``lightning_presets.strategy``), ``plugin`` (a
precision preset or null), ``trainer`` (Trainer arguments), ``architecture`` (``plain``, ``batchnorm``, ``unused``,
``tied``), ``configure_model`` (the module shards itself when the strategy has a device mesh), ``optimizer``
(``sgd``, ``adamw``, ``adamw_steplr``) and ``manual`` (manual optimization). ``sabotage`` exists for the sweep's
own tests: ``ignore_clipping`` (the ranks skip Lightning's clipping) or ``hang`` (rank 1 stops in its second step);
the reference never sabotages.

Every process writes ``<role>.json`` into its output folder (the facts below, or the error it died of) and
``<role>.pt`` (the final, unsharded parameters). ``rank_main`` and ``reference_main`` are the entry points the
sweep forks; run as a file, the script lets Lightning's own launcher start rank 1 (``--launch lightning``):

    python tests/scripts/sweep_worker.py --config '{"preset": "fsdp2", ...}' --out /tmp/run
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/, for `models`

import torch
from torch import nn
from torch.nn import functional as F

from models import SEQUENCE_LENGTH, VOCAB_SIZE, TinyTransformer, tensor_parallel_plan

PER_RANK_BATCH = 4
TRAIN_SAMPLES = 64
VAL_SAMPLES = 16
QUIET = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False, "enable_model_summary": False}
LEARNING_RATES = {"sgd": 0.1, "adamw": 1e-2, "adamw_steplr": 1e-2}
REFERENCE_PRECISION = {"bf16-fp32-reduce": "bf16-mixed"}
"""A precision preset whose plugin needs a sharded strategy: what it means on one device (bf16 compute, fp32
weights and reductions)."""
DISTRIBUTED_ONLY = ("devices", "num_nodes", "strategy", "sync_batchnorm", "use_distributed_sampler")
"""Trainer arguments the single-process reference does not take: its data split and BatchNorm statistics are
modelled instead (``batch_size``, ``ghost_chunks``)."""


def samples(count: int, seed: int) -> torch.utils.data.TensorDataset:
    """``count`` arithmetic token sequences (random start and stride) with their index: learnable, deterministic."""
    generator = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, VOCAB_SIZE, (count, 1), generator=generator)
    strides = torch.randint(1, 4, (count, 1), generator=generator)
    tokens = (starts + strides * torch.arange(SEQUENCE_LENGTH + 1)) % VOCAB_SIZE
    return torch.utils.data.TensorDataset(torch.arange(count), tokens)


class GhostBatchNorm(nn.BatchNorm1d):
    """BatchNorm over ``chunks`` interleaved sub-batches: what ``chunks`` data-parallel ranks each compute.

    A ``DistributedSampler`` gives rank ``r`` the samples ``r, r + world, ...``; with ``chunks=1`` this is BatchNorm.
    """

    chunks = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.chunks == 1 or not self.training:
            return super().forward(x)
        parts = [
            F.batch_norm(x[r :: self.chunks], self.running_mean, self.running_var, self.weight, self.bias, True,
                         self.momentum or 0.0, self.eps)
            for r in range(self.chunks)
        ]  # fmt: skip
        return torch.stack(parts, dim=1).flatten(0, 1)


class SweepTransformer(TinyTransformer):
    """:class:`TinyTransformer` with a BatchNorm after the embedding, an unused layer, or tied embedding and head."""

    def __init__(self, architecture: str, ghost_chunks: int = 1) -> None:
        super().__init__()
        if architecture == "batchnorm":
            self.batchnorm = GhostBatchNorm(self.embedding.embedding_dim)
            self.batchnorm.chunks = ghost_chunks
        if architecture == "unused":
            self.unused = nn.Linear(self.embedding.embedding_dim, self.embedding.embedding_dim)
        if architecture == "tied":
            self.head.weight = self.embedding.weight

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        if hasattr(self, "batchnorm"):
            x = self.batchnorm(x.transpose(1, 2)).transpose(1, 2)
        for layer in self.layers:
            x = layer(x)
        logits: torch.Tensor = self.head(self.norm(x))
        return logits


def full(tensor: torch.Tensor) -> torch.Tensor:
    """The whole tensor on every rank (a collective for a DTensor)."""
    from torch.distributed.tensor import DTensor

    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def module_class(config: dict[str, Any]) -> type:
    import lightning.pytorch as pl

    class SweepModule(pl.LightningModule):  # type: ignore[misc]
        """The job: records what a careful reviewer would look at, on every rank and in the reference."""

        def __init__(self, ghost_chunks: int, sabotage: str | None = None) -> None:
            super().__init__()
            self.sabotage = sabotage
            torch.manual_seed(0)
            self.model = SweepTransformer(config["architecture"], ghost_chunks)
            self.automatic_optimization = not config["manual"]
            self.recording = True
            self.facts: dict[str, Any] = {"losses": [], "ids": [], "val": [], "grad_norms": [], "lrs": [],
                                          "optimizer_steps": 0, "configure_model_calls": 0}  # fmt: skip

        def _loss(self, batch: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            tokens = batch[1]
            logits = self.model(tokens[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), tokens[:, 1:].reshape(-1))
            return loss, logits

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> torch.Tensor | None:
            if self.sabotage == "hang" and self.global_rank == 1 and batch_idx == 1:
                time.sleep(3600)  # rank 0 waits in the next collective
            loss, logits = self._loss(batch)
            if self.recording:  # not in `check --model`'s steps (under fake tensors, or its rehearsal)
                self.facts["losses"].append(loss.item())
                self.facts["ids"].append(batch[0].tolist())
                self.facts.setdefault("observed", {
                    "logits_dtype": str(logits.dtype),
                    "parameter_dtype": str(next(self.model.parameters()).dtype),
                    "anomaly_detection": torch.is_anomaly_enabled(),
                    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
                })  # fmt: skip
            if self.automatic_optimization:
                return loss
            optimizer = self.optimizers()
            optimizer.zero_grad()
            self.manual_backward(loss)
            optimizer.step()
            scheduler = self.lr_schedulers()
            if scheduler is not None:
                scheduler.step()
            return None

        def validation_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
            loss, _ = self._loss(batch)
            if not self.recording:
                return
            self.facts["val"].append({
                "sanity": self.trainer.sanity_checking, "loss": loss.item(), "ids": batch[0].tolist(),
                "inference_mode": torch.is_inference_mode_enabled(), "grad_enabled": torch.is_grad_enabled(),
            })  # fmt: skip

        def configure_optimizers(self) -> Any:
            name = config["optimizer"]
            if name == "sgd":
                return torch.optim.SGD(self.parameters(), lr=LEARNING_RATES[name])
            optimizer = torch.optim.AdamW(self.parameters(), lr=LEARNING_RATES[name], weight_decay=0.01)
            if name == "adamw":
                return optimizer
            scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

        def on_train_start(self) -> None:
            if not self.recording:
                return
            for optimizer in self.trainer.optimizers:
                optimizer.register_step_post_hook(self._after_step)

        def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
            """What the optimizer just applied: the global norm of the gradients it used (clipped, if they were:
            Lightning clips in place inside the step's closure) and the learning rate."""
            squares = torch.zeros((), dtype=torch.float64)
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    if parameter.grad is not None:
                        squares += full(parameter.grad).detach().double().pow(2).sum().cpu()
            self.facts["grad_norms"].append(squares.sqrt().item())
            self.facts["lrs"].append(optimizer.param_groups[0]["lr"])
            self.facts["optimizer_steps"] += 1

        def on_train_end(self) -> None:
            if not self.recording:
                return
            self.facts["wrapping"] = describe_wrapping(self.trainer.strategy, self.model)
            self.facts["samplers"] = sampler_facts(self.trainer)
            self.facts["cudnn_benchmark"] = torch.backends.cudnn.benchmark
            self.facts["final_parameters"] = unsharded_parameters(self)

    job: type = SweepModule
    if config.get("sabotage") == "ignore_clipping":
        # Only here: a module that overrides configure_gradient_clipping clips its own way as far as the guards
        # know (LP215's exception), so every other configuration keeps Lightning's own hook.
        class SkipsClipping(SweepModule):
            def configure_gradient_clipping(self, optimizer: Any, *args: Any, **kwargs: Any) -> None:
                if self.sabotage != "ignore_clipping":
                    super().configure_gradient_clipping(optimizer, *args, **kwargs)

        job = SkipsClipping

    if not config["configure_model"]:
        return job

    class ShardsItself(job):  # type: ignore[misc,valid-type]
        """The usual ModelParallelStrategy module: tensor parallelism and ``fully_shard`` on ``self.device_mesh``."""

        def configure_model(self) -> None:
            from torch.distributed.fsdp import FSDPModule, fully_shard
            from torch.distributed.tensor.parallel import parallelize_module

            self.facts["configure_model_calls"] += 1
            mesh = self.device_mesh
            if mesh is None or isinstance(self.model, FSDPModule):  # no mesh (DDP, one device), or done already
                return

            if mesh["tensor_parallel"].size() > 1:
                for layer in self.model.layers:
                    parallelize_module(layer, mesh["tensor_parallel"], tensor_parallel_plan())
            for layer in self.model.layers:
                fully_shard(layer, mesh=mesh["data_parallel"])
            fully_shard(self.model, mesh=mesh["data_parallel"])

    return ShardsItself


CHECK_CONFIG = "LIGHTNING_PRESETS_SWEEP_CONFIG"
"""The variable holding the configuration (JSON) :func:`check_model` builds: ``lightning-presets check --model
sweep_worker:check_model`` takes a factory without arguments, and may call it in a process of its own."""


def check_model() -> Any:
    """The job's module as ``check --model`` builds it (under fake tensors), with one batch as its
    ``example_input_array``: what the dataloader yields (sample indices, token sequences)."""
    module = module_class(json.loads(os.environ[CHECK_CONFIG]))(ghost_chunks=1)
    module.recording = False
    module.example_input_array = [
        torch.arange(PER_RANK_BATCH),
        torch.zeros(PER_RANK_BATCH, SEQUENCE_LENGTH + 1, dtype=torch.long),
    ]
    return module


def describe_wrapping(strategy: Any, model: nn.Module) -> dict[str, Any]:
    """What the strategy really did to the model: DDP's flags and hooks, FSDP2 units, offload, checkpointing, mesh."""
    from torch.distributed._composable import checkpoint  # type: ignore[attr-defined]
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from torch.nn.parallel import DistributedDataParallel

    wrapper = strategy.model
    facts: dict[str, Any] = {"strategy": type(strategy).__name__, "wrapper": type(wrapper).__name__}
    if isinstance(wrapper, DistributedDataParallel):  # the flags torch's DDP really has, by its argument names
        names = inspect.signature(DistributedDataParallel).parameters
        facts["ddp"] = {name: getattr(wrapper, name) for name in names
                        if isinstance(getattr(wrapper, name, None), (bool, int, float, str))}  # fmt: skip
        facts["ddp"]["comm_hooks"] = [getattr(hook, "__qualname__", repr(hook)) for hook, _ in wrapper._comm_hooks]
    root = wrapper if isinstance(wrapper, nn.Module) else model
    units = [m for m in root.modules() if isinstance(m, FSDPModule)]
    facts["fsdp_units"] = len(units)
    policies = set()
    for unit in units:
        group = fully_shard.state(unit)._fsdp_param_group  # type: ignore[attr-defined]
        if group is not None:
            policies.add(type(group.offload_policy).__name__)
    facts["offload_policies"] = sorted(policies)
    facts["checkpointed"] = sum(1 for m in root.modules() if _has_state(checkpoint, m))
    facts["sync_batchnorm_layers"] = sum(1 for m in root.modules() if isinstance(m, nn.SyncBatchNorm))
    facts["float8_layers"] = sum(1 for m in root.modules() if type(m).__name__ == "Float8Linear")
    mesh = getattr(strategy, "device_mesh", None)
    if mesh is not None:
        facts["mesh"] = dict(zip(mesh.mesh_dim_names or (), mesh.shape, strict=True))
    return facts


def _has_state(api: Any, module: nn.Module) -> bool:
    try:
        return api.state(module) is not None
    except Exception:
        return False


def sampler_facts(trainer: Any) -> dict[str, Any]:
    """The sampler Lightning gave the training data, and the strategy's data-parallel split."""
    loader = trainer.train_dataloader
    sampler = getattr(loader, "sampler", None)
    facts: dict[str, Any] = {"train_sampler": type(sampler).__name__}
    replicas = getattr(sampler, "num_replicas", None)
    if replicas is not None:
        facts["num_replicas"] = replicas
    try:
        facts["strategy_split"] = dict(trainer.strategy.distributed_sampler_kwargs or {})
    except Exception as error:  # e.g. a strategy without a data-parallel split
        facts["strategy_split"] = f"{type(error).__name__}: {error}"
    return facts


def unsharded_parameters(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every parameter, gathered whole, in float64 on the CPU (every rank takes part in the gathers)."""
    from torch.distributed.fsdp import FSDPModule

    for each in module.modules():  # the root may keep its parameters gathered after the last forward
        if isinstance(each, FSDPModule):
            each.reshard()
    return {name: full(p.detach()).double().cpu().clone() for name, p in module.named_parameters()}


def strategy_argument(config: dict[str, Any]) -> Any:
    """The preset by name, or built with its overrides. With the guards off, overrides that the preset's argument
    check refuses (LP006, which ``LIGHTNING_PRESETS_SKIP`` does not switch off) are handed to Lightning's
    ``DDPStrategy`` the way it takes any keyword it does not know: into the kwargs it forwards to torch's DDP."""
    if not config["overrides"]:
        return config["preset"]
    import lightning_presets

    try:
        return lightning_presets.strategy(config["preset"], **config["overrides"])
    except lightning_presets.PresetConfigError as error:
        if os.environ.get("LIGHTNING_PRESETS_SKIP") != "all" or set(error.codes) != {"LP006"}:
            raise
        refused = error
    unknown = {key for key, value in config["overrides"].items() if _refused(config["preset"], key, value)}
    strategy = lightning_presets.strategy(
        config["preset"], **{key: value for key, value in config["overrides"].items() if key not in unknown}
    )
    if not hasattr(strategy, "_ddp_kwargs"):  # only DDPStrategy forwards keywords it does not know
        raise refused
    strategy._ddp_kwargs.update({key: config["overrides"][key] for key in unknown})
    PASSED_THROUGH.update(unknown)
    return strategy


def _refused(preset: str, key: str, value: Any) -> bool:
    import lightning_presets

    try:
        lightning_presets.strategy(preset, **{key: value})
    except lightning_presets.PresetConfigError as error:
        return "LP006" in error.codes
    return False


PASSED_THROUGH: set[str] = set()
"""Overrides handed to DDPStrategy's forwarded kwargs by :func:`strategy_argument` in this process."""


def plain_arguments(config: dict[str, Any], *, reference: bool = False) -> dict[str, Any]:
    """The Trainer's keyword arguments that are plain values (no strategy, no plugin instance)."""
    trainer = {key: value for key, value in config["trainer"].items() if value is not None}
    quiet = {} if trainer.get("barebones") else dict(QUIET)
    arguments = {"accelerator": "cpu", "max_steps": 3, **quiet, **trainer}
    if not reference:
        return arguments
    plugin = config.get("plugin")
    if plugin in REFERENCE_PRECISION:
        arguments["precision"] = REFERENCE_PRECISION[plugin]
    return {**{key: value for key, value in arguments.items() if key not in DISTRIBUTED_ONLY}, "devices": 1}


def trainer_arguments(config: dict[str, Any], *, reference: bool = False) -> dict[str, Any]:
    """The Trainer's keyword arguments for a rank (``strategy`` included) or for the single-process reference."""
    arguments = plain_arguments(config, reference=reference)
    plugin = config.get("plugin")
    if plugin is not None and "precision" not in arguments:
        import lightning_presets

        arguments["plugins"] = [lightning_presets.precision(plugin)]
    return arguments if reference else {"strategy": strategy_argument(config), **arguments}


def data(batch_size: int, *, shuffled_like_lightning: bool = False) -> tuple[Any, Any]:
    """Training and validation loaders, in order. ``shuffled_like_lightning``: the training samples in the order of
    the ``DistributedSampler`` Lightning injects for training (shuffled, seed 0), seen by a single process; rank ``r``
    of ``w`` then sees the samples ``r, r + w, ...`` of each of its global batches."""
    from torch.utils.data import DataLoader, DistributedSampler

    train = samples(TRAIN_SAMPLES, seed=1)
    order: DistributedSampler[Any] | None = None
    if shuffled_like_lightning:
        order = DistributedSampler(train, num_replicas=1, rank=0, shuffle=True, seed=0)
    return (
        DataLoader(train, batch_size=batch_size, sampler=order, shuffle=False),
        DataLoader(samples(VAL_SAMPLES, seed=2), batch_size=batch_size, shuffle=False),
    )


def fit(
    config: dict[str, Any], *, reference: bool, replicas: int = 1, shuffled: bool = False
) -> tuple[dict[str, Any], Any]:
    """Train the configuration; the module's facts and the Trainer. The reference trains on the global batch of
    ``replicas`` data-parallel ranks, in the order Lightning's distributed sampler gives them when ``shuffled``."""
    from lightning.pytorch import Trainer

    batchnorm_per_rank = config["trainer"].get("sync_batchnorm") is not True
    module = module_class(config)(
        ghost_chunks=replicas if reference and batchnorm_per_rank else 1,
        sabotage=None if reference else config.get("sabotage"),
    )
    if reference:
        module.facts["initial_parameters"] = unsharded_parameters(module)
    trainer = Trainer(**trainer_arguments(config, reference=reference))
    train, val = data(PER_RANK_BATCH * replicas if reference else PER_RANK_BATCH, shuffled_like_lightning=shuffled)
    trainer.fit(module, train, val)
    return module.facts, trainer


def _write(out: Path, role: str, facts: dict[str, Any]) -> None:
    tensors = {key: facts.pop(key) for key in ("final_parameters", "initial_parameters") if key in facts}
    if tensors:
        torch.save(tensors, out / f"{role}.pt")
    (out / f"{role}.json.tmp").write_text(json.dumps(facts))
    (out / f"{role}.json.tmp").rename(out / f"{role}.json")  # the parent never reads half a file


def _failure(error: BaseException) -> dict[str, Any]:
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    return {
        "status": "error",
        "error_type": type(error).__name__,
        "last_line": f"{type(error).__name__}: {lines[-1].strip() if lines else ''}".rstrip(": "),
        "first_line": lines[0].strip()[:300] if lines else "",
        "traceback": "".join(traceback.format_exception(error)[-6:])[-3000:],
    }


def _prepare_process(out: Path, role: str) -> None:
    log = os.open(out / f"{role}.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.environ["LIGHTNING_PRESETS_SKIP"] = "all"
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)


def _shut_down() -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def rank_main(config: dict[str, Any], rank: int, world_size: int, port: int, out: str) -> None:
    """One rank of the job, started the way torchrun starts it (Lightning sees LOCAL_RANK and launches nothing)."""
    folder = Path(out)
    role = f"rank{rank}"
    _prepare_process(folder, role)
    os.environ.update({"LOCAL_RANK": str(rank), "NODE_RANK": "0", "WORLD_SIZE": str(world_size),
                       "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})  # fmt: skip
    _run(config, folder, role)


def harness_rank(config: dict[str, Any], out: str) -> None:
    """``rank_main`` for a rank the tests' harness forked (its rank, world size and port are in the environment)."""
    rank_main(config, int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["MASTER_PORT"]), out)


def reference_main(config: dict[str, Any], replicas: int, shuffled: bool, out: str) -> None:
    """The single-process reference: plain Lightning on one device, the global batch of ``replicas`` ranks."""
    folder = Path(out)
    _prepare_process(folder, "reference")
    for variable in ("LOCAL_RANK", "RANK", "WORLD_SIZE", "MASTER_PORT"):
        os.environ.pop(variable, None)
    _run(config, folder, "reference", reference=True, replicas=replicas, shuffled=shuffled)


def _run(config: dict[str, Any], folder: Path, role: str, *, reference: bool = False, **data: Any) -> None:
    try:
        facts, trainer = fit(config, reference=reference, **data)
        role = "reference" if reference else f"rank{trainer.global_rank}"
        facts["passed_through"] = sorted(PASSED_THROUGH)
        _write(folder, role, {"status": "ok", "world_size": trainer.world_size, **facts})
    except BaseException as error:  # every failure is a result here, reported to the sweep
        _write(folder, role, _failure(error))
        sys.stdout.flush()
        os._exit(1)
    try:
        _shut_down()
    finally:
        sys.stdout.flush()
        os._exit(0)  # a live gloo group can abort the interpreter at exit: the result is written already


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, help="the configuration, as JSON")
    parser.add_argument("--out", required=True, help="the folder for the results")
    args = parser.parse_args()
    folder = Path(args.out)
    role = f"rank{os.environ.get('LOCAL_RANK', '0')}"
    _prepare_process(folder, role)
    _run(json.loads(args.config), folder, role)


if __name__ == "__main__":
    main()
