"""The field corpus: misconfigurations users hit, taken from public issue threads, and configurations careful users
run. Every misconfiguration must be flagged (an error or a warning with the expected code); no valid configuration
may be refused (no error).

Each case is construction on simulated hardware (the examples engine's settings: GPUs, capability, stand-ins) or a
``lightning-presets check`` run; nothing trains. The source thread is the case's first field; the configuration is
the thread's, translated to the preset that stands for the thread's strategy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from lightning.pytorch.plugins import BitsandbytesPrecision, MixedPrecision

from lightning_presets.core.codes import Setting
from lightning_presets.tools.check import CheckRequest
from lightning_presets.tools.examples import run_example
from lightning_presets.tools.verdict import run_check

V100 = Setting(capability=(7, 0))
RTX8000 = Setting(capability=(7, 5))
RTX3090 = Setting(capability=(8, 6))
A100 = Setting(capability=(8, 0))
TWO_GPUS = Setting(gpus=2)
TE = Setting(capability=(8, 6), simulated=("transformer_engine",))
TPU = Setting(gpus=0, simulated=("torch_xla",))
MIXED = "from lightning.pytorch.plugins import MixedPrecision\n"
DEEPSPEED = 'lightning_presets.strategy("deepspeed_zero2_offload", config='
TARGET_FABRIC = ', target="fabric"'


@dataclass(frozen=True)
class Case:
    """A configuration from a thread: Python run by the examples engine, or a ``check`` request."""

    source: str
    code: str = ""
    setting: Setting = field(default_factory=Setting)
    request: CheckRequest | Callable[[], CheckRequest] | None = None
    """A ``check`` request, or a function making one (for Lightning plugin objects, built when the case runs)."""
    flags: tuple[str, ...] = ()
    """For a misconfiguration: the codes of which at least one must be reported."""

    def findings(self) -> tuple[set[str], set[str]]:
        """(every code reported, the error codes among them)."""
        if self.request is not None:
            report = run_check(self.request if isinstance(self.request, CheckRequest) else self.request())
            return set(report.codes), {f.code for f in report.findings if f.severity == "error"}
        outcome = run_example(self.code, self.setting)
        assert outcome.error is None, f"{self.source}: {outcome.error}"
        return set(outcome.codes), {code for code in outcome.codes if _is_error(code)}


def _is_error(code: str) -> bool:
    from errors_doc import _documented_codes, _rule_entries

    severities = {entry.code: entry.severity for entry in [*_documented_codes(), *_rule_entries()]}
    return severities.get(code) == "error"


def check(**values: Any) -> CheckRequest:
    arguments = {key: values.pop(key) for key in ("strategy", "accelerator", "devices", "num_nodes", "precision",
                                                   "accumulate_grad_batches") if key in values}  # fmt: skip
    return CheckRequest(arguments=arguments, **values)


def with_plugin(plugin: Callable[[], Any], **values: Any) -> Callable[[], CheckRequest]:
    """A check of a job that passes a Lightning precision plugin object (built when the case runs)."""

    def request() -> CheckRequest:
        made = check(**values)
        return CheckRequest(arguments={**made.arguments, "plugins": [plugin()]}, gpus=made.gpus)

    return request


MISCONFIGURATIONS = [
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/21778",
         'Trainer(strategy="fsdp_offload_ckpt", accelerator="cpu", devices=2)', flags=("LP101",)),
    Case("https://github.com/Lightning-AI/pytorch-lightning/pull/12699",
         'Trainer(strategy="deepspeed_zero2_offload", accelerator="cpu", devices=2)', flags=("LP403",)),
    Case("https://github.com/deepspeedai/DeepSpeed/issues/943",
         f'Fabric(strategy={DEEPSPEED}{{"train_batch_size": 8, "fp16": {{"enabled": True}}, "zero_optimization": '
         f'{{"stage": 2, "cpu_offload": True}}}}{TARGET_FABRIC}), accelerator="cpu", devices=1)', flags=("LP403",)),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/19891",
         f'Trainer(strategy={DEEPSPEED}{{"gradient_accumulation_steps": 4, "zero_optimization": {{"stage": 2}}}}), '
         'accelerator="cuda", devices=8)', flags=("LP409",)),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/12299",  # a DeepSpeed autotuning config
         f'Trainer(strategy={DEEPSPEED}{{"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 4, '
         '"zero_optimization": {"stage": 2}}), accelerator="cuda", devices=8, accumulate_grad_batches=4)',
         flags=("LP409",)),
    Case("https://github.com/huggingface/transformers/issues/16495",
         f'Trainer(strategy={DEEPSPEED}{{"zero_optimization": {{"stage": 2, "reduce_bucket_size": "auto"}}}}), '
         'accelerator="cuda", devices=8)', flags=("LP408", "LP414")),
    Case("https://github.com/stanford-crfm/mistral/pull/101",  # an HF config ("auto" batch size) taken to Lightning
         f'Trainer(strategy={DEEPSPEED}{{"train_batch_size": "auto", "zero_optimization": {{"stage": 2}}}}), '
         'accelerator="cuda", devices=8)', flags=("LP408",)),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/19535",  # Fabric DeepSpeed QLoRA
         f'Fabric(strategy={DEEPSPEED}{{"zero_optimization": {{"stage": 2}}, "bf16": {{"enabled": "auto"}}, '
         f'"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8}}'
         f'{TARGET_FABRIC}), accelerator="cuda", devices=2, '
         'plugins=[lightning_presets.precision("nf4-bnb", target="fabric")])', flags=("LP408", "LP607")),
    Case("https://github.com/deepspeedai/DeepSpeed/issues/6914",  # "8 != 2 * 1 * 1"
         f'Fabric(strategy={DEEPSPEED}{{"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2, '
         f'"gradient_accumulation_steps": 1, "zero_optimization": {{"stage": 2}}}}{TARGET_FABRIC}), '
         'accelerator="cuda", devices=1)', flags=("LP406",)),
    Case("https://github.com/huggingface/accelerate/issues/2712",  # a batch size written for one GPU, run on four
         f'Fabric(strategy={DEEPSPEED}{{"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4, '
         f'"zero_optimization": {{"stage": 2}}}}{TARGET_FABRIC}), accelerator="cuda", devices=4)', flags=("LP406",)),
    Case("https://github.com/deepspeedai/DeepSpeed/issues/3982",  # the Trainer form, caught by `check` before launch
         request=check(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=2, accumulate_grad_batches=3,
                       gpus=8, overrides={"config": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 1,
                                                     "zero_optimization": {"stage": 2}}}),
         flags=("LP407",)),
    Case("https://github.com/Snowflake-AI-Research/Arctic-Platform/pull/78",  # fp16 in the config, bf16 asked for
         f'Trainer(strategy={DEEPSPEED}{{"fp16": {{"enabled": True}}, "zero_optimization": {{"stage": 2}}}}), '
         'accelerator="cuda", devices=8, precision="bf16-mixed")', flags=("LP405",)),
    Case("https://github.com/instructlab/training/pull/10",  # offload_param with ZeRO stage 2
         f'Trainer(strategy={DEEPSPEED}{{"zero_optimization": {{"stage": 2, "offload_param": {{"device": "cpu"}}, '
         '"offload_optimizer": {"device": "cpu"}}}), accelerator="cuda", devices=8)', flags=("LP404",)),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/10686",  # a custom precision plugin with DeepSpeed
         MIXED + 'Trainer(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, '
         'plugins=[MixedPrecision("16-mixed", "cuda")])', flags=("LP412",)),
    Case("https://github.com/pytorch/pytorch/issues/154888",  # HSDP (2, 1) on one node of 2 GPUs
         'Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 1)), accelerator="cuda", '
         "devices=2)", TWO_GPUS, flags=("LP116",)),
    Case("https://github.com/RLinf/RLinf/issues/1502",  # hybrid sharding given a 1-D mesh
         'lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(4,))', flags=("LP111",)),
    Case("https://github.com/pytorch/torchtitan/issues/1184",  # dp 8 × 8 on 8 GPUs
         'Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=8, tensor_parallel_size=8), '
         'accelerator="cuda", devices=8)', flags=("LP201",)),
    Case("https://github.com/modelscope/ms-swift/issues/3739",  # tensor parallel 4 on 8 GPUs, nothing else
         'Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=1, tensor_parallel_size=4), '
         'accelerator="cuda", devices=8)', flags=("LP201",)),
    Case("https://github.com/pytorch/torchtitan/pull/27",  # "dp(1) * sp(2) * pp(3) != WORLD_SIZE8"
         'Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=3, tensor_parallel_size=2), '
         'accelerator="cuda", devices=8)', flags=("LP201",)),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/20391",  # --ntasks=1 --ntasks-per-node=2
         request=check(accelerator="cuda", devices=2, gpus=2, cluster="slurm",
                       env={"SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "2"}), flags=("LP707",)),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/10098",  # num_nodes=2, one node allocated
         request=check(strategy="ddp", accelerator="cuda", devices=4, num_nodes=2, gpus=4, cluster="slurm",
                       env={"SLURM_NNODES": "1", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "4"}),
         flags=("LP706", "LP707")),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/16730",  # srun --job-name=train --pty bash, 4 GPUs
         request=check(accelerator="cuda", devices=4, gpus=4, cluster="slurm",
                       env={"SLURM_JOB_NAME": "train", "SLURM_NTASKS": "1", "SLURM_NTASKS_PER_NODE": "1"}),
         flags=("LP705", "LP707")),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/2092",  # ddp in a notebook
         request=check(strategy="ddp", accelerator="cpu", devices=2, interactive=True), flags=("LP711",)),
    Case("https://github.com/karpathy/nanoGPT/pull/277",  # bf16 on V100s
         'Trainer(strategy="ddp_static_graph", accelerator="cuda", devices=8, precision="bf16-mixed")', V100,
         flags=("LP615",)),
    Case("https://github.com/openvla/openvla/issues/103",  # bf16 on a Quadro RTX 8000 (7.5)
         'Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, precision="bf16-true")', RTX8000,
         flags=("LP615",)),
    Case("https://github.com/NVIDIA/TransformerEngine/issues/1159",  # FP8 on an RTX 3090 (8.6)
         'lightning_presets.precision("fp8-te")', TE, flags=("LP604",)),
    Case("https://github.com/huggingface/huggingface-llama-recipes/issues/21",  # FP8 on A100s
         'lightning_presets.precision("fp8-torchao")', A100, flags=("LP604",)),
    # FSDP with a plugin that is not FSDPPrecision: Lightning's own setter refuses it while the Trainer is built.
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/20855",  # FSDP with the bitsandbytes plugin
         request=with_plugin(lambda: BitsandbytesPrecision("nf4"), strategy="fsdp_offload_ckpt",
                             accelerator="cuda", devices=8, gpus=8), flags=("LP700",)),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/16687",  # FSDP with the AMP plugin
         request=with_plugin(lambda: MixedPrecision("16-mixed", "cuda"), strategy="fsdp_grad_op",
                             accelerator="cuda", devices=2, gpus=2), flags=("LP700",)),
    Case("https://github.com/Lightning-AI/litgpt/issues/2115",  # bitsandbytes with TP + FSDP in the Trainer
         'Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, '
         'plugins=[lightning_presets.precision("nf4-bnb")])', flags=("LP607",)),
    Case("https://github.com/pytorch/torchtitan/issues/932",  # tensor parallel across 2 nodes of 8
         'Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=1, tensor_parallel_size=16), '
         'accelerator="cuda", devices=8, num_nodes=2)', flags=("LP204",)),
]  # fmt: skip

KNOWN_MISSES = [
    # devices=1 picks SingleDeviceStrategy, which has no cluster environment: Lightning's SLURM check
    # (validate_settings, run by the subprocess launcher only) never runs, and each of the 2 tasks trains its own
    # copy. LP705 reads the environment Lightning selects (none here), so nothing flags it; a warning rule for a
    # single-process job in a multi-task allocation is still to write.
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/19883",  # --ntasks-per-node=2, devices=1
         request=check(accelerator="cuda", devices=1, gpus=2, cluster="slurm",
                       env={"SLURM_NTASKS_PER_NODE": "2", "SLURM_NTASKS": "2"}), flags=("LP705",)),
]  # fmt: skip
"""Misconfigurations from threads that no rule flags yet, each with why; one that becomes flagged fails the test
below (move it to MISCONFIGURATIONS)."""

VALID = [
    Case("issue 7: HSDP with an explicit mesh on one 8-GPU node",
         'Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 4)), accelerator="cuda", '
         "devices=8)"),
    Case("issue 7; https://github.com/pytorch/pytorch/issues/117470: shard groups of two whole nodes",
         'Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", device_mesh=(2, 16)), accelerator="cuda", '
         "devices=8, num_nodes=4)"),
    Case("issue 7: tensor parallel 12 over 3 nodes of 8 (slow, not broken)",
         'Trainer(strategy=lightning_presets.strategy("tp2d_hybrid", data_parallel_size=2, tensor_parallel_size=12), '
         'accelerator="cuda", devices=8, num_nodes=3)'),
    Case("issue 7; https://github.com/Lightning-AI/pytorch-lightning/issues/17212: static graph + unused parameters",
         'Trainer(strategy=lightning_presets.strategy("ddp_static_graph", find_unused_parameters=True), '
         'accelerator="cuda", devices=8)'),
    Case("issue 7: bf16 compression with a device-to-backend map",
         'Trainer(strategy=lightning_presets.strategy("ddp_bf16_compress", '
         'process_group_backend="cpu:gloo,cuda:nccl"), accelerator="cuda", devices=8)'),
    Case("https://github.com/Lightning-AI/pytorch-lightning/issues/20957: an accelerator instance",
         "from lightning.pytorch.accelerators import CUDAAccelerator\n"
         'Trainer(strategy="fsdp_offload_ckpt", accelerator=CUDAAccelerator(), devices=8, precision="bf16-mixed")'),
    Case("issue 7, item 4: nf4-bnb on one A100, through `check`",
         request=check(accelerator="cuda", devices=1, gpus=1, gpu_capability=(8, 0), plugins=("nf4-bnb",))),
    Case("HSDP over 2 nodes of 8, the automatic mesh",
         'Trainer(strategy="fsdp_hybrid_shard", accelerator="cuda", devices=8, num_nodes=2, precision="bf16-mixed")'),
    Case("HSDP ZeRO-2 flavour over 2 nodes of 8",
         'Trainer(strategy=lightning_presets.strategy("fsdp_hybrid_shard", sharding_strategy="_HYBRID_SHARD_ZERO2"), '
         'accelerator="cuda", devices=8, num_nodes=2)'),
    Case("SHARD_GRAD_OP on one node",
         'Trainer(strategy="fsdp_grad_op", accelerator="cuda", devices=8, precision="bf16-mixed")'),
    Case("fp16 AMP with FSDP on V100s (the loss scaler makes 16-bit safe)",
         'Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, precision="16-mixed")', V100),
    Case("FSDP2 on CPU with gloo, for a laptop test",
         'Trainer(strategy="fsdp2", accelerator="cpu", devices=2)'),
    Case("FSDP2 with CPU offload on 8 GPUs",
         'Trainer(strategy="fsdp2_offload_ckpt", accelerator="cuda", devices=8, precision="bf16-mixed")'),
    Case("2D parallel: tensor parallel inside the node, FSDP2 across 2 nodes",
         'Trainer(strategy="tp2d_hybrid", accelerator="cuda", devices=8, num_nodes=2, precision="bf16-mixed")'),
    Case("2D parallel in Fabric with the user's parallelize function",
         "def parallelize(module, device_mesh):\n    return module\n"
         'Fabric(strategy=lightning_presets.strategy("tp2d_hybrid", target="fabric", parallelize_fn=parallelize), '
         'accelerator="cuda", devices=8)'),
    Case("DDP static graph on 2 CPU processes",
         'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=2)'),
    Case("bf16 gradient compression over 4 SLURM nodes, through `check`",
         request=check(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, num_nodes=4, gpus=8,
                       cluster="slurm", precision="bf16-mixed")),
    Case("ZeRO-3 with offload and checkpointing, fp16 AMP",
         'Trainer(strategy="deepspeed_zero3_offload_ckpt", accelerator="cuda", devices=8, precision="16-mixed")'),
    Case("DeepSpeed batch arithmetic that adds up with the Trainer's accumulation, through `check`",
         request=check(strategy="deepspeed_zero2_offload", accelerator="cuda", devices=8, accumulate_grad_batches=2,
                       gpus=8, overrides={"config": {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                                                     "zero_optimization": {"stage": 2}}})),
    Case("Fabric DeepSpeed batch arithmetic over 2 nodes of 8",
         f'Fabric(strategy={DEEPSPEED}{{"train_batch_size": 64, "train_micro_batch_size_per_gpu": 4, '
         f'"zero_optimization": {{"stage": 2}}}}{TARGET_FABRIC}), accelerator="cuda", devices=8, num_nodes=2)'),
    Case("fp32-reduced bf16 FSDP mixed precision on A100s",
         'Trainer(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, '
         'plugins=[lightning_presets.precision("bf16-fp32-reduce")])', A100),
    Case("FP8 with torchao on H100s, FSDP2 in Fabric",
         'Fabric(strategy="fsdp2", accelerator="cuda", devices=8, '
         'plugins=[lightning_presets.precision("fp8-torchao", target="fabric")])'),
    Case("FP8 with torchao on CPU, a smoke test (emulated)",
         'Trainer(accelerator="cpu", devices=1, plugins=[lightning_presets.precision("fp8-torchao")])'),
    Case("XLA FSDP on a TPU host, all its devices",
         'Fabric(strategy="xla_fsdp_ckpt", accelerator="tpu", devices="auto")', TPU),
]  # fmt: skip


@pytest.mark.parametrize("case", MISCONFIGURATIONS, ids=lambda case: case.source.split("github.com/")[-1])
def test_misconfiguration_is_flagged(case: Case) -> None:
    codes, _ = case.findings()
    assert set(case.flags) & codes, f"{case.source}: expected one of {case.flags}, got {sorted(codes)}"


@pytest.mark.parametrize("case", KNOWN_MISSES, ids=lambda case: case.source.split("github.com/")[-1])
def test_known_misses_are_still_missed(case: Case) -> None:
    codes, _ = case.findings()
    assert not set(case.flags) & codes, f"{case.source} is flagged now: move it to MISCONFIGURATIONS"


@pytest.mark.parametrize("case", VALID, ids=lambda case: case.source[:60])
def test_valid_configuration_is_not_refused(case: Case) -> None:
    _, errors = case.findings()
    assert not errors, f"{case.source}: refused with {sorted(errors)}"


def test_the_corpus_is_large_enough_and_sourced() -> None:
    assert len(MISCONFIGURATIONS) >= 30
    assert len(VALID) >= 20
    assert all(case.source.startswith("https://github.com/") for case in MISCONFIGURATIONS)
    assert len({case.source for case in MISCONFIGURATIONS}) == len(MISCONFIGURATIONS)
