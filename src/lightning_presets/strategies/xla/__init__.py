"""XLA presets (``XLAFSDPStrategy``, Fabric only): ``xla_fsdp_ckpt``.

Lightning's Trainer has no XLA FSDP strategy (only ``XLAStrategy``, a data-parallel one), so this preset
has no Trainer form rather than a Trainer form that would not shard. torch_xla is optional and never
imported here; the registry probes it first.

One module per concern, as :mod:`lightning_presets.strategies.deepspeed`: :mod:`.options` (the arguments' view,
:class:`.options.XLAFSDPOptions`), :mod:`.rules` (the rules and the tuple the preset runs), :mod:`.hooks` (the
mixin), :mod:`.family` and :mod:`.presets` (the preset, as data).
"""

from lightning_presets.strategies.xla.family import XLA_FAMILY
from lightning_presets.strategies.xla.options import XLAFSDPOptions
from lightning_presets.strategies.xla.presets import TORCH_XLA, XLA_FSDP_CKPT

__all__ = ["TORCH_XLA", "XLA_FAMILY", "XLA_FSDP_CKPT", "XLAFSDPOptions"]
