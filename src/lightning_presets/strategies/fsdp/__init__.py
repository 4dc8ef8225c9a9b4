"""FSDP (``FSDPStrategy``, FSDP1) presets: ``fsdp_offload_ckpt``, ``fsdp_hybrid_shard`` (HSDP) and ``fsdp_grad_op``.

One module per concern, as :mod:`lightning_presets.strategies.deepspeed`:

- :mod:`.options`: the one view of the presets' arguments that every rule, hook and layout reads
  (:class:`.options.FSDPOptions`);
- :mod:`.rules`: ``fsdp_offload_ckpt``'s rules, which the other presets share; :mod:`.sharding_rules`: the rules of
  ``fsdp_hybrid_shard`` and ``fsdp_grad_op`` (the sharding each stands for, the hybrid mesh);
- :mod:`.hooks`: the lifecycle hooks (the mixins);
- :mod:`.family`: the family (checkpoints, memory layout);
- :mod:`.presets`: the three presets, as data.
"""

from lightning_presets.strategies.fsdp.family import FSDP_FAMILY
from lightning_presets.strategies.fsdp.options import FSDPOptions
from lightning_presets.strategies.fsdp.presets import (
    FSDP_DEFAULTS,
    FSDP_GRAD_OP,
    FSDP_HYBRID_SHARD,
    FSDP_OFFLOAD_CKPT,
)

__all__ = ["FSDP_DEFAULTS", "FSDP_FAMILY", "FSDP_GRAD_OP", "FSDP_HYBRID_SHARD", "FSDP_OFFLOAD_CKPT", "FSDPOptions"]
