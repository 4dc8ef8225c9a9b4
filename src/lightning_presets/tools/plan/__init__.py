"""``lightning-presets plan``: which preset fits a model, per-GPU memory under every preset.

``planner`` puts a plan together from per-preset ``estimates``: arithmetic from ``layouts`` (where each preset
keeps the model states), or a ``trace`` of one training step of the user's model (``user_model``) under fake
tensors, run in a child process (``worker``). The step is Lightning's (``step``), attention is planned for
CUDA's kernels (``attention``), and what fake tensors cannot run is said in the user's terms
(``untraceable``). ``fit`` turns a plan into ``check --model``'s findings; ``reference_models`` are decoders
to plan without a model of one's own.
"""

from __future__ import annotations

from lightning_presets.tools.plan.estimates import (
    GIB,
    KERNELS,
    Estimate,
    PlanRequest,
    format_bytes,
    format_count,
    format_size,
    parse_count,
    planned_presets,
)
from lightning_presets.tools.plan.layouts import OPTIMIZERS, PRECISIONS, bytes_per_param
from lightning_presets.tools.plan.planner import RULE, Plan, plan

__all__ = [
    "GIB", "KERNELS", "OPTIMIZERS", "PRECISIONS", "RULE", "Estimate", "Plan", "PlanRequest", "format_bytes",
    "format_count", "bytes_per_param", "format_size", "parse_count", "plan", "planned_presets",
]  # fmt: skip
