"""DDP (``DDPStrategy``) presets: ``ddp_static_graph`` and ``ddp_bf16_compress``.

One module per concern, as :mod:`lightning_presets.strategies.deepspeed`:

- :mod:`.options`: the one view of the presets' arguments that every rule and hook reads (:class:`.options.DDPOptions`);
- :mod:`.rules`: the rules, and the tuple each preset runs;
- :mod:`.hooks`: the lifecycle hooks (the mixins);
- :mod:`.family`: the family (checkpoints, memory layout, reducer);
- :mod:`.presets`: the two presets, as data.
"""

from lightning_presets.strategies.ddp.family import DDP_FAMILY
from lightning_presets.strategies.ddp.options import DDPOptions
from lightning_presets.strategies.ddp.presets import DDP_BF16_COMPRESS, DDP_STATIC_GRAPH

__all__ = ["DDP_BF16_COMPRESS", "DDP_FAMILY", "DDP_STATIC_GRAPH", "DDPOptions"]
