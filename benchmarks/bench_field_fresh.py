"""Fresh field cases (issue 23, "Done when"): misconfigurations from public threads that are in neither
``tests/field/test_field_corpus.py`` nor ``tests/field/test_reproductions.py``, and legal configurations careful users
run, each translated into this package's terms and validated through ``run_check`` on simulated hardware.

The expected outcome of every case (``flag`` or ``accept``) and, for a misconfiguration, the words a finding must
contain to be about the thread's problem (``topic``) were written before the first run; they are not tuned to the
results. Nothing trains: each case is one ``check`` (construction with simulated GPUs and launcher variables, the
model-stage rules when the case names a model, the resume rules when it names a checkpoint).

    python benchmarks/bench_field_fresh.py            # writes benchmarks/results/field_fresh.{json,txt}

Counting:
- a misconfiguration is *flagged* when a finding that is not conditional (error or warning) is reported, and
  *flagged on topic* when such a finding's message or hint matches the case's topic (a finding about something else
  than the thread's failure does not count there). For a model-dependent case the job is checked with its model
  (``--model``, as the thread's user has it) and, separately, without: there a finding must *name the risk* (match the
  case's risk words), conditional or not.
- a legal configuration is *refused* when any finding is an error (with and without its model, where it has one).
- a case whose check raises anything but a usage error is a *crash* (a bug of the package, reported with its
  traceback's last lines).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"

MODELS = '''
import torch
from torch import nn
from lightning.pytorch import LightningModule


class Plain(LightningModule):
    """Automatic optimization, one optimizer, no hook overridden."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))
        self.example_input_array = torch.zeros(4, 32)

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, index):
        return self(batch).sum()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())


class Manual(Plain):
    """Manual optimization (stable-pretraining #246): clipping is the user's job in training_step."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False

    def training_step(self, batch, index):
        optimizer = self.optimizers()
        loss = self(batch).sum()
        optimizer.zero_grad()
        self.manual_backward(loss)
        self.clip_gradients(optimizer, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
        optimizer.step()
        return loss


class Unused(Plain):
    """A head that never takes part in the loss (pytorch #57473): DDP without unused-parameter detection fails."""

    def __init__(self):
        super().__init__()
        self.aux_head = nn.Linear(32, 5)


class Heads12(LightningModule):
    """Twelve attention heads (FSDrive #21); tensor parallelism is applied in configure_model."""

    def __init__(self):
        super().__init__()
        self.attention = nn.MultiheadAttention(96, 12, batch_first=True)
        self.head = nn.Linear(96, 2)
        self.example_input_array = torch.zeros(2, 8, 96)

    def forward(self, x):
        out, _ = self.attention(x, x, x)
        return self.head(out)

    def configure_model(self):
        pass

    def training_step(self, batch, index):
        return self(batch).sum()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())


class Gan(LightningModule):
    """A GAN with two optimizers (DeepSpeed #1229), manual optimization as Lightning 2 requires."""

    def __init__(self):
        super().__init__()
        self.automatic_optimization = False
        self.generator = nn.Linear(16, 32)
        self.discriminator = nn.Linear(32, 1)
        self.example_input_array = torch.zeros(4, 16)

    def forward(self, z):
        return self.discriminator(self.generator(z))

    def training_step(self, batch, index):
        g, d = self.optimizers()
        loss = self(batch).mean()
        g.zero_grad()
        self.manual_backward(loss)
        g.step()
        return loss

    def configure_optimizers(self):
        return [torch.optim.Adam(self.generator.parameters()), torch.optim.Adam(self.discriminator.parameters())]
'''
MODULE = "fresh_field_models"


@dataclass(frozen=True)
class Case:
    """One thread: its source, what went wrong there, and the job in this package's terms."""

    id: str
    source: str
    wrong: str
    """One line: what went wrong in the thread (for a legal case: where the configuration comes from)."""
    expected: str
    """``flag`` (a misconfiguration) or ``accept`` (a legal configuration)."""
    request: Callable[[Path], Any] | None
    """Builds the ``CheckRequest`` (given a scratch folder for checkpoints); ``None``: not expressible."""
    translation: str
    topic: str = ""
    """Regular expression a finding's message or hint must match to be about the thread's failure."""
    model: str | None = None
    """``fresh_field_models:Class``: the case depends on the model; checked with it and without it."""
    risk: str = ""
    """For a model-dependent misconfiguration: what a finding without the model must name (regular expression)."""
    stale: str = ""
    """Why the thread's failure no longer happens with the installed Lightning (found after the first run): the case
    is reported, and counted apart from the misconfigurations that still fail."""
    correction: str = ""
    """A change to ``topic`` made after the first run, and why (each one only narrowed what counts)."""


def _check(**values: Any) -> Any:
    from lightning_presets.tools.check import CheckRequest

    keys = ("strategy", "accelerator", "devices", "num_nodes", "precision", "accumulate_grad_batches",
            "gradient_clip_val", "gradient_clip_algorithm", "plugins")  # fmt: skip
    arguments = {key: values.pop(key) for key in keys if key in values}
    return CheckRequest(arguments=arguments, **values)


def check(**values: Any) -> Callable[[Path], Any]:
    return lambda scratch: _check(**values)


def _slurm(nodes: int, tasks: int, per_node: int, **extra: str) -> dict[str, str]:
    return {"SLURM_NNODES": str(nodes), "SLURM_NTASKS": str(tasks), "SLURM_NTASKS_PER_NODE": str(per_node), **extra}


def _resumed(folder: Callable[[Path], Path], **values: Any) -> Callable[[Path], Any]:
    def build(scratch: Path) -> Any:
        return _check(resume_from=str(folder(scratch)), **values)

    return build


def _deepspeed_checkpoint(name: str, stage: int, data_parallel: int, inner: str = "") -> Callable[[Path], Path]:
    def make(scratch: Path) -> Path:
        sys.path.insert(0, str(ROOT / "tests" / "scripts"))
        try:
            from checkpoint_layouts import deepspeed_folder  # type: ignore[import-not-found]  # the tests' writer
        finally:
            sys.path.remove(str(ROOT / "tests" / "scripts"))
        root = scratch / name
        if not root.exists():
            deepspeed_folder(root, stage=stage, data_parallel=data_parallel)
        return root / inner if inner else root

    return make


DS2 = "deepspeed_zero2_offload"
DS3 = "deepspeed_zero3_offload_ckpt"
GH = "https://github.com/"

MISCONFIGURATIONS = [
    Case("M01", GH + "axolotl-ai-cloud/axolotl/pull/1382",
         "the framework's max_grad_norm and the DeepSpeed JSON's gradient_clipping disagree; one is silently used",
         "flag",
         check(strategy=DS2, accelerator="cuda", devices=8, gpus=8, gradient_clip_val=0.3,
               overrides={"config": {"zero_optimization": {"stage": 2}, "gradient_clipping": 1.0}}),
         "Trainer(strategy=deepspeed_zero2_offload(config={gradient_clipping: 1.0, ZeRO-2}), gradient_clip_val=0.3), "
         "8 H100", topic=r"clip"),
    Case("M02", GH + "Lightning-AI/litgpt/issues/116",
         "Fabric with DeepSpeed and precision='bf16-true' raises ValueError (not supported in DeepSpeed)",
         "flag",
         check(mode="fabric", strategy=DS2, accelerator="cuda", devices=2, gpus=2, precision="bf16-true"),
         "Fabric(strategy=deepspeed_zero2_offload, precision='bf16-true', devices=2)", topic=r"bf16-true|precision",
         stale="Lightning 2.6.6 accepts it: lightning/fabric/plugins/precision/deepspeed.py lists bf16-true among "
         "DeepSpeedPrecision's precisions (the thread ran Lightning 2.0)"),
    Case("M03", GH + "Lightning-AI/pytorch-lightning/issues/13374",
         "a Kubeflow PyTorchJob with several GPUs per pod fails silently (one process per pod, world size wrong)",
         "flag",
         check(accelerator="cuda", devices=4, num_nodes=2, gpus=4, cluster="kubeflow", strategy="ddp_static_graph"),
         "Trainer(strategy=ddp_static_graph, devices=4, num_nodes=2) in a PyTorchJob of 2 pods with 4 GPUs each",
         topic=r"[Kk]ubeflow|PyTorchJob|pod"),
    Case("M04", GH + "Lightning-AI/pytorch-lightning/issues/19585",
         "resuming a DeepSpeed ZeRO checkpoint of DP world size 32 on 128 GPUs raises ZeRORuntimeException",
         "flag",
         _resumed(_deepspeed_checkpoint("ds2_dp32", stage=2, data_parallel=32), strategy=DS2, accelerator="cuda",
                  devices=8, num_nodes=16, gpus=8, cluster="slurm"),
         "Trainer(strategy=deepspeed_zero2_offload, devices=8, num_nodes=16) under SLURM, "
         "fit(ckpt_path=<ZeRO-2 folder saved by 32 ranks>)", topic=r"world size|data[- ]parallel|shard|rank"),
    Case("M05", GH + "lm-sys/FastChat/issues/399",
         "FSDP fine-tuning with bf16 on 8 V100s: 'Your setup doesn't support bf16/gpu'",
         "flag",
         check(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gpus=8, gpu_capability=(7, 0),
               precision="bf16-mixed"),
         "Trainer(strategy=fsdp_offload_ckpt, precision='bf16-mixed', devices=8) on V100 (7.0)",
         topic=r"bf16|bfloat16|capability"),
    Case("M06", GH + "OptimalScale/LMFlow/issues/88",
         "DeepSpeed ZeRO-3 with bf16 on RTX 2080 Ti: bf16 not supported",
         "flag",
         check(strategy=DS3, accelerator="cuda", devices=2, gpus=2, gpu_capability=(7, 5), precision="bf16-mixed"),
         "Trainer(strategy=deepspeed_zero3_offload_ckpt, precision='bf16-mixed', devices=2) on 2080 Ti (7.5)",
         topic=r"bf16|bfloat16|capability"),
    Case("M07", GH + "Lightning-AI/pytorch-lightning/issues/16828",
         "srun --gpus-per-task=1 --ntasks=8: each task sees one GPU, Trainer(devices=8) raises 'machine only has [0]'",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=8, gpus=8, cluster="slurm",
               env={**_slurm(1, 8, 8, SLURM_PROCID="3", SLURM_LOCALID="3"), "CUDA_VISIBLE_DEVICES": "3"}),
         "Trainer(strategy=ddp_static_graph, devices=8) in one of 8 SLURM tasks whose CUDA_VISIBLE_DEVICES=3",
         topic=r"visible|CUDA_VISIBLE_DEVICES|only has|GPU"),
    Case("M08", GH + "Lightning-AI/pytorch-lightning/issues/4389",
         "srun with 2 nodes but no --ntasks-per-node: one task per node, Trainer(num_nodes=2, 4 GPUs) hangs with "
         "duplicated global ranks",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=4, num_nodes=2, gpus=4, cluster="slurm",
               env=_slurm(2, 2, 1)),
         "Trainer(strategy=ddp_static_graph, devices=4, num_nodes=2) under srun with SLURM_NTASKS=2 "
         "(SLURM_NTASKS_PER_NODE=1: one task per node; the check cannot unset the variable)",
         topic=r"task|SLURM_NTASKS"),
    Case("M09", GH + "Lightning-AI/pytorch-lightning/issues/13605",
         "srun --ntasks-per-node=4 --gpu-bind=closest: each task sees one GPU, devices=-1 makes separate worlds",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=-1, gpus=4, cluster="slurm",
               env={**_slurm(1, 4, 4, SLURM_PROCID="1", SLURM_LOCALID="1"), "CUDA_VISIBLE_DEVICES": "1"}),
         "Trainer(strategy=ddp_static_graph, devices=-1) in one of 4 SLURM tasks bound to one GPU each",
         topic=r"task|SLURM_NTASKS|visible|CUDA_VISIBLE_DEVICES"),
    Case("M10", GH + "Lightning-AI/pytorch-lightning/issues/17252",
         "sbatch --ntasks=1 --gres=gpu:3 with Trainer(devices=3): world size 1, the other GPUs never join",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=3, gpus=3, cluster="slurm",
               env=_slurm(1, 1, 1, SLURM_JOB_NAME="debug")),
         "Trainer(strategy=ddp_static_graph, devices=3) in a 1-task SLURM job with 3 GPUs "
         "(SLURM_NTASKS_PER_NODE=1 stands for the unset variable)", topic=r"task|SLURM_NTASKS"),
    Case("M11", GH + "Lightning-AI/pytorch-lightning/pull/19902",
         "ModelParallelStrategy (FSDP2) with precision='16-mixed' is refused (needs a sharded grad scaler)",
         "flag",
         check(strategy="fsdp2", accelerator="cuda", devices=8, gpus=8, precision="16-mixed"),
         "Trainer(strategy=fsdp2, precision='16-mixed', devices=8)", topic=r"16-mixed|precision|scaler"),
    Case("M12", GH + "galilai-group/stable-pretraining/issues/246",
         "Trainer(gradient_clip_val=1.0) with manual optimization raises MisconfigurationException at fit",
         "flag",
         check(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, gpus=8, gradient_clip_val=1.0),
         "Trainer(strategy=ddp_bf16_compress, gradient_clip_val=1.0, devices=8), a module with "
         "automatic_optimization=False", topic=r"manual|automatic_optimization",
         model=f"{MODULE}:Manual", risk=r"manual|automatic_optimization"),
    Case("M13", GH + "Lightning-AI/pytorch-lightning/issues/19235",
         "FSDP (FSDP1) with gradient clipping by norm is not supported by Lightning's FSDP precision plugin",
         "flag",
         check(strategy="fsdp_hybrid_shard", accelerator="cuda", devices=8, num_nodes=2, gpus=8, cluster="slurm",
               gradient_clip_val=1.0),
         "Trainer(strategy=fsdp_hybrid_shard, gradient_clip_val=1.0, devices=8, num_nodes=2) under SLURM, a module "
         "that does not override configure_gradient_clipping", topic=r"clip",
         model=f"{MODULE}:Plain", risk=r"configure_gradient_clipping|clip"),
    Case("M14", GH + "pytorch/pytorch/issues/57473",
         "Lightning DDP with parameters unused in the loss: 'Expected to have finished reduction in the prior "
         "iteration'; fixed with find_unused_parameters=True",
         "flag",
         check(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, gpus=8),
         "Trainer(strategy=ddp_bf16_compress, devices=8), a module with a head outside the loss",
         topic=r"unused|find_unused", model=f"{MODULE}:Unused", risk=r"unused|find_unused"),
    Case("M15", GH + "MIV-XJTU/FSDrive/issues/21",
         "tensor parallel size 8 for a model of 12 attention heads: 'must be divisible by tensor parallel size'",
         "flag",
         check(strategy="tp2d_hybrid", accelerator="cuda", devices=8, gpus=8,
               overrides={"data_parallel_size": 1, "tensor_parallel_size": 8}),
         "Trainer(strategy=tp2d_hybrid(data_parallel_size=1, tensor_parallel_size=8), devices=8), 12 heads",
         topic=r"head", model=f"{MODULE}:Heads12", risk=r"head"),
    Case("M16", GH + "chemprop/chemprop/issues/1261",
         "on Apple silicon accelerator='auto' picks MPS and strategy='ddp' raises: DDP family not supported on MPS",
         "flag",
         check(strategy="ddp_static_graph", accelerator="mps", devices=1),
         "Trainer(strategy=ddp_static_graph, accelerator='mps', devices=1)",
         topic=r"(?i)(ddp|distributed)[^.\n]*mps|mps[^.\n]*(ddp|distributed)",
         correction="first topic (?is)mps.*(ddp|distributed|strateg|support) also matched LP700 'MPSAccelerator can "
         "not run on your system' (the check's host has no MPS device), which is not the thread's DDP-on-MPS failure; "
         "narrowed to one sentence naming both"),
    Case("M17", GH + "Lightning-AI/pytorch-lightning/issues/8634",
         "devices '0,0' (two replicas on one GPU) spawns 2 DDP processes on GPU 0 and crashes in NCCL",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=[0, 0], gpus=1),
         "Trainer(strategy=ddp_static_graph, devices=[0, 0]) on a node with one GPU",
         topic=r"duplicate|\[0, 0\]|twice|same (GPU|device)|more than once|unique",
         correction="'unique' added after the first run: Lightning's own LP700 says 'Device ID's (GPU) must be "
         "unique', which is the thread's failure; the first topic matched it only through the quoted call"),
    Case("M18", GH + "deepspeedai/DeepSpeed/issues/461",
         "mpirun -np 16 -N 8 over 2 nodes while the job's torch world size is 8: 'MPI world size 16 does not "
         "match torch world size 8'",
         "flag",
         check(strategy=DS2, accelerator="cuda", devices=8, num_nodes=1, gpus=8, cluster="mpi",
               env={"OMPI_COMM_WORLD_SIZE": "16", "PMI_SIZE": "16", "OMPI_COMM_WORLD_LOCAL_SIZE": "8"}),
         "Trainer(strategy=deepspeed_zero2_offload, devices=8, num_nodes=1) in rank 0 of mpiexec -n 16 --npernode 8",
         topic=r"MPI|OMPI|mpiexec|world size|16"),
    Case("M19", GH + "Lightning-AI/pytorch-lightning/issues/3029",
         "torchelastic multi-node training fails: 'I forgot to specify num_nodes for the trainer'",
         "flag",
         check(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, gpus=8, cluster="torchelastic",
               env={"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "1", "RANK": "8",
                    "MASTER_ADDR": "10.0.0.1"}),
         "Trainer(strategy=ddp_bf16_compress, devices=8) (num_nodes left at 1) on node 1 of torchrun --nnodes=2 "
         "--nproc-per-node=8", topic=r"num_nodes|WORLD_SIZE|world size|node"),
    Case("M20", GH + "deepspeedai/DeepSpeed/issues/1229",
         "a GAN's two optimizers with DeepSpeed: Lightning's DeepSpeed supports a single optimizer only",
         "flag",
         check(strategy=DS2, accelerator="cuda", devices=8, gpus=8),
         "Trainer(strategy=deepspeed_zero2_offload, devices=8), configure_optimizers returns two optimizers",
         topic=r"\b(one|single|several|multiple|two|more than one) optimizers?\b", model=f"{MODULE}:Gan",
         correction="first topic 'optimizer' matched LP416 (Adam stepped on the CPU under offload), which is not the "
         "two-optimizer failure; narrowed to a count of optimizers (the risk words, whose bare alternative "
         "'optimizers' also matched 'configure_optimizers', narrowed alike)",
         risk=r"\b(one|single|several|multiple|two|more than one) optimizers?\b"),
    Case("M21", GH + "Lightning-AI/pytorch-lightning/issues/15834",
         "resuming DeepSpeed stage 2 from a file inside the checkpoint folder (mp_rank_00_model_states.pt) fails",
         "flag",
         _resumed(_deepspeed_checkpoint("ds2_dp8", stage=2, data_parallel=8,
                                        inner="checkpoint/mp_rank_00_model_states.pt"),
                  strategy=DS2, accelerator="cuda", devices=8, gpus=8),
         "Trainer(strategy=deepspeed_zero2_offload, devices=8), fit(ckpt_path=<folder>/checkpoint/"
         "mp_rank_00_model_states.pt)", topic=r"folder|directory|mp_rank|inside|file"),
    Case("M22", GH + "deepspeedai/Megatron-DeepSpeed/issues/439",
         "ZeRO-3 checkpoint of DP world size 8 loaded at world size 16: ZeRORuntimeException",
         "flag",
         _resumed(_deepspeed_checkpoint("ds3_dp8", stage=3, data_parallel=8), strategy=DS3, accelerator="cuda",
                  devices=8, num_nodes=2, gpus=8, cluster="slurm"),
         "Trainer(strategy=deepspeed_zero3_offload_ckpt, devices=8, num_nodes=2) under SLURM, "
         "fit(ckpt_path=<ZeRO-3 folder saved by 8 ranks>)", topic=r"world size|data[- ]parallel|shard|rank"),
    Case("M23", GH + "modelscope/ms-swift/issues/890",
         "DeepSpeed ZeRO-2 fine-tuning on 4 V100s with the bf16 default: bf16 only on Ampere, ValueError",
         "flag",
         check(strategy=DS2, accelerator="cuda", devices=4, gpus=4, gpu_capability=(7, 0), precision="bf16-mixed"),
         "Trainer(strategy=deepspeed_zero2_offload, precision='bf16-mixed', devices=4) on V100 (7.0)",
         topic=r"bf16|bfloat16|capability"),
]  # fmt: skip


def _kubeflow_plugin() -> Any:
    from lightning.pytorch.plugins.environments import KubeflowEnvironment

    return [KubeflowEnvironment()]


def _kubeflow_legal(scratch: Path) -> Any:
    """A PyTorchJob worker pod (RANK=2 of 4), one GPU, the job passing KubeflowEnvironment as Lightning's docs say."""
    return _check(strategy="ddp_static_graph", accelerator="cuda", devices=1, num_nodes=4, gpus=1,
                  cluster="kubeflow", plugins=_kubeflow_plugin(),
                  env={"WORLD_SIZE": "4", "RANK": "2", "MASTER_ADDR": "pytorchjob-master-0"})  # fmt: skip


LEGAL = [
    Case("L01", GH + "axolotl-ai-cloud/axolotl/pull/1382",
         "the fix: clipping set once, in the DeepSpeed config, the Trainer's clipping left unset",
         "accept",
         check(strategy=DS2, accelerator="cuda", devices=8, gpus=8,
               overrides={"config": {"zero_optimization": {"stage": 2}, "gradient_clipping": 1.0}}),
         "Trainer(strategy=deepspeed_zero2_offload(config={gradient_clipping: 1.0, ZeRO-2}), devices=8)"),
    Case("L02", GH + "Lightning-AI/litgpt/issues/116",
         "the fix: Fabric DeepSpeed with bf16-mixed on H100s",
         "accept",
         check(mode="fabric", strategy=DS2, accelerator="cuda", devices=2, gpus=2, precision="bf16-mixed"),
         "Fabric(strategy=deepspeed_zero2_offload, precision='bf16-mixed', devices=2)"),
    Case("L03", GH + "Lightning-AI/pytorch-lightning/pull/19902",
         "precisions ModelParallelStrategy keeps: bf16-true",
         "accept",
         check(strategy="fsdp2", accelerator="cuda", devices=8, gpus=8, precision="bf16-true"),
         "Trainer(strategy=fsdp2, precision='bf16-true', devices=8)"),
    Case("L04", "https://lightning.ai/docs/fabric/stable/guide/multi_node/slurm.html",
         "Lightning's SLURM guide: --nodes=4 --ntasks-per-node=8, devices=8, num_nodes=4 (rank 17 shown)",
         "accept",
         check(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, num_nodes=4, gpus=8, cluster="slurm",
               precision="bf16-mixed",
               env=_slurm(4, 32, 8, SLURM_NODEID="2", SLURM_PROCID="17", SLURM_LOCALID="1")),
         "Trainer(strategy=fsdp_offload_ckpt, devices=8, num_nodes=4, bf16-mixed) in task 17 of sbatch "
         "--nodes=4 --ntasks-per-node=8"),
    Case("L05", "https://pytorch.org/docs/stable/elastic/run.html",
         "torchrun's documented multi-node launch: --nnodes=2 --nproc-per-node=8, Trainer num_nodes=2",
         "accept",
         check(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, num_nodes=2, gpus=8,
               cluster="torchelastic",
               env={"GROUP_RANK": "1", "RANK": "9", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1"}),
         "Trainer(strategy=ddp_bf16_compress, devices=8, num_nodes=2) in local rank 1 of node 1 under torchrun"),
    Case("L06", GH + "tatsu-lab/stanford_alpaca/issues/133",
         "the fix on V100s: fp16 instead of bf16 (here with DeepSpeed ZeRO-2)",
         "accept",
         check(strategy=DS2, accelerator="cuda", devices=8, gpus=8, gpu_capability=(7, 0), precision="16-mixed"),
         "Trainer(strategy=deepspeed_zero2_offload, precision='16-mixed', devices=8) on V100 (7.0)"),
    Case("L07", GH + "Lightning-AI/pytorch-lightning/issues/13374",
         "what PyTorchJob assumes: one process (one GPU) per pod, the job passing KubeflowEnvironment",
         "accept", _kubeflow_legal,
         "Trainer(strategy=ddp_static_graph, devices=1, num_nodes=4, plugins=[KubeflowEnvironment()]) in pod "
         "RANK=2 of a 4-pod PyTorchJob"),
    Case("L08", GH + "Lightning-AI/pytorch-lightning/pull/19236",
         "clipping by value with FSDP is supported (local gradients)",
         "accept",
         check(strategy="fsdp_offload_ckpt", accelerator="cuda", devices=8, gpus=8, gradient_clip_val=0.5,
               gradient_clip_algorithm="value"),
         "Trainer(strategy=fsdp_offload_ckpt, gradient_clip_val=0.5, gradient_clip_algorithm='value'), plain module",
         model=f"{MODULE}:Plain"),
    Case("L09", GH + "Lightning-AI/pytorch-lightning/pull/16023",
         "manual optimization clipping through self.clip_gradients in training_step, no Trainer clipping",
         "accept",
         check(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, gpus=8),
         "Trainer(strategy=ddp_bf16_compress, devices=8), manual optimization that clips itself",
         model=f"{MODULE}:Manual"),
    Case("L10", GH + "Lightning-AI/pytorch-lightning/pull/16611",
         "unused parameters with unused-parameter detection switched on, as Lightning's error advises",
         "accept",
         check(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, gpus=8,
               overrides={"find_unused_parameters": True}),
         "Trainer(strategy=ddp_bf16_compress(find_unused_parameters=True), devices=8), module with an unused head",
         model=f"{MODULE}:Unused"),
    Case("L11", GH + "deepspeedai/DeepSpeed/issues/3810",
         "resuming a ZeRO checkpoint on the same topology it was saved with (the supported path)",
         "accept",
         _resumed(_deepspeed_checkpoint("ds2_dp16", stage=2, data_parallel=16), strategy=DS2, accelerator="cuda",
                  devices=8, num_nodes=2, gpus=8, cluster="slurm"),
         "Trainer(strategy=deepspeed_zero2_offload, devices=8, num_nodes=2) under SLURM, "
         "fit(ckpt_path=<ZeRO-2 folder saved by 16 ranks>)"),
    Case("L12", GH + "MIV-XJTU/FSDrive/issues/21",
         "the fix: a tensor-parallel size that divides the 12 heads (4), data parallel 2 on 8 GPUs",
         "accept",
         check(strategy="tp2d_hybrid", accelerator="cuda", devices=8, gpus=8,
               overrides={"data_parallel_size": 2, "tensor_parallel_size": 4}),
         "Trainer(strategy=tp2d_hybrid(data_parallel_size=2, tensor_parallel_size=4), devices=8), 12 heads",
         model=f"{MODULE}:Heads12"),
]  # fmt: skip


def _cases() -> list[Case]:
    return [*MISCONFIGURATIONS, *LEGAL]


@contextlib.contextmanager
def _models_here(scratch: Path) -> Iterator[None]:
    """The cases' LightningModules as an importable module in the scratch folder (``--model`` imports from the
    current directory)."""
    (scratch / f"{MODULE}.py").write_text(MODELS)
    previous = os.getcwd()
    os.chdir(scratch)
    try:
        yield
    finally:
        os.chdir(previous)
        sys.modules.pop(MODULE, None)


def _run_one(case: Case, scratch: Path, model: str | None) -> dict[str, Any]:
    from dataclasses import replace

    from lightning_presets.core.findings import UsageError
    from lightning_presets.tools.verdict import run_check

    started = time.perf_counter()
    if case.request is None:
        return {"model": model, "usage_error": "not expressible", "seconds": 0.0}
    try:
        request = case.request(scratch)
        if model is not None:
            request = replace(request, model=model)
        report = run_check(request)
    except UsageError as refused:
        return {"model": model, "usage_error": str(refused), "seconds": round(time.perf_counter() - started, 2)}
    except Exception as crashed:  # a crash of the package (or of the case): reported, never hidden
        tail = traceback.format_exception(type(crashed), crashed, crashed.__traceback__)[-4:]
        return {"model": model, "crash": f"{type(crashed).__name__}: {crashed}", "traceback": "".join(tail),
                "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip
    findings = [
        {"code": each.finding.code, "severity": each.finding.severity, "conditional": each.finding.conditional,
         "source": each.source, "message": each.finding.message, "hint": each.finding.hint}
        for each in report.reported
    ]  # fmt: skip
    return {"model": model, "constructed": report.constructed, "evidence": report.evidence, "findings": findings,
            "notes": list(report.request.notes), "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip


_QUOTED = re.compile(r"`[^`]*`")


def _text(finding: dict[str, Any]) -> str:
    """A finding's own words: its message and hint without the spans in backquotes, where messages repeat the user's
    call (``Trainer(strategy='ddp_static_graph', accelerator='mps')`` names MPS and DDP without saying anything)."""
    return _QUOTED.sub(" ", f"{finding['message']}\n{finding['hint']}")


def _judge(case: Case, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The verdict of one case from its runs (with the model first where it has one)."""
    if any("crash" in run for run in runs):
        return {"verdict": "crash"}
    if any("usage_error" in run for run in runs):
        return {"verdict": "usage error"}
    decided = runs[0]
    verdict: dict[str, Any] = {}
    if case.expected == "flag":
        flags = [f for f in decided["findings"] if not f["conditional"]]
        on_topic = [f for f in flags if re.search(case.topic, _text(f))]
        verdict["flagged"] = bool(flags)
        verdict["on_topic"] = bool(on_topic)
        verdict["codes"] = sorted({f["code"] for f in flags})
        verdict["on_topic_codes"] = sorted({f["code"] for f in on_topic})
        verdict["lightning_only"] = bool(flags) and all(f["source"] == "lightning" for f in flags)
        verdict["verdict"] = "flagged" if on_topic else ("flagged off topic" if flags else "missed")
        if case.model is not None:
            bare = runs[1]["findings"]
            named = [f for f in bare if re.search(case.risk, _text(f))]
            verdict["without_model_names_risk"] = bool(named)
            verdict["without_model_codes"] = sorted({f"{f['code']}{'?' if f['conditional'] else ''}" for f in bare})
    else:
        errors = sorted({f["code"] for run in runs for f in run["findings"] if f["severity"] == "error"})
        warnings_ = sorted({f["code"] for run in runs for f in run["findings"] if f["severity"] == "warning"})
        verdict["errors"] = errors
        verdict["warnings"] = warnings_
        verdict["verdict"] = "refused" if errors else "accepted"
    return verdict


def _versions() -> dict[str, str]:
    import lightning
    import torch

    import lightning_presets

    versions = {"python": platform.python_version(), "torch": torch.__version__, "lightning": lightning.__version__,
                "lightning_presets": getattr(lightning_presets, "__version__", "?")}  # fmt: skip
    try:
        import deepspeed

        versions["deepspeed"] = deepspeed.__version__
    except Exception as missing:  # reported: the DeepSpeed cases then say why they fail
        versions["deepspeed"] = f"not importable ({type(missing).__name__})"
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    versions["commit"] = head.stdout.strip() or "?"
    return versions


def run(only: set[str] | None = None) -> dict[str, Any]:
    """Every case (or the ids in ``only``), in a scratch folder; the per-case records and the summary."""
    cases = [case for case in _cases() if only is None or case.id in only]
    records = []
    with tempfile.TemporaryDirectory(prefix="field_fresh_") as folder:
        scratch = Path(folder)
        with _models_here(scratch):
            for case in cases:
                if case.request is None:
                    records.append({**_describe(case), "runs": [], "verdict": {"verdict": "not expressible"}})
                    continue
                models = [case.model, None] if case.model is not None else [None]
                runs = [_run_one(case, scratch, model) for model in models]
                records.append({**_describe(case), "runs": runs, "verdict": _judge(case, runs)})
    return {"versions": _versions(), "records": records, "summary": _summary(records)}


def _describe(case: Case) -> dict[str, Any]:
    return {"id": case.id, "source": case.source, "wrong": case.wrong, "expected": case.expected,
            "translation": case.translation, "topic": case.topic, "model": case.model, "risk": case.risk,
            "stale": case.stale, "correction": case.correction}  # fmt: skip


def _summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    every = [r for r in records if r["expected"] == "flag"]
    bad = [r for r in every if not r["stale"]]
    good = [r for r in records if r["expected"] == "accept"]
    model_cases = [r for r in bad if r["model"] is not None and "without_model_names_risk" in r["verdict"]]
    return {
        "misconfigurations": len(bad),
        "flagged_on_topic": sum(r["verdict"].get("on_topic", False) for r in bad),
        "flagged_any": sum(r["verdict"].get("flagged", False) for r in bad),
        "flagged_by_lightning_only": sum(r["verdict"].get("lightning_only", False) for r in bad),
        "missed": [r["id"] for r in bad if r["verdict"]["verdict"] != "flagged"],
        "stale": [r["id"] for r in every if r["stale"]],
        "flagged_on_topic_with_stale": sum(r["verdict"].get("on_topic", False) for r in every),
        "cases_with_stale": len(every),
        "legal": len(good),
        "refused": [r["id"] for r in good if r["verdict"]["verdict"] == "refused"],
        "model_dependent": len(model_cases),
        "without_model_names_risk": sum(r["verdict"]["without_model_names_risk"] for r in model_cases),
        "crashes": [r["id"] for r in records if r["verdict"]["verdict"] == "crash"],
        "usage_errors": [r["id"] for r in records if r["verdict"]["verdict"] == "usage error"],
        "not_expressible": [r["id"] for r in records if r["verdict"]["verdict"] == "not expressible"],
    }


def render(result: dict[str, Any], command: str, seconds: float) -> str:
    versions = " ".join(f"{key} {value}" for key, value in result["versions"].items())
    s = result["summary"]
    lines = [
        "Fresh field cases (issue 23): threads outside tests/field/, translated to presets, checked on simulated "
        "hardware",
        f"command: {command}",
        f"versions: {versions}",
        f"wall time: {seconds:.0f} s",
        "",
        f"misconfigurations flagged on topic: {s['flagged_on_topic']}/{s['misconfigurations']} "
        f"(any non-conditional finding: {s['flagged_any']}/{s['misconfigurations']}; "
        f"by Lightning's own error alone: {s['flagged_by_lightning_only']}); missed: {' '.join(s['missed'])}",
        f"stale threads (the failure no longer happens with this Lightning; not counted above): "
        f"{' '.join(s['stale']) or 'none'}; counted as misconfigurations: "
        f"{s['flagged_on_topic_with_stale']}/{s['cases_with_stale']}",
        f"legal configurations refused: {len(s['refused'])}/{s['legal']} {' '.join(s['refused'])}".rstrip(),
        f"model-dependent misconfigurations whose risk a check without --model names: "
        f"{s['without_model_names_risk']}/{s['model_dependent']}",
        f"crashes: {' '.join(s['crashes']) or 'none'}; usage errors: {' '.join(s['usage_errors']) or 'none'}; "
        f"not expressible: {' '.join(s['not_expressible']) or 'none'}",
        "",
        f"{'id':<4} {'expected':<8} {'verdict':<18} {'codes (on topic)':<26} {'without --model':<22} source",
    ]
    for record in result["records"]:
        v = record["verdict"]
        if record["expected"] == "flag":
            codes = " ".join(v.get("on_topic_codes", [])) or ("(" + " ".join(v.get("codes", [])) + ")")
            bare = ""
            if "without_model_names_risk" in v:
                named = "names risk" if v["without_model_names_risk"] else "silent"
                bare = f"{named}: {' '.join(v['without_model_codes'])}"
        else:
            codes = " ".join(v.get("errors", [])) or "-"
            bare = ("warn " + " ".join(v.get("warnings", []))) if v.get("warnings") else ""
        verdict = f"{v['verdict']} (stale)" if record["stale"] else v["verdict"]
        lines.append(f"{record['id']:<4} {record['expected']:<8} {verdict:<18} {codes[:26]:<26} "
                     f"{bare[:22]:<22} {record['source']}")  # fmt: skip
    lines += ["", "('?' after a code: a conditional warning. Codes in parentheses: flagged, but not about the "
              "thread's failure.)", ""]  # fmt: skip
    for record in result["records"]:
        if record["stale"]:
            lines.append(f"{record['id']} stale: {record['stale']}")
        if record["correction"]:
            lines.append(f"{record['id']} topic changed after the first run: {record['correction']}")
    lines.append("")
    for record in result["records"]:
        lines.append(f"{record['id']}: {record['wrong']}")
        lines.append(f"     as: {record['translation']}")
        for run_ in record["runs"]:
            label = f"with {run_['model']}" if run_.get("model") else "no model"
            if "crash" in run_:
                lines.append(f"     [{label}] CRASH {run_['crash']}")
                continue
            if "usage_error" in run_:
                lines.append(f"     [{label}] usage error: {run_['usage_error']}")
                continue
            for finding in run_["findings"]:
                mark = "?" if finding["conditional"] else ""
                lines.append(f"     [{label}] {finding['code']}{mark} {finding['severity']} ({finding['source']}): "
                             f"{finding['message'][:160]}")  # fmt: skip
            if not run_["findings"]:
                lines.append(f"     [{label}] no finding")
    return "\n".join(lines) + "\n"


def command_line(
    argv: list[str] | None,
    *,
    name: str,
    doc: str,
    run_cases: Callable[[set[str] | None], dict[str, Any]],
    render_text: Callable[[dict[str, Any], str, float], str],
) -> int:
    """The benchmark's command line for a set of cases: ``--only``, ``--out`` and ``--no-write``; writes
    ``<out>/<name>.json`` and ``.txt``."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="case ids to run (default: all)")
    parser.add_argument("--out", type=Path, default=RESULTS, help=f"folder for {name}.json and .txt")
    parser.add_argument("--no-write", action="store_true", help="print the table, write nothing")
    args = parser.parse_args(argv)
    os.environ.setdefault("LIGHTNING_PRESETS_HANDSHAKE", "0")
    started = time.perf_counter()
    result = run_cases(set(args.only) if args.only else None)
    seconds = time.perf_counter() - started
    command = f"python benchmarks/bench_{name}.py" + (f" --only {' '.join(args.only)}" if args.only else "")
    text = render_text(result, command, seconds)
    print(text)
    if not args.no_write:
        args.out.mkdir(parents=True, exist_ok=True)
        payload = {"command": command, "wall_s": round(seconds, 1), **result}
        (args.out / f"{name}.json").write_text(json.dumps(payload, indent=1, default=str) + "\n")
        (args.out / f"{name}.txt").write_text(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    return command_line(argv, name="field_fresh", doc=__doc__ or "", run_cases=run, render_text=render)


if __name__ == "__main__":
    raise SystemExit(main())
