"""``acme_fsdp``: lightning-presets' ``fsdp2`` with Acme's node policy on top.

Built on a built-in preset: the same strategy, hooks and guards (``dataclasses.replace`` keeps them), plus two
rules of Acme's own. Codes LP900-LP999 are left to third parties.
"""

from __future__ import annotations

import dataclasses

from lightning_presets import Context, Problem, rule
from lightning_presets.core.rules import Setting
from lightning_presets.strategies.model_parallel import FSDP2

GPUS_PER_NODE = 8
"""Every Acme training node has 8 GPUs, allocated whole."""


@rule(
    "LP901", "error", "construction", "more devices per node than an Acme node has GPUs",
    fails='Trainer(strategy="acme_fsdp", accelerator="cuda", devices=16)   # on a 16-GPU workstation',
    fixed='Trainer(strategy="acme_fsdp", accelerator="cuda", devices=8, num_nodes=2)',
    evidence="source: Acme's node inventory (8 GPUs each): a local rank of 8 or more has no GPU to select",
    setting=Setting(gpus=16),
)  # fmt: skip
def fits_an_acme_node(ctx: Context) -> Problem | None:
    """On the Acme cluster, local ranks 8 and up select a GPU no node has: they fail at launch."""
    if ctx.accelerator != "cuda" or ctx.devices_per_node <= GPUS_PER_NODE:
        return None
    nodes = -(-ctx.world_size // GPUS_PER_NODE)
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: Acme nodes have {GPUS_PER_NODE} GPUs, so local ranks "
        f"{GPUS_PER_NODE} to {ctx.devices_per_node - 1} would find no GPU when the job starts",
        f"use devices={GPUS_PER_NODE}, num_nodes={nodes} for the same {ctx.world_size} processes",
    )


@rule(
    "LP902", "warning", "construction", "fewer devices per node than an Acme node has GPUs",
    fails='Trainer(strategy="acme_fsdp", accelerator="cuda", devices=4)',
    fixed='Trainer(strategy="acme_fsdp", accelerator="cuda", devices=8)',
)  # fmt: skip
def fills_acme_nodes(ctx: Context) -> Problem | None:
    """Legal, but Acme allocates nodes whole: the other GPUs of each node sit idle for the job's length."""
    if ctx.accelerator != "cuda" or ctx.devices_per_node >= GPUS_PER_NODE:
        return None
    idle = GPUS_PER_NODE - ctx.devices_per_node
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: Acme allocates whole {GPUS_PER_NODE}-GPU nodes, so {idle} GPU(s) "
        "per node would sit idle",
        f"use devices={GPUS_PER_NODE} (and fewer nodes, or a larger batch)",
    )


ACME_FSDP = dataclasses.replace(
    FSDP2,
    name="acme_fsdp",
    description="Acme's standard sharded training: lightning-presets' fsdp2 (FSDP2 over every device, no model "
    f"change) on whole {GPUS_PER_NODE}-GPU Acme nodes.",
    rules=(*FSDP2.rules, fits_an_acme_node, fills_acme_nodes),
    tested_with={"lightning": "2.6.6", "torch": "2.13.0", "evidence": "construction (simulated CUDA)"},
)
