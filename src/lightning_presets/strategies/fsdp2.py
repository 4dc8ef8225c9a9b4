"""FSDP2 (``fully_shard``) presets through ``ModelParallelStrategy``: ``fsdp2`` and ``fsdp2_offload_ckpt``.

No change to the user's model: when the LightningModule does not shard itself in ``configure_model``
(Trainer) and no ``parallelize_fn`` is given (Fabric), the strategy applies ``fully_shard`` to the
repeated blocks it finds and to the root, over a 1-D data-parallel mesh of the whole world.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from torch import nn

from lightning_presets._context import Context, Options
from lightning_presets._errors import report
from lightning_presets._namespaces import Kind
from lightning_presets._preset import Preset
from lightning_presets._rules import Problem, Rule, rule, run_rules
from lightning_presets.strategies._blocks import describe_children, find_repeated_blocks
from lightning_presets.strategies.model_parallel import model_parallel_accelerator, model_parallel_precision

TESTED_WITH = {
    "lightning": "2.6.6",
    "torch": "2.13.0",
    "evidence": "runtime: Trainer.fit and Fabric on CPU (gloo), 2 processes; construction on simulated CUDA",
}
TESTED_WITH_OFFLOAD = {
    **TESTED_WITH,
    "evidence": "runtime: Trainer.fit and Fabric on CPU (gloo), 2 processes, offload policy without pinned "
    "memory and activation checkpointing; construction on simulated CUDA",
}
# The modules this preset sharded itself (their root needs the steps routed through it); never kept alive.
_SHARDED_BY_PRESET: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_STEPS = {
    "training_step": "train_step_context",
    "validation_step": "val_step_context",
    "test_step": "test_step_context",
    "predict_step": "predict_step_context",
}


@rule(
    "LP210", "error", "options", "tensor_parallel_size other than 1",
    fails='lightning_presets.strategy("fsdp2", tensor_parallel_size=2)',
    fixed='lightning_presets.strategy("tp2d_hybrid", tensor_parallel_size=2)',
)  # fmt: skip
def fsdp2_without_tensor_parallel(options: Options) -> Problem | None:
    value = options.values.get("tensor_parallel_size", 1)
    if value in (1, "auto"):
        return None
    return Problem(
        f"{options.call('tensor_parallel_size')}: {options.preset!r} shards every parameter over all devices "
        f"(FSDP2 only), so tensor_parallel_size must be 1, got {value!r}",
        "drop tensor_parallel_size, or use strategy='tp2d_hybrid' for tensor parallel inside a node with FSDP2 "
        "across nodes",
    )


@rule(
    "LP211", "error", "construction", "data_parallel_size differs from the world size",
    fails='Trainer(strategy=lightning_presets.strategy("fsdp2", data_parallel_size=4), accelerator="cpu", '
    "devices=2)",
    fixed='Trainer(strategy="fsdp2", accelerator="cpu", devices=2)',
)  # fmt: skip
def data_parallel_is_world(ctx: Context) -> Problem | None:
    value = ctx.options.get("data_parallel_size", "auto")
    if value == "auto" or (type(value) is int and value == ctx.world_size):
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: data_parallel_size={value!r}, but {ctx.preset!r} shards over "
        f"every device: {ctx.world_arithmetic}; Lightning would only fail after every process has started",
        f"drop data_parallel_size ('auto' = the world size), or pass data_parallel_size={ctx.world_size}",
    )


@rule(
    "LP212", "warning", "construction", "one device in total: sharding buys nothing",
    fails='Trainer(strategy="fsdp2", accelerator="cpu", devices=1)',
    fixed='Trainer(strategy="fsdp2", accelerator="cpu", devices=2)',
)  # fmt: skip
def fsdp2_has_peers(ctx: Context) -> Problem | None:
    if ctx.world_size > 1:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: one device in total, so FSDP2 has nothing to shard across and "
        "only its all-gather bookkeeping remains",
        "use devices>1 (or more nodes); for one device, train without a strategy",
    )


@rule(
    "LP213", "warning", "setup", "no repeated block found: the whole model is one FSDP2 unit",
    fails="trainer.fit(model)  # a model with no nn.ModuleList/nn.Sequential of identical blocks",
    fixed="trainer.fit(model)  # the blocks held in an nn.ModuleList",
)  # fmt: skip
def fsdp2_found_blocks(ctx: Context, model: nn.Module) -> Problem | None:
    if find_repeated_blocks(model):
        return None
    return Problem(
        f"{ctx.call()}: no repeated block found in {type(model).__name__} (top-level children: "
        f"{describe_children(model)}); only the root is sharded, so every forward gathers the whole model at "
        "once and nothing is checkpointed",
        "hold the repeated layers in an nn.ModuleList, or shard the model yourself in configure_model() "
        "(Trainer) / a parallelize_fn (Fabric)",
    )


@rule(
    "LP214", "warning", "construction", "CPU offload on CPU devices changes nothing",
    fails='Trainer(strategy="fsdp2_offload_ckpt", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="fsdp2_offload_ckpt", accelerator="cuda", devices=8)',
)  # fmt: skip
def offload_needs_cuda(ctx: Context) -> Problem | None:
    if ctx.accelerator != "cpu":
        return None
    return Problem(
        f"{ctx.call('accelerator')}: the parameters already live in CPU memory, so the CPU offload policy "
        "saves nothing (this still exercises the wiring, with unpinned memory)",
        "run it with accelerator='cuda' to save GPU memory, or use strategy='fsdp2' on CPU",
    )


RULES: tuple[Rule, ...] = (
    fsdp2_without_tensor_parallel,
    data_parallel_is_world,
    model_parallel_precision,
    model_parallel_accelerator,
    fsdp2_has_peers,
    fsdp2_found_blocks,
)
OFFLOAD_RULES: tuple[Rule, ...] = (*RULES, offload_needs_cuda)


def _fsdp2() -> Any:
    """The module holding ``fully_shard``: public since torch 2.6, ``_composable.fsdp`` in 2.4 and 2.5."""
    from torch.distributed import fsdp

    if hasattr(fsdp, "fully_shard"):
        return fsdp
    from torch.distributed._composable import fsdp as composable_fsdp

    return composable_fsdp


def _dtensor_type() -> type:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch 2.4
        from torch.distributed._tensor import DTensor  # type: ignore[attr-defined]
    return DTensor


def is_parallelized(model: nn.Module) -> bool:
    """Whether ``fully_shard`` or tensor parallelism was applied anywhere in ``model`` already."""
    module_type = _fsdp2().FSDPModule
    if any(isinstance(module, module_type) for module in model.modules()):
        return True
    dtensor = _dtensor_type()
    return any(isinstance(parameter, dtensor) for parameter in model.parameters())


def shard_blocks_and_root(model: nn.Module, mesh: Any, *, offload: bool, checkpoint: bool) -> nn.Module:
    """``fully_shard`` each repeated block (checkpointed first if asked) and then the root, in place."""
    fsdp = _fsdp2()
    kwargs: dict[str, Any] = {"mesh": mesh}
    if offload:
        # Pinned memory needs an accelerator; on CPU (gloo) the policy runs unpinned.
        kwargs["offload_policy"] = fsdp.CPUOffloadPolicy(pin_memory=mesh.device_type == "cuda")
    blocks = tuple(find_repeated_blocks(model))
    for module in [each for each in model.modules() if isinstance(each, blocks)]:
        if checkpoint:
            from torch.distributed._composable.checkpoint_activation import checkpoint as checkpoint_module

            checkpoint_module(module)
        fsdp.fully_shard(module, **kwargs)
    fsdp.fully_shard(model, **kwargs)
    _SHARDED_BY_PRESET.add(model)
    return model


def parallelize(model: nn.Module, device_mesh: Any, *, offload: bool, checkpoint: bool) -> nn.Module:
    """The preset's ``parallelize_fn`` for Fabric: shard over the data-parallel dimension of the mesh."""
    if is_parallelized(model):
        return model
    return shard_blocks_and_root(model, device_mesh["data_parallel"], offload=offload, checkpoint=checkpoint)


@contextmanager
def _configure_model_defined(module: nn.Module) -> Iterator[None]:
    """Lightning refuses a LightningModule without ``configure_model`` because nothing would shard it.

    The preset has sharded it, so for the duration of that check the instance carries a no-op
    ``configure_model``; the user's class is never touched and the attribute is removed afterwards.
    """
    had_own = "configure_model" in vars(module)
    if not had_own:
        object.__setattr__(module, "configure_model", _sharded_by_preset)
    try:
        yield
    finally:
        if not had_own:
            object.__delattr__(module, "configure_model")


def _sharded_by_preset() -> None:
    """Stands in for ``configure_model`` on a module the preset sharded."""


class _DataParallelWorld:
    """``data_parallel_size='auto'`` means the whole world here (Lightning's own 'auto' means nodes)."""

    _lp_context: Context | None
    _data_parallel_size: Any
    _tensor_parallel_size: Any

    def _configure_launcher(self) -> None:
        context = self._lp_context
        if context is not None and self._data_parallel_size == "auto":
            self._data_parallel_size = context.world_size
        if self._tensor_parallel_size == "auto":
            self._tensor_parallel_size = 1
        super()._configure_launcher()  # type: ignore[misc]

    def _lp_run_setup_rules(self, model: nn.Module) -> None:
        context = self._lp_context
        if context is not None:
            report(run_rules(self._lp_preset.rules, "setup", context, model), stacklevel=5)  # type: ignore[attr-defined]


class FSDP2TrainerHooks(_DataParallelWorld):
    """Trainer side: shards after ``configure_model`` when the module did not, then routes steps through the root.

    FSDP2 gathers the root's own parameters in the root's forward hooks; Lightning calls
    ``training_step`` directly, so the steps go through the root's ``__call__`` the way Lightning
    routes them through a DDP or FSDP wrapper.
    """

    _lp_offload: bool = False
    _lp_checkpoint: bool = False

    @property
    def _lp_sharded_root(self) -> bool:
        return self.lightning_module in _SHARDED_BY_PRESET  # type: ignore[attr-defined]

    def setup(self, trainer: Any) -> None:
        """Runs for every ``fit``/``validate``/``test``/``predict``; shards once, the first time."""
        model = self.model  # type: ignore[attr-defined]
        if model is not None and not is_parallelized(model):
            self._lp_run_setup_rules(model)
            mesh = self.device_mesh["data_parallel"]  # type: ignore[attr-defined]
            shard_blocks_and_root(model, mesh, offload=self._lp_offload, checkpoint=self._lp_checkpoint)
        if not self._lp_sharded_root:
            super().setup(trainer)  # type: ignore[misc]
            return
        with _configure_model_defined(self.lightning_module):  # type: ignore[attr-defined]
            super().setup(trainer)  # type: ignore[misc]

    def _lp_step(self, name: str, *args: Any, **kwargs: Any) -> Any:
        if not self._lp_sharded_root:
            return getattr(super(), name)(*args, **kwargs)
        module = self.lightning_module  # type: ignore[attr-defined]
        with getattr(self.precision_plugin, _STEPS[name])():  # type: ignore[attr-defined]
            return self._forward_redirection(module, module, name, *args, **kwargs)  # type: ignore[attr-defined]

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._lp_step("training_step", *args, **kwargs)

    def validation_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._lp_step("validation_step", *args, **kwargs)

    def test_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._lp_step("test_step", *args, **kwargs)

    def predict_step(self, *args: Any, **kwargs: Any) -> Any:
        return self._lp_step("predict_step", *args, **kwargs)


class FSDP2OffloadTrainerHooks(FSDP2TrainerHooks):
    _lp_offload = True
    _lp_checkpoint = True


class FSDP2FabricHooks(_DataParallelWorld):
    """Fabric side: the preset's ``parallelize_fn`` shards; its setup rules run just before."""

    _parallelize_fn: Any

    def setup_module(self, module: nn.Module) -> nn.Module:
        function = self._parallelize_fn
        if isinstance(function, functools.partial) and function.func is parallelize and not is_parallelized(module):
            self._lp_run_setup_rules(module)
        return super().setup_module(module)  # type: ignore[misc,no-any-return]


def _prepare(offload: bool, checkpoint: bool) -> Callable[[Kind, dict[str, Any]], dict[str, Any]]:
    def prepare(kind: Kind, values: dict[str, Any]) -> dict[str, Any]:
        """Fabric gets the preset's ``parallelize_fn`` unless the user passed one."""
        if kind == "fabric" and values.get("parallelize_fn") is None:
            values["parallelize_fn"] = functools.partial(parallelize, offload=offload, checkpoint=checkpoint)
        return values

    return prepare


FSDP2 = Preset(
    name="fsdp2",
    description="FSDP2 (fully_shard) over every device through ModelParallelStrategy, with no change to the "
    "model: the repeated blocks and the root are sharded when the model does not shard itself.",
    family="model_parallel",
    strategy={"trainer": "ModelParallelStrategy", "fabric": "ModelParallelStrategy"},
    init_params={"data_parallel_size": "auto", "tensor_parallel_size": 1},
    rules=RULES,
    mixins={"trainer": FSDP2TrainerHooks, "fabric": FSDP2FabricHooks},
    prepare=_prepare(offload=False, checkpoint=False),
    tested_with=TESTED_WITH,
)

FSDP2_OFFLOAD_CKPT = Preset(
    name="fsdp2_offload_ckpt",
    description="fsdp2 plus CPU offload of the sharded parameters, gradients and optimizer step, and "
    "activation checkpointing of every repeated block. For models that do not fit even sharded.",
    family="model_parallel",
    strategy={"trainer": "ModelParallelStrategy", "fabric": "ModelParallelStrategy"},
    init_params={"data_parallel_size": "auto", "tensor_parallel_size": 1},
    rules=OFFLOAD_RULES,
    mixins={"trainer": FSDP2OffloadTrainerHooks, "fabric": FSDP2FabricHooks},
    prepare=_prepare(offload=True, checkpoint=True),
    tested_with=TESTED_WITH_OFFLOAD,
)
