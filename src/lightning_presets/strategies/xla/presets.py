"""The XLA FSDP preset, as data: ``xla_fsdp_ckpt`` (Fabric only)."""

from __future__ import annotations

from lightning_presets.core.preset import Preset, Requirement
from lightning_presets.core.versions import tested
from lightning_presets.strategies.xla.family import XLA_FAMILY
from lightning_presets.strategies.xla.hooks import XLAFSDPFabricHooks
from lightning_presets.strategies.xla.rules import RULES

TORCH_XLA = Requirement(module="torch_xla", extra="xla")


XLA_FSDP_CKPT = Preset(
    name="xla_fsdp_ckpt",
    description="XLA FSDP on TPUs with auto-wrap and activation checkpointing on the model's repeated blocks. "
    "Fabric only: Lightning's Trainer has no XLA FSDP strategy.",
    family=XLA_FAMILY,
    strategy={"fabric": "XLAFSDPStrategy"},
    init_params={"auto_wrap_policy": None, "activation_checkpointing_policy": None, "state_dict_type": "sharded"},
    rules=RULES,
    requires=(TORCH_XLA,),
    mixins={"fabric": XLAFSDPFabricHooks},
    extra_keys=frozenset({"auto_wrapper_callable", "compute_dtype", "flatten_parameters", "reshard_after_forward"}),
    activation_checkpointing=True,
    tested_with=tested(
        "construction and setup on a real torch_xla 2.9.0 beside torch 2.9.0, PJRT on CPU (Lightning's TPU-only "
        "availability check patched): guards, XLAPrecision, XLAEnvironment, XLA FSDP units for the root and each "
        "repeated block with checkpointing, one forward and backward on an XLA CPU device outside Lightning's "
        "launcher; no multi-device run (on CPU torch_xla runs one process for every device, Lightning one device "
        "per process); the missing, broken and version-mismatch torch_xla paths for real",
        construction="Fabric on a real torch_xla 2.9.0 (PJRT on CPU devices): guards, XLA FSDP units with "
        "checkpointing, one forward and backward on one XLA CPU device outside Lightning's launcher; on torch 2.13 "
        "against a stand-in torch_xla module",
        torch="2.9.0, 2.13.0",
        torch_xla="2.9.0",
    ),
)
