"""Which presets ``plan`` plans: every installed strategy preset of a family with a GPU memory layout, whether
each applies to the job (the presets' own guards, as ``check`` runs them on simulated GPUs), and its mesh."""

from __future__ import annotations

import warnings
from dataclasses import replace

from lightning_presets.core.environment import DENY_VARIABLE
from lightning_presets.core.preset import Preset
from lightning_presets.registry import catalog
from lightning_presets.registry.codes import MISSING_DEPENDENCY
from lightning_presets.registry.requirements import is_importable
from lightning_presets.tools.plan import layouts
from lightning_presets.tools.plan.layouts import Layout
from lightning_presets.tools.plan.request import PlanRequest


def _layouts() -> list[tuple[Preset, Layout]]:
    """Every installed strategy preset of a family the planner knows, in preference order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        presets = catalog.strategy_catalog().presets
    found = [(preset, layout) for preset in presets.values() if (layout := layouts.layout_of(preset)) is not None]
    return sorted(found, key=lambda pair: (pair[1].rank, pair[0].name))


def planned_presets() -> list[str]:
    """The names of the presets the planner can plan, in preference order."""
    return [preset.name for preset, _ in _layouts()]


def nothing_to_plan() -> str:
    """Why there is no preset to plan: the catalog has none with a GPU memory layout (denied, or not installed)."""
    import os

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = sorted(catalog.strategy_catalog().presets)
    deny = os.environ.get(DENY_VARIABLE, "").strip()
    why = f"{DENY_VARIABLE}={deny} is set" if deny else "none is installed"
    return (f"nothing to plan: no strategy preset with a GPU memory layout is loaded ({why}; loaded: "
            f"{', '.join(loaded) or 'none'}); remove lightning-presets from {DENY_VARIABLE} to plan its "
            "presets")  # fmt: skip


def plannable(request: PlanRequest) -> list[tuple[Preset, Layout]]:
    """The presets to plan for ``request`` (``request.presets``, or all), in preference order."""
    found = _layouts()
    if not found:
        return []
    unknown = sorted(set(request.presets) - {preset.name for preset, _ in found})
    if unknown:
        raise ValueError(f"cannot plan {', '.join(unknown)}: the presets with a GPU memory layout are "
                         f"{', '.join(preset.name for preset, _ in found)}")  # fmt: skip
    chosen = [(preset, layout) for preset, layout in found if not request.presets or preset.name in request.presets]
    return [(preset, what_if(layout, request)) for preset, layout in chosen]


def what_if(layout: Layout, request: PlanRequest) -> Layout:
    """``--activation-checkpointing full``: a preset that does not checkpoint activations planned as if it
    checkpointed every repeated block (its memory and its recomputation both traced so); others unchanged."""
    if request.activation_checkpointing != "full" or layout.checkpoint:
        return layout
    return replace(layout, checkpoint=True, summary=f"{layout.summary}, activations checkpointed (what-if: "
                   "--activation-checkpointing full; the preset does not, pass it yourself)")  # fmt: skip


def unplanned(request: PlanRequest) -> tuple[str, ...]:
    """A note naming the installed strategy presets the planner has no layout for (TPU, unknown families)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        presets = catalog.strategy_catalog().presets
    names = sorted(
        name for name, preset in presets.items()
        if layouts.layout_of(preset) is None and (not request.presets or name in request.presets)
    )  # fmt: skip
    return (f"not planned (no GPU memory layout): {', '.join(names)}",) if names else ()


def mesh_sizes(preset: Preset, layout: Layout, request: PlanRequest) -> dict[str, int] | None:
    """The device mesh the preset builds for this cluster (ModelParallelStrategy presets), else ``None``."""
    if not layout.memory.on_mesh or preset.mesh is None:
        return None
    return preset.mesh.resolve(preset.init_params, request.gpus_per_node, request.num_nodes)


def _degenerate(preset: Preset, layout: Layout, request: PlanRequest) -> str | None:
    """Why the preset's mesh on this cluster makes it another preset in disguise (the planner recommends that one)."""
    sizes = preset.mesh.resolve(preset.init_params, request.gpus_per_node, request.num_nodes) if preset.mesh else None
    if not sizes:
        return None
    if layout.tensor_parallel and sizes.get("tensor_parallel", 1) < 2:
        return (f"with {request.gpus_per_node} GPU per node the tensor-parallel size would be 1: that is FSDP2 "
                "across nodes, use strategy='fsdp2'")  # fmt: skip
    if layout.kind == "hybrid" and sizes.get("replicate", 1) < 2:
        return (f"with {request.num_nodes} node the mesh has a single replica: that is full sharding inside the node "
                "with extra process groups, use strategy='fsdp2' (or plan --num-nodes 2 or more)")  # fmt: skip
    return None


def applicability(preset: Preset, layout: Layout, request: PlanRequest) -> tuple[list[str], str | None]:
    """Why the preset does not apply to this job (empty when it does), and an install command if it needs one.

    The job is checked as ``lightning-presets check`` checks it, on simulated GPUs: the presets' own guards.
    A missing optional dependency is not a reason: the plan is for the target machine.
    """
    from lightning_presets.tools.check.engine import check_job
    from lightning_presets.tools.check.request import CheckRequest

    install = next((each.install_command for each in preset.requires if not is_importable(each.module)), None)
    arguments = {"strategy": preset.name, "accelerator": "cuda", "devices": request.gpus_per_node,
                 "num_nodes": request.num_nodes, "precision": request.precision}  # fmt: skip
    report = check_job(CheckRequest(arguments=arguments, gpus=request.gpus_per_node, gpu_memory=request.gpu_memory))
    reasons = [f"{each.code}: {each.message}" for each in report.findings
               if each.severity == "error" and each.code != MISSING_DEPENDENCY.code]  # fmt: skip
    degenerate = _degenerate(preset, layout, request)
    if degenerate:
        reasons.append(degenerate)
    return reasons, install
