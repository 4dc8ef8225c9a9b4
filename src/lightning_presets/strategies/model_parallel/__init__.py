"""``ModelParallelStrategy`` presets (tensor parallel and FSDP2): ``tp2d_hybrid``, ``fsdp2`` and
``fsdp2_offload_ckpt``.

One module per concern, as :mod:`lightning_presets.strategies.deepspeed`:

- :mod:`.options`: the one view of the presets' arguments (:class:`.options.ModelParallelOptions`);
- :mod:`.rules`: the family's rules and ``tp2d_hybrid``'s; :mod:`.fsdp2`: the FSDP2 presets' own rules and their
  sharding (``fully_shard`` on the repeated blocks and the root);
- :mod:`.hooks`: the lifecycle hooks (the mixins);
- :mod:`.family`: the family (checkpoints, memory layout);
- :mod:`.presets`: the three presets, as data.
"""

from lightning_presets.strategies.model_parallel.family import MODEL_PARALLEL_FAMILY
from lightning_presets.strategies.model_parallel.options import ModelParallelOptions
from lightning_presets.strategies.model_parallel.presets import FSDP2, FSDP2_OFFLOAD_CKPT, TP2D_HYBRID

__all__ = ["FSDP2", "FSDP2_OFFLOAD_CKPT", "MODEL_PARALLEL_FAMILY", "TP2D_HYBRID", "ModelParallelOptions"]
