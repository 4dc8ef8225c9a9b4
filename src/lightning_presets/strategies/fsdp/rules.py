"""FSDP (``FSDPStrategy``) presets: ``fsdp_offload_ckpt``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from torch import nn

from lightning_presets.core.context import Context, Options
from lightning_presets.core.family import Checkpoints, Family, Layout, Memory
from lightning_presets.core.mesh import AUTO, mesh_shape
from lightning_presets.core.preset import Preset, every_kind
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.core.versions import tested
from lightning_presets.guards.builders import needs_cuda, one_device, one_of, repeated_block
from lightning_presets.guards.precision_rules import STRATEGY_HARDWARE_RULES, half_weights_have_a_scaler
from lightning_presets.guards.strategy import PresetHooks
from lightning_presets.inspection.blocks import find_repeated_blocks
from lightning_presets.inspection.hooks import overrides
from lightning_presets.registry import private

SHARDING_STRATEGIES = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")
STATE_DICT_TYPES = ("full", "sharded")


fsdp_needs_cuda = needs_cuda(
    "LP101", "FSDP needs CUDA devices",
    why="FSDP needs CUDA devices, got accelerator={accelerator!r} ({devices} device(s) × {nodes} node(s)); "
    "on CPU it would fail when `fit` starts",
    hint="run it with accelerator='cuda'; to test sharding on CPU use strategy='fsdp2' (FSDP2 over gloo), "
    "strategy='tp2d_hybrid' (tensor parallel and FSDP2) or strategy='ddp'",
    fails='Trainer(strategy="fsdp_offload_ckpt", accelerator="cpu", devices=2)',
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8)',
    evidence="runtime: fit on CPU: torch raises RuntimeError 'FSDP needs a non-CPU accelerator device'",
)  # fmt: skip


sharding_strategy_known = one_of(
    "LP104", "unknown sharding_strategy", key="sharding_strategy", default="FULL_SHARD", choices=SHARDING_STRATEGIES,
    what="an FSDP sharding strategy",
    accepts=lambda value: not isinstance(value, str) or value.upper() in SHARDING_STRATEGIES,
    fails='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARDED")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", sharding_strategy="FULL_SHARD")',
    evidence="runtime: KeyError from ShardingStrategy[...]",
)  # fmt: skip

state_dict_type_known = one_of(
    "LP105", "unknown state_dict_type", key="state_dict_type", default="full", choices=STATE_DICT_TYPES,
    what="a checkpoint format", consequence="; Lightning would only fail when the first checkpoint is saved",
    fails='lightning_presets.strategy("fsdp_offload_ckpt", state_dict_type="sharding")',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", state_dict_type="sharded")',
    evidence="runtime: Lightning raises ValueError 'Unknown state_dict_type'",
)  # fmt: skip


HYBRID_SHARDINGS = ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2")


def _two_dimensional(mesh: Any) -> bool:
    """Whether a ``device_mesh`` option makes a 2-D mesh: a pair, a 2-D DeviceMesh, or the hybrid preset's 'auto'."""
    if mesh == AUTO or mesh_shape(mesh) is not None:
        return True
    return type(mesh).__name__ == "DeviceMesh" and getattr(mesh, "ndim", 0) == 2


@dataclass(frozen=True, slots=True)
class FSDPOptions:
    """The FSDP presets' arguments as their rules, hooks and memory layout read them: each key, and what its absence
    means, once (the FSDP family's options view)."""

    values: Mapping[str, Any]
    """The preset's arguments (defaults merged with the user's overrides), or a preset's ``init_params``."""

    @classmethod
    def of(cls, source: Options | Context | Mapping[str, Any]) -> FSDPOptions:
        """The view of an :class:`Options`, a :class:`Context`'s options or the arguments a strategy was built with."""
        if isinstance(source, Options):
            return cls(source.values)
        return cls(source.options if isinstance(source, Context) else source)

    @property
    def sharding_strategy(self) -> Any:
        """``sharding_strategy`` as written (a name or torch's enum member); ``None`` when absent."""
        return self.values.get("sharding_strategy")

    @property
    def sharding(self) -> str:
        """The sharding strategy's name in upper case; Lightning's ``FULL_SHARD`` when absent."""
        written = self.values.get("sharding_strategy", "FULL_SHARD")
        return str(getattr(written, "name", written)).upper()

    @property
    def device_mesh(self) -> Any:
        """``device_mesh`` as written; ``None`` when absent."""
        return self.values.get("device_mesh")

    @property
    def use_orig_params(self) -> Any:
        return self.values.get("use_orig_params")

    @property
    def cpu_offload(self) -> bool:
        """Whether ``cpu_offload`` offloads (``True`` or a ``CPUOffload``)."""
        return bool(self.values.get("cpu_offload"))

    @property
    def auto_wrap_policy(self) -> Any:
        """``auto_wrap_policy``; ``None``: the preset wraps the model's repeated blocks."""
        return self.values.get("auto_wrap_policy")

    @property
    def checkpointing_chosen(self) -> bool:
        """Whether the user chose the activation checkpointing (``activation_checkpointing_policy`` or
        ``activation_checkpointing``); else the preset checkpoints the repeated blocks."""
        return self.values.get("activation_checkpointing_policy") is not None or (
            self.values.get("activation_checkpointing") is not None
        )


@rule(
    "LP117", "error", "options", "a 2-D device_mesh with a sharding strategy that is not hybrid",
    fails='lightning_presets.strategy("fsdp_grad_op", device_mesh=(2, 8))',
    fixed='lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 8))',
    evidence="runtime: 2 processes: torch's FSDP init reduces each rank's gradients over itself alone",
)  # fmt: skip
def mesh_needs_hybrid_sharding(options: Options) -> Problem | None:
    view = FSDPOptions.of(options)
    mesh, sharding = view.device_mesh, str(getattr(view.sharding_strategy, "name", view.sharding_strategy))
    if mesh is None or not _two_dimensional(mesh) or view.sharding in HYBRID_SHARDINGS:
        return None
    return Problem(
        f"{options.call('device_mesh', 'sharding_strategy')}: with sharding_strategy={sharding!r} torch's FSDP uses "
        "only the first dimension of a 2-D device mesh, so the ranks along the second one never synchronise "
        "their gradients",
        "drop device_mesh (a 1-D job needs none), or use strategy='fsdp_hybrid_shard' (HYBRID_SHARD) for a "
        "(replicas, shard size) mesh",
    )


fsdp_has_peers = one_device(
    "LP106", "one device in total: sharding buys nothing",
    why="one device in total, so FSDP has nothing to shard across and only its communication and CPU-offload "
    "overhead remain",
    hint="use devices>1 (or more nodes); for one GPU, plain precision='bf16-mixed' without a strategy is faster",
    fails='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=1)',
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8)',
)  # fmt: skip


repeated_block_found = repeated_block(
    "LP107", "no repeated block found to wrap and checkpoint",
    consequence="the whole model becomes one FSDP unit{checkpointing}",
    hint="pass the block class: lightning_presets.strategy({preset!r}, auto_wrap_policy={{MyBlock}}, "
    "activation_checkpointing_policy={{MyBlock}}), or hold the blocks in an nn.ModuleList",
    unless_given=("auto_wrap_policy", "activation_checkpointing_policy"),
    setup='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8).fit(model)',
)  # fmt: skip


@rule(
    "LP118", "error", "model", "gradient clipping by norm in the Trainer, which FSDP's precision plugin refuses",
    fails='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gradient_clip_val=1.0)'
    ".fit(nn.Linear(64, 64))",
    fixed='Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gradient_clip_val=1.0, '
    'gradient_clip_algorithm="value").fit(nn.Linear(64, 64))',
    evidence="runtime: FSDPPrecision.clip_grad_by_norm raises MisconfigurationException at the first optimizer step",
    unless="your LightningModule overrides configure_gradient_clipping",
    when=lambda ctx: ctx.clips_by_norm, shows=("gradient_clip_val",),
    consequence="the first optimizer step raises on every rank (FSDP's precision plugin refuses to clip by norm; clip "
    "through the FSDP root)",
)  # fmt: skip
def clipping_by_norm_goes_through_the_module(ctx: Context, model: nn.Module) -> Problem | None:
    if not ctx.clips_by_norm or overrides(model, "configure_gradient_clipping"):
        return None
    return Problem(
        f"{ctx.call('gradient_clip_val')}: Lightning's FSDP precision plugin refuses to clip gradients by norm "
        "(torch.nn.utils.clip_grad_norm_ is wrong on FSDP's sharded gradients), so the first optimizer step raises "
        "on every rank",
        "clip through the FSDP root in your LightningModule: def configure_gradient_clipping(self, optimizer, "
        "gradient_clip_val=None, gradient_clip_algorithm=None): self.trainer.model.clip_grad_norm_(gradient_clip_val)"
        "; or pass gradient_clip_algorithm='value'",
    )


@rule(
    "LP119", "warning", "options", "Fabric with use_orig_params=False: no joint setup of model and optimizer",
    fails='lightning_presets.strategy("fsdp_offload_ckpt", target="fabric", use_orig_params=False)',
    fixed='lightning_presets.strategy("fsdp_offload_ckpt", target="fabric")',
)  # fmt: skip
def fabric_keeps_original_parameters(options: Options) -> Problem | None:
    if options.target not in ("fabric", "lightning_fabric") or FSDPOptions.of(options).use_orig_params is not False:
        return None
    return Problem(
        f"{options.call('use_orig_params')}: with use_orig_params=False, Fabric's FSDP refuses "
        "fabric.setup(model, optimizer) (it raises ValueError then); only setup_module, then an optimizer made from "
        "the wrapped module's parameters and setup_optimizers, works",
        "drop use_orig_params (Lightning's default is True), or set up in that order: "
        "model = fabric.setup_module(model); optimizer = fabric.setup_optimizers(make_optimizer(model.parameters()))",
    )


RULES: tuple[Rule, ...] = (
    fsdp_needs_cuda,
    sharding_strategy_known,
    state_dict_type_known,
    mesh_needs_hybrid_sharding,
    clipping_by_norm_goes_through_the_module,
    fabric_keeps_original_parameters,
    fsdp_has_peers,
    repeated_block_found,
    half_weights_have_a_scaler,
    *STRATEGY_HARDWARE_RULES,
)


class FSDPHooks(PresetHooks):
    """Wraps the repeated blocks it finds (and checkpoints them, for presets that do), unless the user passed
    a policy."""

    @property
    def _lp_fsdp_kwargs(self) -> dict[str, Any]:
        """The keyword arguments Lightning passes to FSDP: ``kwargs`` on the Trainer's class, ``_fsdp_kwargs`` on
        Fabric's."""
        trainer = self._lp_namespace.kind == "trainer"
        fsdp_kwargs: dict[str, Any] = vars(self)["kwargs"] if trainer else private.fabric_fsdp_kwargs(self)
        return fsdp_kwargs

    def _lp_apply_blocks(self, model: nn.Module) -> None:
        from torch.distributed.fsdp import FullyShardedDataParallel
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        if any(isinstance(module, FullyShardedDataParallel) for module in model.modules()):
            return  # wrapped by hand (e.g. in configure_model): the user's layout wins, Lightning wraps nothing
        self._lp_check_setup(model)
        blocks = find_repeated_blocks(model)
        if not blocks:
            return
        view = FSDPOptions.of(self._lp_options)
        if view.auto_wrap_policy is None:
            self._lp_fsdp_kwargs["auto_wrap_policy"] = ModuleWrapPolicy(blocks)
        if not view.checkpointing_chosen and self._lp_preset.activation_checkpointing:
            private.set_activation_checkpointing_kwargs(self, {"auto_wrap_policy": ModuleWrapPolicy(blocks)})
        self.lp_blocks = blocks


class FSDPTrainerHooks(FSDPHooks, private.SetupModelHook):
    """Trainer side of the FSDP presets: the blocks are wrapped where Lightning wraps the model (``_setup_model``)."""

    def _lp_before_setup_model(self, model: nn.Module) -> None:
        self._lp_apply_blocks(model)


class FSDPFabricHooks(FSDPHooks):
    """Fabric side of the FSDP presets."""

    def setup_module(self, module: nn.Module) -> nn.Module:
        self._lp_apply_blocks(module)
        return cast(nn.Module, super().setup_module(module))


FSDP_DEFAULTS: dict[str, Any] = {"state_dict_type": "sharded", "auto_wrap_policy": None}
"""What every FSDP preset passes: sharded checkpoints, and the wrap policy (found from the model's repeated blocks when
``None``)."""


def _fsdp_layout(preset: Preset) -> Layout:
    """Where an FSDP1 preset keeps its model states: its ``sharding_strategy`` (a name or the enum) and offload."""
    view = FSDPOptions(preset.init_params)
    sharding, offload = view.sharding, view.cpu_offload or preset.cpu_offload
    if sharding in ("HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"):
        return Layout(placement="hybrid")
    if sharding == "SHARD_GRAD_OP":
        return Layout(placement="grad_op")
    if sharding == "NO_SHARD":
        return Layout(placement="replica")
    return Layout(placement="offload_all" if offload else "full")


FSDP_FAMILY = Family(
    "fsdp",
    checkpoints=Checkpoints(
        loads=frozenset({"file", "distributed"}), writes=frozenset({"file", "distributed"}), trainer_model_key="model"
    ),
    memory=Memory(title="FSDP", rank=2, traceable=False, compute="half_weights", place=_fsdp_layout),
    rehearsal="fsdp1",
)
"""FSDP1 (``FSDPStrategy``): one file or a sharded folder, the Trainer's weights under ``model``; planned by
arithmetic (FSDP1 needs CUDA to wrap), computing with half-precision gathered weights."""

FSDP_OFFLOAD_CKPT = Preset(
    name="fsdp_offload_ckpt",
    description="FSDP full shard with parameters and gradients offloaded to CPU, auto-wrap and activation "
    "checkpointing on the model's repeated blocks. For models that do not fit in GPU memory even sharded.",
    family=FSDP_FAMILY,
    strategy=every_kind("FSDPStrategy"),
    init_params={
        "sharding_strategy": "FULL_SHARD",
        "cpu_offload": True,
        **FSDP_DEFAULTS,
        "activation_checkpointing_policy": None,
    },
    rules=RULES,
    mixins={"trainer": FSDPTrainerHooks, "fabric": FSDPFabricHooks},
    activation_checkpointing=True,
    cpu_offload=True,
    tested_with=tested(
        "construction on simulated CUDA (Trainer, Fabric, pytorch_lightning, lightning_fabric); "
        "block detection and activation checkpointing run on CPU; FSDP1 needs CUDA and never ran on a GPU here",
        construction="Trainer, Fabric and the standalone packages on 8 simulated CUDA devices: each namespace's own "
        "FSDPStrategy and FSDPPrecision, FULL_SHARD with parameters offloaded (FSDP1 needs CUDA to run)",
    ),
)
