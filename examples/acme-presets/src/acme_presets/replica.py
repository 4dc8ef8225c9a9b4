"""``acme_replica``: Acme's data-parallel preset, of a strategy family Acme declares itself.

Acme runs data parallelism through its own family, ``ACME_REPLICA``: the data lightning-presets reads of a family
instead of its name. Declaring it is what gives the preset lightning-presets' resume checks (``fit(ckpt_path=...)``
refuses a checkpoint the strategy cannot load, with the conversion that makes it loadable) and ``plan``'s memory
and speed estimates; a family that declares nothing gets neither.
"""

from __future__ import annotations

from acme_presets.strategies import fills_acme_nodes, fits_an_acme_node
from lightning_presets import Preset
from lightning_presets.core.family import Checkpoints, Family, Layout, Memory

ACME_REPLICA = Family(
    "acme_replica",
    # Lightning's DDPStrategy underneath: one file per checkpoint, read through the Trainer's CheckpointIO
    checkpoints=Checkpoints(loads=frozenset({"file"}), writes=frozenset({"file"}), through_checkpoint_io=True),
    # every GPU holds the whole model: plan counts weights, gradients and optimizer states per GPU
    memory=Memory(
        title="Acme replica", rank=0, traceable=True, compute="autocast", place=lambda _: Layout(placement="replica")
    ),
    reducer=True,  # DDP's Reducer: it waits for a gradient of every trained parameter
)

ACME_REPLICA_DDP = Preset(
    name="acme_replica",
    description="Acme's data parallelism: DDP over every device of whole 8-GPU Acme nodes, in Acme's own family "
    "(resume and plan checks come from its declaration).",
    family=ACME_REPLICA,
    strategy={"trainer": "DDPStrategy", "fabric": "DDPStrategy"},
    rules=(fits_an_acme_node, fills_acme_nodes),
    tested_with={"lightning": "2.6.6", "torch": "2.13.0", "evidence": "construction (simulated CUDA)"},
)
