"""The ``ModelParallelStrategy`` family's rules (the mesh sizes, precision, accelerator, batch norm, clipping) and
``tp2d_hybrid``'s (:data:`RULES`); ``fsdp2``'s own are in :mod:`.fsdp2`."""

from __future__ import annotations

from typing import Any

from torch import nn

from lightning_presets.core.codes import Setting
from lightning_presets.core.context import Context, Options
from lightning_presets.core.mesh import MODEL_PARALLEL, MeshSpec
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.guards.builders import needs_accelerator
from lightning_presets.guards.precision_rules import STRATEGY_HARDWARE_RULES, half_weights_have_a_scaler
from lightning_presets.inspection.hooks import overrides
from lightning_presets.inspection.models import batch_norm_layers, parameter_meshes, sync_batch_norm_layers
from lightning_presets.strategies.model_parallel.options import _SIZES, ModelParallelOptions

MODEL_PARALLEL_PRECISIONS = ("32-true", "bf16-mixed", "bf16-true", "16-true", "64-true")
"""What ModelParallelStrategy trains with: Lightning's own list for the strategy object, and 64-true, which Lightning's
list leaves out but which trains (the executed evidence: two steps in float64 on CPU)."""
MODEL_PARALLEL_ACCELERATORS = ("cpu", "cuda")


def resolved_sizes(ctx: Context, mesh: MeshSpec = MODEL_PARALLEL) -> tuple[Any, Any]:
    """(data, tensor) with ``"auto"`` resolved as the preset's mesh says (Lightning's own: nodes, devices per node)."""
    sizes = ctx.mesh_sizes(mesh)
    return sizes if sizes is not None else ("auto", "auto")


def valid_splits(world_size: int, devices_per_node: int) -> list[tuple[int, int]]:
    """(data, tensor) pairs whose product is the world size and whose tensor groups stay inside a node."""
    return [
        (world_size // tensor, tensor)
        for tensor in range(1, devices_per_node + 1)
        if world_size % tensor == 0 and devices_per_node % tensor == 0
    ]


def _splits_text(ctx: Context) -> str:
    splits = ", ".join(f"({data}, {tensor})" for data, tensor in valid_splits(ctx.world_size, ctx.devices_per_node))
    return f"valid (data, tensor) splits for {ctx.world_size} device(s): {splits}"


def _size_text(ctx: Context, key: str, value: Any) -> str:
    return f"{key}={value}" + (" (auto)" if ModelParallelOptions.of(ctx).size(key) == "auto" else "")


def _is_size(value: Any) -> bool:
    return value == "auto" or (type(value) is int and value > 0)


@rule(
    "LP202", "error", "options", "a parallel size that is neither 'auto' nor a positive integer",
    fails='lightning_presets.strategy("tp2d_hybrid", tensor_parallel_size=0)',
    fixed='lightning_presets.strategy("tp2d_hybrid", tensor_parallel_size=2)',
    evidence="runtime: fit: Lightning raises RuntimeError for tensor_parallel_size=0",
)  # fmt: skip
def sizes_are_positive(options: Options) -> Problem | None:
    view = ModelParallelOptions.of(options)
    bad = [key for key in _SIZES if not _is_size(view.size(key))]
    if not bad:
        return None
    return Problem(
        f"{options.call(*bad)}: {' and '.join(bad)} must be 'auto' or a positive integer",
        "use 'auto' (data = number of nodes, tensor = devices per node) or positive integers whose product "
        "is devices × num_nodes",
    )


def sizes_cover_world(code: str, mesh: MeshSpec, **declared: Any) -> Rule:
    """An error when data × tensor parallel size (``'auto'`` resolved as ``mesh`` says) is not the world size:
    Lightning's ``_setup_device_mesh`` raises in every process after launch."""

    def check(ctx: Context) -> Problem | None:
        data, tensor = resolved_sizes(ctx, mesh)
        if not (isinstance(data, int) and isinstance(tensor, int)) or data * tensor == ctx.world_size:
            return None
        return Problem(
            f"{ctx.call('devices', 'num_nodes')}: {_size_text(ctx, 'data_parallel_size', data)} × "
            f"{_size_text(ctx, 'tensor_parallel_size', tensor)} = {data * tensor}, but the world size is "
            f"{ctx.world_arithmetic}; Lightning would only fail after every process has started",
            f"{_splits_text(ctx)}, e.g. lightning_presets.strategy({ctx.preset!r}, "
            f"data_parallel_size={ctx.world_size // ctx.devices_per_node}, "
            f"tensor_parallel_size={ctx.devices_per_node})",
        )

    return rule(code, "error", "construction", "data × tensor parallel size differs from the world size", **declared)(
        check
    )


sizes_match_world = sizes_cover_world(
    "LP201", MODEL_PARALLEL,
    fails='Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=2, '
    'tensor_parallel_size=4), accelerator="cuda", devices=4)',
    fixed='Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=1, '
    'tensor_parallel_size=4), accelerator="cuda", devices=4)',
    evidence="runtime: fit: Lightning raises RuntimeError 'multiplied should equal the world size'",
)  # fmt: skip


@rule(
    "LP203", "warning", "construction", "tensor_parallel_size does not divide the devices per node",
    fails='Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=4, '
    'tensor_parallel_size=3), accelerator="cuda", devices=4, num_nodes=3)',
    fixed='Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=4, '
    'tensor_parallel_size=3), accelerator="cuda", devices=3, num_nodes=4)',
)  # fmt: skip
def tp_divides_devices_per_node(ctx: Context) -> Problem | None:
    _, tensor = resolved_sizes(ctx)
    if not isinstance(tensor, int) or tensor <= 0:
        return None
    if ctx.devices_per_node % tensor == 0 or tensor % ctx.devices_per_node == 0:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: tensor_parallel_size={tensor} does not divide the "
        f"{ctx.devices_per_node} devices per node, so some tensor-parallel groups straddle node boundaries and every "
        "layer's all-reduce in them runs at the speed of the inter-node network",
        _splits_text(ctx),
    )


@rule(
    "LP204", "warning", "construction", "tensor-parallel groups span several nodes",
    fails='Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=1, '
    'tensor_parallel_size=16), accelerator="cuda", devices=8, num_nodes=2)',
    fixed='Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, num_nodes=2)',
)  # fmt: skip
def tp_stays_in_node(ctx: Context) -> Problem | None:
    _, tensor = resolved_sizes(ctx)
    if not isinstance(tensor, int) or tensor <= ctx.devices_per_node or tensor % ctx.devices_per_node:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: tensor_parallel_size={tensor} is larger than the "
        f"{ctx.devices_per_node} devices per node, so every layer's all-reduce crosses the inter-node network",
        f"keep tensor parallelism inside a node: tensor_parallel_size={ctx.devices_per_node} and "
        f"data_parallel_size={ctx.world_size // ctx.devices_per_node}; {_splits_text(ctx)}",
    )


@rule(
    "LP205", "error", "construction", "precision outside what ModelParallelStrategy supports",
    fails='Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, precision="16-mixed")',
    fixed='Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, precision="bf16-mixed")',
    evidence="runtime: Lightning's connector raises ValueError for the strategy object on CUDA with 16-mixed",
)  # fmt: skip
def model_parallel_precision(ctx: Context) -> Problem | None:
    if ctx.precision in MODEL_PARALLEL_PRECISIONS:
        return None
    return Problem(
        f"{ctx.call('precision')}: ModelParallelStrategy does not support precision={ctx.precision!r}; the Trainer "
        "does not check this for strategy names",
        f"use one of {', '.join(map(repr, MODEL_PARALLEL_PRECISIONS))}",
    )


model_parallel_accelerator = needs_accelerator(
    "LP206", "an accelerator other than cpu or cuda",
    accelerators=MODEL_PARALLEL_ACCELERATORS,
    why="{preset!r} runs on accelerator='cuda' (NCCL) or, for testing, accelerator='cpu' (gloo), not on "
    "{accelerator!r}",
    hint="use accelerator='cuda' on GPUs, or accelerator='cpu' to test the sharding on a laptop",
    fails='Trainer(strategy="tp2d_hybrid", accelerator="mps", devices=1)',
    fixed='Trainer(strategy="tp2d_hybrid", accelerator="cpu", devices=2)',
    evidence="runtime: Lightning raises ValueError for the strategy object on a simulated MPS device",
    setting=Setting(simulated=("mps",)),
)  # fmt: skip


@rule(
    "LP207", "error", "construction", "Fabric without a parallelize_fn",
    fails='Fabric(strategy="tp2d_hybrid", accelerator="cpu", devices=2)',
    fixed="def parallelize(module, device_mesh):\n    return module   # apply tensor parallelism and fully_shard\n"
    'Fabric(strategy=lightning_presets.strategy("tp2d_hybrid", target="fabric", '
    'parallelize_fn=parallelize), accelerator="cpu", devices=2)',
    evidence="runtime: Lightning's signature raises TypeError without parallelize_fn",
)  # fmt: skip
def fabric_has_parallelize_fn(ctx: Context) -> Problem | None:
    if ctx.kind != "fabric" or ModelParallelOptions.of(ctx).parallelize_fn is not None:
        return None
    return Problem(
        f"{ctx.call()}: Fabric's ModelParallelStrategy needs a parallelize_fn(module, device_mesh) that applies "
        "tensor parallelism and fully_shard to your model; a strategy name cannot carry one",
        f"Fabric(strategy=lightning_presets.strategy({ctx.preset!r}, target={ctx.target!r}, "
        "parallelize_fn=parallelize), ...)",
    )


@rule(
    "LP208", "error", "model", "a LightningModule without configure_model",
    fails="from lightning.pytorch import LightningModule\n\n"
    "class Model(LightningModule):   # no configure_model()\n    pass\n\n"
    'Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8).fit(Model())',
    fixed="from lightning.pytorch import LightningModule\n\n"
    "class Model(LightningModule):\n    def configure_model(self):\n"
    "        ...   # tensor parallelism and fully_shard with self.device_mesh\n\n"
    'Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8).fit(Model())',
    evidence="runtime: fit: Lightning raises TypeError in setup",
    unless="your LightningModule overrides configure_model (parallelizing with self.device_mesh)",
    when=lambda ctx: ctx.kind == "trainer", construction=False,
    consequence="nothing applies tensor parallelism or FSDP2, and the strategy fails after every process joined",
)  # fmt: skip
def model_has_configure_model(ctx: Context, model: nn.Module) -> Problem | None:
    if ctx.kind != "trainer" or overrides(model, "configure_model"):
        return None
    return Problem(
        f"{ctx.call()}: {type(model).__name__} does not override configure_model(), so nothing would apply "
        "tensor parallelism or FSDP2 and the strategy would fail after every process joined",
        "override configure_model(self) and parallelize there with self.device_mesh['tensor_parallel'] and "
        "self.device_mesh['data_parallel'] (see examples/quickstart.py)",
    )


@rule(
    "LP217", "error", "setup", "sync_batchnorm with ModelParallelStrategy, which never applies it",
    fails="model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))\n"
    'Trainer(strategy="fsdp2", accelerator="cpu", devices=2, sync_batchnorm=True).fit(model)',
    fixed="model = nn.Sequential(nn.Linear(8, 8), nn.LayerNorm(8))\n"
    'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model)',
    evidence="runtime: ModelParallelStrategy.setup never converts BatchNorm: after setup the layers are still "
    "BatchNorm1d",
    unless="the model has no batch norm layers, or configure_model converts them to SyncBatchNorm on CUDA",
    when=lambda ctx: ctx.sync_batchnorm and ctx.world_size > 1, shows=("sync_batchnorm",),
    consequence="each rank normalises over its own batch, silently (ModelParallelStrategy never applies it)",
)  # fmt: skip
def batch_norm_synchronised(ctx: Context, model: nn.Module) -> Problem | None:
    layers = batch_norm_layers(model, unsynchronised=True)  # after configure_model, which may have converted them
    if not ctx.sync_batchnorm or ctx.world_size < 2 or not layers:
        return None
    return Problem(
        f"{ctx.call('sync_batchnorm')}: ModelParallelStrategy never converts batch norm to SyncBatchNorm (DDP and FSDP "
        f"do), so {', '.join(layers[:3])}{' ...' if len(layers) > 3 else ''} normalise over each rank's own batch "
        "and the ranks train differently from what you asked, without an error",
        "on CUDA convert the layers yourself in configure_model (torch.nn.SyncBatchNorm.convert_sync_batchnorm(self)) "
        "before sharding (off CUDA SyncBatchNorm fails, LP219); else replace batch norm with LayerNorm/GroupNorm, or "
        "drop sync_batchnorm",
    )


SYNC_BATCH_NORM_DEVICES = ("cuda",)
"""The accelerators whose tensors torch's ``SyncBatchNorm`` normalises in training (of Lightning's: CUDA only)."""


@rule(
    "LP219", "error", "setup", "SyncBatchNorm layers with ModelParallelStrategy off CUDA",
    fails="model = nn.Sequential(nn.Linear(8, 8), nn.SyncBatchNorm(8))\n"
    'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model)',
    fixed="model = nn.Sequential(nn.Linear(8, 8), nn.BatchNorm1d(8))\n"
    'Trainer(strategy="fsdp2", accelerator="cpu", devices=2).fit(model)',
    evidence="runtime: SyncBatchNorm.forward raises ValueError 'SyncBatchNorm expected input tensor to be on GPU' in "
    "the first training step, on every rank",
)  # fmt: skip
def sync_batch_norm_on_gpus(ctx: Context, model: nn.Module) -> Problem | None:
    """ModelParallelStrategy always forms a process group, and torch's ``SyncBatchNorm`` refuses a non-GPU input in
    training whenever one exists (whatever the world size): decided on the complete model, after configure_model."""
    if ctx.accelerator in SYNC_BATCH_NORM_DEVICES:
        return None
    layers = sync_batch_norm_layers(model)
    if not layers:
        return None
    return Problem(
        f"{ctx.call('accelerator')}: the model's layer{'' if len(layers) == 1 else 's'} {', '.join(layers[:3])}"
        f"{' ...' if len(layers) > 3 else ''} {'is' if len(layers) == 1 else 'are'} nn.SyncBatchNorm, which torch "
        "normalises on GPU inputs only: every "
        f"rank fails with ValueError in its first training step on {ctx.accelerator!r}",
        "build the model with nn.BatchNorm layers (or LayerNorm/GroupNorm) off CUDA, without converting them to "
        "SyncBatchNorm in configure_model, or run on accelerator='cuda'",
    )


TWO_MESHES = """from lightning.pytorch import LightningModule
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module

class Model(LightningModule):
    def __init__(self):
        super().__init__()
        self.up, self.head = nn.Linear(8, 8), nn.Linear(8, 8)

    def configure_model(self):
        parallelize_module(self.up, self.device_mesh["tensor_parallel"], ColwiseParallel())
        fully_shard(self.head, mesh=self.device_mesh["data_parallel"])

"""
"""A model whose configure_model leaves parameters on two meshes: the 2-D one (tensor parallel) and the data one."""


def _tensor_parallel(ctx: Context) -> bool:
    """Whether the job's tensor-parallel size is known and above 1 (parameters can live on two meshes)."""
    _, tensor = resolved_sizes(ctx)
    return isinstance(tensor, int) and tensor > 1


@rule(
    "LP215", "error", "setup", "clipping by norm across parameters on different device meshes",
    fails=TWO_MESHES
    + 'Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, gradient_clip_val=1.0).fit(Model())',
    fixed=TWO_MESHES + 'Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, gradient_clip_val=1.0, '
    'gradient_clip_algorithm="value").fit(Model())',
    evidence="runtime: torch.nn.utils.clip_grad_norm_ raises RuntimeError 'All operands in aten.stack.default must "
    "have the same mesh'",
    unless="configure_model leaves every trainable parameter on one device mesh, or your LightningModule overrides "
    "configure_gradient_clipping",
    when=lambda ctx: ctx.clips_by_norm and _tensor_parallel(ctx), shows=("gradient_clip_val",),
    consequence="the first optimizer step raises on every rank (clip_grad_norm_ cannot stack norms of two meshes)",
)  # fmt: skip
def clipping_by_norm_on_one_mesh(ctx: Context, model: nn.Module) -> Problem | None:
    if not ctx.clips_by_norm:
        return None
    meshes = parameter_meshes(model)
    if len(meshes) < 2 or overrides(model, "configure_gradient_clipping"):
        return None
    return Problem(
        f"{ctx.call('gradient_clip_val')}: {type(model).__name__}'s parameters live on {len(meshes)} different device "
        f"meshes ({', '.join(sorted(meshes))}), and clipping by norm (torch.nn.utils.clip_grad_norm_) stacks their "
        "norms: torch raises at the first optimizer step, on every rank",
        "pass gradient_clip_algorithm='value', or clip in configure_gradient_clipping per mesh (the norms of each "
        "mesh's parameters, combined with .full_tensor())",
    )


@rule(
    "LP216", "error", "construction", "detect_anomaly with tensor parallelism",
    fails='Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, detect_anomaly=True)',
    fixed='Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8)',
    evidence="runtime: DTensor raises NotImplementedError for aten._is_any_true, which anomaly mode calls on every "
    "gradient",
)  # fmt: skip
def anomaly_detection_without_tensor_parallel(ctx: Context) -> Problem | None:
    _, tensor = resolved_sizes(ctx)
    if not ctx.detect_anomaly or not isinstance(tensor, int) or tensor < 2:
        return None
    return Problem(
        f"{ctx.call('detect_anomaly')} with tensor_parallel_size={tensor}: anomaly mode checks every gradient with "
        "aten._is_any_true, which DTensor has no sharding rule for: the first backward raises NotImplementedError",
        "drop detect_anomaly (torch.autograd.set_detect_anomaly on a tensor_parallel_size=1 run finds NaNs too)",
    )


RULES: tuple[Rule, ...] = (
    sizes_are_positive,
    sizes_match_world,
    anomaly_detection_without_tensor_parallel,
    batch_norm_synchronised,
    sync_batch_norm_on_gpus,
    clipping_by_norm_on_one_mesh,
    tp_divides_devices_per_node,
    tp_stays_in_node,
    model_parallel_precision,
    model_parallel_accelerator,
    fabric_has_parallelize_fn,
    model_has_configure_model,
    half_weights_have_a_scaler,
    *STRATEGY_HARDWARE_RULES,
)
