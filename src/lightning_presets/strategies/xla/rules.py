"""The XLA FSDP preset's rules (LP503 to LP509) and the tuple it runs (:data:`RULES`)."""

from __future__ import annotations

from lightning_presets.core.codes import Setting
from lightning_presets.core.context import Options
from lightning_presets.core.rules import Problem, Rule, rule
from lightning_presets.guards.builders import needs_accelerator, one_device, one_of, repeated_block
from lightning_presets.guards.precision_rules import PRECISION_CROSS_RULES, STRATEGY_HARDWARE_RULES
from lightning_presets.strategies.xla.options import XLAFSDPOptions

XLA = Setting(gpus=0, simulated=("torch_xla",))
"""Where the examples run: a TPU host of 8 devices, simulated with a torch_xla stand-in."""


xla_needs_tpu = needs_accelerator(
    "LP503", "XLA FSDP on an accelerator other than XLA (TPU)",
    accelerators=("xla",),
    why="XLA FSDP shards over XLA devices (TPUs), got accelerator={accelerator!r}; Lightning would accept this and "
    "fail when the processes are launched",
    hint="run it with accelerator='tpu' on a TPU host; on CUDA GPUs use strategy='fsdp_offload_ckpt' or "
    "strategy='tp2d_hybrid'",
    show=("accelerator", "devices"),
    fails='Fabric(strategy="xla_fsdp_ckpt", accelerator="cuda", devices=8)',
    fixed='Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=8)',
    evidence="source: lightning/fabric/strategies/xla_fsdp.py, XLAFSDPStrategy.root_device is torch_xla's "
    "xla_device() and its launcher is XLA's, so CUDA devices are never used and the processes fail when launched "
    "(lightning 2.6.6)",
    setting=Setting(simulated=("torch_xla",)),  # a host with GPUs as well as the TPU stand-in
)  # fmt: skip

xla_fsdp_has_peers = one_device(
    "LP504", "XLA FSDP on a single device per host",
    severity="error",
    per_node=True,
    why="XLA FSDP with the PjRT runtime cannot run one device per host ({devices} device(s) × {nodes} node(s)); "
    "Lightning would fail only after launching, on every host",
    hint="use all devices of each TPU host (devices='auto'), or strategy='single_xla' for one device",
    fails='Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices=1, num_nodes=4)',
    fixed='Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices="auto", num_nodes=4)',
    evidence="runtime: XLAFSDPStrategy.setup_environment raises NotImplementedError",
    setting=XLA,
)  # fmt: skip


@rule(
    "LP505", "error", "options", "an activation_checkpointing_policy that is not a set of layer classes",
    fails='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", '
    "activation_checkpointing_policy=[nn.TransformerEncoderLayer])",
    fixed='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", '
    "activation_checkpointing_policy={nn.TransformerEncoderLayer})",
    evidence="runtime: Lightning raises TypeError for a list",
    setting=XLA,
)  # fmt: skip
def checkpointing_policy_is_set(options: Options) -> Problem | None:
    policy = XLAFSDPOptions.of(options).activation_checkpointing_policy
    if not policy or (isinstance(policy, set) and all(isinstance(cls, type) for cls in policy)):
        return None  # None or empty: Lightning checkpoints nothing (and the preset leaves an empty policy alone)
    return Problem(
        f"{options.call('activation_checkpointing_policy')}: the policy must be a set of nn.Module classes, got "
        f"{type(policy).__name__}; Lightning would only fail when the module is set up",
        "pass a set, e.g. activation_checkpointing_policy={MyBlock}, or leave it None to checkpoint the "
        "repeated blocks found in the model",
    )


@rule(
    "LP506", "error", "options", "auto_wrapper_callable together with activation checkpointing",
    fails="def my_wrapper(module, *args, **kwargs):\n    return module\n"
    'lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", auto_wrapper_callable=my_wrapper)',
    fixed='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", '
    "activation_checkpointing_policy={nn.TransformerEncoderLayer})",
    evidence="runtime: Lightning raises ValueError for both",
    setting=XLA,
)  # fmt: skip
def one_auto_wrapper(options: Options) -> Problem | None:
    if XLAFSDPOptions.of(options).auto_wrapper_callable is None:
        return None
    return Problem(
        f"{options.call()}: auto_wrapper_callable= replaces the wrapper this preset uses to checkpoint "
        "activations; Lightning refuses both together when the module is set up",
        "drop auto_wrapper_callable and name the blocks with activation_checkpointing_policy={MyBlock}, or use "
        "Lightning's own strategy='xla_fsdp' for a custom wrapper",
    )


XLA_STATE_DICT_TYPES = ("sharded", "full")


xla_state_dict_type_known = one_of(
    "LP509", "an unknown state_dict_type for XLA FSDP", key="state_dict_type", default="sharded",
    choices=XLA_STATE_DICT_TYPES, what="a checkpoint format of XLA FSDP",
    consequence="; Lightning would only fail when the first checkpoint is saved or loaded",
    fails='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", state_dict_type="consolidated")',
    fixed='lightning_presets.strategy("xla_fsdp_ckpt", target="fabric", state_dict_type="full")',
    evidence="runtime: XLAFSDPStrategy.save_checkpoint/load_checkpoint raise ValueError 'Unknown state_dict_type'",
    setting=XLA,
)  # fmt: skip


xla_block_found = repeated_block(
    "LP508", "no repeated block found to wrap and checkpoint",
    consequence="the whole model becomes one XLA FSDP unit{checkpointing}",
    hint="pass the block class: auto_wrap_policy={{MyBlock}}, activation_checkpointing_policy={{MyBlock}}, or hold "
    "the blocks in an nn.ModuleList",
    unless_given=("activation_checkpointing_policy",),
    setup='Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu").setup_module(model)',
    setting=XLA,
)  # fmt: skip


RULES: tuple[Rule, ...] = (
    xla_needs_tpu,
    xla_fsdp_has_peers,
    checkpointing_policy_is_set,
    one_auto_wrapper,
    xla_state_dict_type_known,
    xla_block_found,
    *PRECISION_CROSS_RULES,
    *STRATEGY_HARDWARE_RULES,
)
