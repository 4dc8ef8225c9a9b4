"""DeepSpeed (``DeepSpeedStrategy``) presets: ``deepspeed_zero2_offload`` and ``deepspeed_zero3_offload_ckpt``.

One module per concern:

- :mod:`.config`: the one view of the job's DeepSpeed config that every rule reads (:func:`.config.config_view`);
- :mod:`.parser`: Lightning's ``_format_config`` and DeepSpeed's own ``DeepSpeedConfig``, run early on a copy;
- :mod:`.config_rules` and :mod:`.job_rules`: the rules, on the config and on the rest of the job;
- :mod:`.hooks`: the lifecycle hooks (the mixins) and the activation checkpointing of the repeated blocks;
- :mod:`.presets`: the two presets, as data.

DeepSpeed itself is optional: importing this package does not import it. The registry probes it (missing, broken,
known-bad torch pair) before Lightning's constructor would import it.
"""

from lightning_presets.strategies.deepspeed.presets import DEEPSPEED_ZERO2_OFFLOAD, DEEPSPEED_ZERO3_OFFLOAD_CKPT

__all__ = ["DEEPSPEED_ZERO2_OFFLOAD", "DEEPSPEED_ZERO3_OFFLOAD_CKPT"]
