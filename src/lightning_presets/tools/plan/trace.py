"""One training step of the user's model under fake tensors, wrapped as a preset wraps it, and its memory.

Fake tensors (``FakeTensorMode``) carry shapes, dtypes and storages but no data, so a 1.3B-parameter model
costs no memory; a fake process group (``torch.testing._internal.distributed.fake_pg``) of the target world
size makes every collective a no-op with the right output shapes; torch's own trackers
(``torch.distributed._tools``: ``FSDPMemTracker`` for FSDP2, ``MemTracker`` otherwise) attribute every
storage to parameters, gradients, optimizer state, activations and temporaries as the step runs.

What is wrapped is what the preset does: ``configure_model`` with the preset's device mesh, then the
preset's own FSDP2 sharding (``strategies.model_parallel.fsdp2.shard_blocks_and_root``: the repeated blocks, activation
checkpointing and the CPU offload policy); a DDP replica is the unwrapped module with its gradients kept
between steps (DDP's gradient buckets, ``gradient_as_bucket_view=True``). The optimizer state is created
by a step on zero gradients, whose gradients stay alive as a real step's do; then one training step is
measured as Lightning runs it (``step``): ``training_step`` under the precision plugin's forward context,
``zero_grad``, backward, the optimizer step. Planned for CUDA, ``F.scaled_dot_product_attention`` keeps
what CUDA's fused kernels keep (``attention``); torch.compile'd modules run eagerly (an "eager estimate").
The same step's operators and collectives are counted (:class:`lightning_presets.tools.plan.counting.OpCounter`)
for the step-time estimate. The trackers and the saved-tensor count are in ``tracking``.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, cast

import torch
from torch import nn
from torch.utils._pytree import tree_map_only

from lightning_presets.inspection.blocks import find_repeated_blocks
from lightning_presets.inspection.hooks import overrides
from lightning_presets.registry import private
from lightning_presets.strategies.model_parallel import fsdp2
from lightning_presets.tools.plan import depth, tracking
from lightning_presets.tools.plan.attention import CudaAttention
from lightning_presets.tools.plan.counting import OpCounter
from lightning_presets.tools.plan.counts import StepCounts
from lightning_presets.tools.plan.layouts import Layout
from lightning_presets.tools.simulation import step, user_model
from lightning_presets.tools.simulation.tracing import as_on_a_real_run, attention_replaced
from lightning_presets.tools.simulation.untraceable import answering_scalars, untraceable_reason


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelFacts:
    """Sizes of the model the arithmetic needs."""

    numel: int
    largest_layer: int
    """Parameters of the module with the most parameters of its own."""
    block_params: int
    """Parameters of one repeated block (0 when there is none)."""
    root_params: int
    """Parameters outside the repeated blocks."""
    blocks: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True)
class Traced:
    """Bytes per rank of one measured training step."""

    parameters: int
    gradients: int
    optimizer: int
    """Held after the optimizer step, before ``zero_grad``, wherever they live (GPU, or CPU when offloaded)."""
    activations: int
    """Bytes saved for backward at the end of the forward pass (parameters excluded)."""
    peak: int
    """The step's peak on the device: everything but what the CPU offload policy keeps in CPU memory."""
    peak_all: int
    """The step's peak of everything the rank holds, CPU-offloaded state included."""
    transient_peak: int
    """The step's peak of what is not parameters, gradients or optimizer state."""
    offloaded: bool
    batch: int | None
    facts: ModelFacts
    counts: StepCounts = field(default_factory=StepCounts)
    """What the step computed and moved (FLOPs, bytes per operator, collectives): the step-time estimate's input."""
    notes: tuple[str, ...] = field(default=())
    """About this preset's wrapping, for the reader."""
    step: tuple[str, ...] = field(default=())
    """How the step was traced (the loss, the precision, the optimizer, the attention kernels, eager or compiled):
    the plan's evidence."""
    segments: tuple[tuple[str, str, int, int, int], ...] = field(default=())
    """(phase, where in the stack, peak, peak of everything, transient peak) per moment of a shortened model's
    step (:mod:`lightning_presets.tools.plan.depth`); empty for a full trace."""
    depth: str | None = None
    """``3 and 4 of 80 blocks extrapolated`` when the figures are extrapolated from shortened traces."""

    def as_dict(self) -> dict[str, Any]:
        return {
            "parameters": self.parameters, "gradients": self.gradients, "optimizer": self.optimizer,
            "activations": self.activations, "peak": self.peak, "peak_all": self.peak_all,
            "transient_peak": self.transient_peak, "offloaded": self.offloaded, "batch": self.batch,
            "facts": {"numel": self.facts.numel, "largest_layer": self.facts.largest_layer,
                      "block_params": self.facts.block_params, "root_params": self.facts.root_params,
                      "blocks": list(self.facts.blocks)},
            "notes": list(self.notes), "step": list(self.step), "counts": self.counts.as_dict(),
            "segments": [list(each) for each in self.segments], "depth": self.depth,
        }  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Traced:
        facts = data["facts"]
        return cls(
            parameters=data["parameters"], gradients=data["gradients"], optimizer=data["optimizer"],
            activations=data["activations"], peak=data["peak"], peak_all=data["peak_all"],
            transient_peak=data["transient_peak"], offloaded=data["offloaded"], batch=data["batch"],
            facts=ModelFacts(numel=facts["numel"], largest_layer=facts["largest_layer"],
                             block_params=facts["block_params"], root_params=facts["root_params"],
                             blocks=tuple(facts["blocks"])),
            notes=tuple(data["notes"]), step=tuple(data["step"]), counts=StepCounts.from_dict(data["counts"]),
            segments=tuple(tuple(each) for each in data.get("segments", ())), depth=data.get("depth"),
        )  # fmt: skip


class TraceError(Exception):
    """This preset's wrapping or step failed on the user's model (the others may still be planned)."""


class NotApplicable(TraceError):
    """The preset cannot wrap this model (the message says which guard says so)."""


# --------------------------------------------------------------------------------------------- the fake world


def _world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


def device_mesh(sizes: Mapping[str, int]) -> Any:
    """A CPU ``DeviceMesh`` over the fake world with these named dimensions (created outside fake mode)."""
    from torch.distributed.device_mesh import DeviceMesh

    shape = tuple(sizes.values())
    world = 1
    for size in shape:
        world *= size
    return DeviceMesh("cpu", torch.arange(world).view(shape), mesh_dim_names=tuple(sizes))


# --------------------------------------------------------------------------------------------- the step


def facts_of(model: nn.Module) -> ModelFacts:
    blocks = find_repeated_blocks(model)
    instances = [module for module in model.modules() if isinstance(module, tuple(blocks))] if blocks else []
    numel = sum(p.numel() for p in model.parameters())
    in_blocks = sum(p.numel() for block in instances for p in block.parameters())
    own = [sum(p.numel() for p in module.parameters(recurse=False)) for module in model.modules()]
    return ModelFacts(
        numel=numel,
        largest_layer=max(own, default=0),
        block_params=max((sum(p.numel() for p in block.parameters()) for block in instances), default=0),
        root_params=numel - in_blocks,
        blocks=tuple(sorted(block.__name__ for block in blocks)),
    )


def build(factory: Callable[[], Any], spec: str, dtype: torch.dtype | None = None) -> tuple[nn.Module, list[str]]:
    """The user's model built under the caller's fake mode (as ``Trainer.fit`` sees it: a ``torch.compile``
    wrapper taken off), and notes: initialisers' reads of values that do not exist were answered with zero."""
    with _default_dtype(dtype), answering_scalars() as answers:  # dtype: as Lightning's init_module() does
        built = user_model.build(factory, spec)
    notes = []
    if answers.count:
        notes.append(f"building the model read {answers.count} value(s) from tensors (first at {answers.first}), "
                     "answered with 0: fake tensors have no values, and building only fills them")  # fmt: skip
    model, compiled = step.uncompiled(built)
    if compiled:
        notes.append("torch.compile(module) returned by the factory: Trainer.fit unwraps it (and compiles again)")
    return model, notes


def configure(model: nn.Module, spec: str, mesh: Any) -> None:
    """``configure_model()`` as the strategy calls it (with ``mesh`` as the module's ``device_mesh``)."""
    if mesh is not None:
        private.set_device_mesh(model, mesh)  # what ModelParallelStrategy gives a LightningModule
    if overrides(model, "configure_model"):
        with answering_scalars(), user_model.contained(f"{spec}: configure_model()"):
            cast(Any, model).configure_model()


def model_facts(factory: Callable[[], Any], spec: str) -> ModelFacts:
    """The model's sizes once built and configured as a strategy without a mesh configures it (DDP, FSDP,
    DeepSpeed: layers made in ``configure_model`` count), built under fake tensors (no memory)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with as_on_a_real_run(), FakeTensorMode(allow_non_fake_inputs=True), step.eager():
        model, _ = build(factory, spec)
        with contextlib.suppress(user_model.ModelError):  # one that needs a mesh: the module as built counts
            configure(model, spec, None)
        return facts_of(model)


def _wrap(model: nn.Module, layout: Layout, mesh: Any, spec: str) -> tuple[list[str], bool]:
    """Apply the preset's wrapping in place, as its strategy does: notes for the reader, and whether the preset
    sharded the root itself (its steps then go through the root's ``__call__``)."""
    notes = []
    defines = overrides(model, "configure_model")
    if layout.tensor_parallel and not defines:
        raise NotApplicable(f"LP208: {type(model).__name__} does not override configure_model(), so nothing would "
                            f"apply tensor parallelism under {layout.preset}")  # fmt: skip
    try:
        configure(model, spec, mesh)
    except user_model.ModelError as error:
        raise TraceError(str(error)) from None
    parallelized = fsdp2.is_parallelized(model)
    if layout.tensor_parallel:
        if not parallelized:
            notes.append("configure_model() applied no tensor parallelism or FSDP2: the model trains unsharded")
    elif layout.memory.on_mesh:
        if parallelized:
            notes.append("configure_model() shards the model itself; the preset leaves it as it is")
        else:
            fsdp2.shard_blocks_and_root(
                model, mesh["data_parallel"], offload=layout.offload, checkpoint=layout.checkpoint
            )
            return notes, True
    elif layout.checkpoint:
        from torch.distributed._composable.checkpoint_activation import checkpoint as checkpoint_module

        blocks = tuple(find_repeated_blocks(model))
        for module in [each for each in model.modules() if blocks and isinstance(each, blocks)]:
            checkpoint_module(module)
    return notes, False


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype | None) -> Iterator[None]:
    previous = torch.get_default_dtype()
    if dtype is not None:
        torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def trace(
    factory: Callable[[], Any],
    spec: str,
    layout: Layout,
    *,
    precision: str,
    optimizer: str = "adamw",
    mesh_sizes: Mapping[str, int] | None = None,
    batch_size: int | None = None,
    batch: str | None = None,
    kernels: str = "cuda",
    optimize: bool = True,
    gpus_per_node: int | None = None,
    stack: depth.Stack | None = None,
    blocks: int | None = None,
) -> Traced:
    """Build the model under fake tensors, wrap it as ``layout`` says, measure one training step.

    ``batch``: ``MODULE:FUNCTION`` returning one batch (else ``example_input_array``). ``kernels``: ``cuda``
    plans attention and the optimizer's default implementation as on a CUDA GPU, ``cpu`` as on the CPU.
    ``optimize=False`` leaves the optimizer out (forward and backward only: for the layouts whose model
    states come from a formula, only the activations and temporaries are used). ``gpus_per_node``: where the node
    boundary lies, for the collectives' counts (default: one node). ``stack`` and ``blocks``: trace the model with
    only the first ``blocks`` blocks of its repeated ``stack`` (``depth``), keeping the peak per moment of the step.

    Needs :func:`world.fake_world` around it. A :class:`user_model.ModelError` is the model's own problem (the
    same for every preset: it cannot be built, given a batch, or traced); a :class:`TraceError` is this
    preset's.
    """
    from torch._subclasses.fake_tensor import FakeTensorMode

    mesh = device_mesh(mesh_sizes) if mesh_sizes else None
    compute = layout.compute_for(precision)
    convert, _ = step.precision_dtypes(precision, compute)
    context, context_text = step.forward_context(precision, compute)
    with as_on_a_real_run(), FakeTensorMode(allow_non_fake_inputs=True) as fake, step.eager():
        model, notes = build(factory, spec, convert)
        the_batch = user_model.batch(model, spec, batch_size, batch)
        if convert is not None:  # the precision plugin's convert_input for true precisions
            the_batch = replace(the_batch, value=tree_map_only(
                torch.Tensor, lambda t: t.to(convert) if t.is_floating_point() else t, the_batch.value))  # fmt: skip
        described = [step.describe_step(model, the_batch), context_text]
        try:
            kept = depth.truncate(model, stack, blocks) if stack is not None and blocks is not None else ()
        except depth.NotExtrapolable as error:
            raise TraceError(str(error)) from None
        try:
            wrap_notes, through_root = _wrap(model, layout, mesh, spec)
        except TraceError:
            raise
        except Exception as error:
            raise TraceError(f"wrapping the model as {layout.preset} failed: {type(error).__name__}: {error}") from None
        facts = facts_of(model)
        optimizers = user_model.optimizers(model, spec, optimizer) if optimize else []
        compiled = step.compiled_modules(model)
        try:
            measured, counts, attention = _measured_step(model, optimizers, the_batch, layout, context=context,
                                                 through_root=through_root, spec=spec, kernels=kernels,
                                                 ops=OpCounter(fake, gpus_per_node or _world()),
                                                 blocks=kept)  # fmt: skip
        except (TraceError, user_model.ModelError):
            raise
        except Exception as error:
            raise _step_error(error, layout, spec, the_batch) from None
    if optimizers:
        source = "configure_optimizers" if hasattr(model, "configure_optimizers") else f"--optimizer {optimizer}"
        described.append(step.describe_optimizers(optimizers, source))
    if attention:
        described.append(attention)
    if compiled:
        described.append(step.EAGER_ESTIMATE.format(count=compiled))
    return Traced(**measured, counts=counts, batch=user_model.batch_of(the_batch.value), facts=facts,
                  notes=(*notes, *wrap_notes), offloaded=layout.offload, step=tuple(described))  # fmt: skip


def _step_error(error: Exception, layout: Layout, spec: str, batch: user_model.Batch) -> Exception:
    """An untraceable operation in the user's code is the model's problem; anything else is this preset's."""
    reason = untraceable_reason(error)
    if reason and " at " in reason:
        return user_model.ModelError(
            f"--model {spec} cannot be traced: under fake tensors (shapes, no values) the training step stopped "
            f"because {reason}. Nothing is planned from a step that did not run: make that operation independent of "
            "the values, or plan the model states alone with --params")  # fmt: skip
    first = str(error).strip().splitlines()
    return TraceError(f"the training step ({batch.source}) failed under {layout.preset}: {type(error).__name__}"
                      + (f": {first[0]}" if first else ""))  # fmt: skip


class _Stepper:
    """Steps one optimizer. A ``torch.optim`` optimizer of DTensor parameters steps as a twin over their local
    shards: its updates are elementwise, so the memory is the same, and DTensor's sharding propagation of
    foreach ops (seconds per op on CPU) is skipped. Any other optimizer steps as it is."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        from torch.distributed.tensor import DTensor

        self.pairs: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.optimizer = optimizer
        elementwise = type(optimizer).__module__.startswith("torch.optim.") and "closure" not in type(
            optimizer).__name__.lower() and not isinstance(optimizer, torch.optim.LBFGS)  # fmt: skip
        parameters = [p for group in optimizer.param_groups for p in group["params"]]
        if not elementwise or not any(isinstance(p, DTensor) for p in parameters):
            return
        groups = []
        for group in optimizer.param_groups:
            local = []
            for parameter in group["params"]:
                shard = parameter._local_tensor if isinstance(parameter, DTensor) else parameter
                self.pairs.append((parameter, shard))
                local.append(shard)
            groups.append({**{key: value for key, value in group.items() if key != "params"}, "params": local})
        accepted = inspect.signature(type(optimizer)).parameters
        defaults = {key: value for key, value in optimizer.defaults.items() if key in accepted}
        self.optimizer = type(optimizer)(groups, **defaults)

    @torch.no_grad()
    def step(self) -> None:
        for parameter, local in self.pairs:
            grad = parameter.grad
            local.grad = None if grad is None else getattr(grad, "_local_tensor", grad)
        self.optimizer.step()
        for _, local in self.pairs:
            local.grad = None


def _measured_step(
    model: nn.Module,
    optimizers: list[torch.optim.Optimizer],
    batch: user_model.Batch,
    layout: Layout,
    *,
    context: contextlib.AbstractContextManager[Any],
    through_root: bool,
    spec: str,
    kernels: str,
    ops: OpCounter,
    blocks: tuple[nn.Module, ...] = (),
) -> tuple[dict[str, Any], StepCounts, str | None]:
    """Create the optimizer state with one step on zero gradients (they stay alive, as a real step's do), then
    measure one training step as Lightning runs it. Returns the figures, what the step computed and moved
    (:class:`OpCounter`, innermost: it sees the operators after the trackers), and what attention was planned as."""
    keep_grads = layout.kind == "replica"  # DDP's buckets hold the gradients from one step to the next
    steppers = [_Stepper(optimizer) for optimizer in optimizers]
    for stepper in steppers:
        for group in stepper.optimizer.param_groups:
            if kernels == "cuda" and group.get("foreach", False) is None:  # torch's default for CUDA tensors
                group["foreach"] = True
    for optimizer, stepper in zip(optimizers, steppers, strict=True):
        with torch.no_grad():
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    parameter.grad = torch.zeros_like(parameter)
        stepper.step()
    for optimizer, stepper in zip(optimizers, steppers, strict=True):
        for group, twin in zip(optimizer.param_groups, stepper.optimizer.param_groups, strict=True):
            group["foreach"] = twin.get("foreach")  # for the plan's description: what ran
    tracker = tracking.tracker(model, [stepper.optimizer for stepper in steppers], layout.offload and layout.traceable,
                               blocks)  # fmt: skip
    if hasattr(tracker, "track_inputs"):  # FSDPMemTracker labels the inputs; MemTracker counts them as they come
        tracker.track_inputs(batch.value)
    counter = tracking.SavedBytes()
    planned: list[CudaAttention] = []

    def cuda_attention(original: Callable[..., Any]) -> CudaAttention:
        planned.append(CudaAttention(original))
        return planned[-1]

    attention = attention_replaced(cuda_attention) if kernels == "cuda" else contextlib.nullcontext()
    with tracker, attention, ops:  # the whole step: checkpointed blocks run attention again in backward
        with counter.counting(), context:
            loss = step.loss(model, batch, through_root=through_root, spec=spec)
        for optimizer in optimizers:  # Lightning's zero_grad: after the step function, before backward
            optimizer.zero_grad(set_to_none=not keep_grads)
        ops.phase = tracker.lp_phase = "backward"
        torch.autograd.backward(loss)
        del loss
        ops.phase = tracker.lp_phase = "optimizer"
        for stepper in steppers:
            stepper.step()
        snapshot = tracker.get_tracker_snapshot()
    figures = {
        "parameters": tracking.category_sum(snapshot, tracking.PARAMETERS),
        "gradients": tracking.category_sum(snapshot, tracking.GRADIENTS),
        "optimizer": tracking.category_sum(snapshot, tracking.OPTIMIZER),
        "activations": counter.bytes,
        "peak": tracker.lp_peak,
        "peak_all": tracker.lp_peak_all,
        "transient_peak": tracker.lp_transient,
        "segments": tuple((*key, *value) for key, value in tracker.lp_segments.items()),
    }
    return figures, ops.counts(), planned[0].describe() if planned else None
