"""``lightning-presets plan``: which preset fits a model, per-GPU memory and step time under every preset.

``planner`` puts a plan together from per-preset ``estimates`` for a ``request`` over the ``presets`` that apply:
arithmetic from ``layouts`` (where each preset keeps the model states), or a ``trace`` of one training step of
the user's model (``user_model``) under fake tensors, run in a child process (``worker``), whose memory torch's
trackers attribute (``tracking``) and whose operators and collectives are counted (``counting``, into plain
``counts``). The step is Lightning's (``step``), attention is planned for CUDA's kernels (``attention``), and
what fake tensors cannot run is said in the user's terms (``untraceable``). A preset's step time is its counts
(``speed``) through a roofline and overlap model (``throughput``) on a GPU of the ``hardware`` table, with the
constants of ``calibration``. ``fit`` turns a plan into ``check --model``'s findings; ``reference_models`` are
decoders to plan without a model of one's own; ``text`` reads and writes counts and sizes.
"""

from __future__ import annotations

from lightning_presets.tools.plan.estimates import Estimate
from lightning_presets.tools.plan.hardware import DEFAULT_GPU, GPUS
from lightning_presets.tools.plan.layouts import OPTIMIZERS, PRECISIONS, bytes_per_param
from lightning_presets.tools.plan.planner import RULE, Plan, plan
from lightning_presets.tools.plan.presets import planned_presets
from lightning_presets.tools.plan.request import ACTIVATION_CHECKPOINTING, KERNELS, PlanRequest
from lightning_presets.tools.plan.text import GIB, format_bytes, format_count, format_size, parse_count

__all__ = [
    "ACTIVATION_CHECKPOINTING", "DEFAULT_GPU", "GIB", "GPUS", "KERNELS", "OPTIMIZERS", "PRECISIONS", "RULE",
    "Estimate", "Plan", "PlanRequest", "format_bytes", "format_count", "bytes_per_param", "format_size",
    "parse_count", "plan", "planned_presets",
]  # fmt: skip
