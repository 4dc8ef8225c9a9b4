"""Held-out field cases (issue 23, "Done when"), a second fresh set: misconfigurations from public threads used nowhere
else in the project (not in ``tests/field/``, ``tests/evidence/``, ``src/`` or ``benchmarks/bench_field_fresh.py``),
mostly from other projects' trackers, and legal configurations careful users run, each translated into this package's
terms and validated through ``run_check`` on simulated hardware.

The machinery (case format, judgement, counting, rendering) is ``bench_field_fresh``'s, imported unchanged; see its
docstring for how a case is counted. The expected outcome of every case and, for a misconfiguration, its topic (and,
for a model-dependent one, its risk words) were written before the first run and are not tuned to the results. The
first run is the first-contact figure: ``benchmarks/results/field_heldout.{json,txt}``.

Threads read but not turned into cases are listed in :data:`SKIPPED` with the reason (the failure cannot be expressed
as a ``check``, or the thread shows no misconfiguration); they are reported, never counted.

    python benchmarks/bench_field_heldout.py          # writes benchmarks/results/field_heldout.{json,txt}
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_field_fresh as fresh  # the machinery this set reuses

Case = fresh.Case
RESULTS = fresh.RESULTS
GH = fresh.GH
DS2 = fresh.DS2
DS3 = fresh.DS3
PLAIN = f"{fresh.MODULE}:Plain"
check = fresh.check
_slurm = fresh._slurm
_resumed = fresh._resumed
_deepspeed_checkpoint = fresh._deepspeed_checkpoint


def with_presets(names: tuple[str, ...], **values: Any) -> Callable[[Path], Any]:
    """A check whose job also passes precision presets (``--plugin NAME``)."""
    return lambda scratch: replace(fresh._check(**values), plugins=names)


def _single_file(name: str) -> Callable[[Path], Path]:
    """A one-file Lightning checkpoint (what DDP or a converted DeepSpeed run saves)."""

    def make(scratch: Path) -> Path:
        import torch

        path = scratch / name
        if not path.exists():
            weights = {"layer.weight": torch.zeros(4, 4), "layer.bias": torch.zeros(4)}
            torch.save({"state_dict": weights, "epoch": 9, "global_step": 1000, "pytorch-lightning_version": "2.4.0",
                        "optimizer_states": [], "lr_schedulers": [], "loops": {}, "callbacks": {}}, path)  # fmt: skip
        return path

    return make


_SLURM_JOB = {"SLURM_JOB_ID": "4242", "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0"}

MISCONFIGURATIONS = [
    Case("H01", GH + "jwohlwend/boltz/issues/218",
         "on a GPU node of a job without --ntasks-per-node (SLURM_NTASKS=200 set, SLURM_NTASKS_PER_NODE unset), "
         "Lightning raises 'You set --ntasks=200 ... not supported'",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=1, gpus=1,
               env={**_SLURM_JOB, "SLURM_JOB_NAME": "boltz", "SLURM_NTASKS": "200", "SLURM_NNODES": "1",
                    "SLURM_NODELIST": "gpu001"}),
         "Trainer(strategy=ddp_static_graph, devices=1) with SLURM_NTASKS=200 and no SLURM_NTASKS_PER_NODE",
         topic=r"(?i)ntasks|SLURM_NTASKS"),
    Case("H02", GH + "paninski-lab/lightning-pose/issues/220",
         "sbatch --gres=gpu:4 without --ntasks-per-node, python run without srun: one task, multi-GPU does not work",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=4, gpus=4,
               env={**_SLURM_JOB, "SLURM_JOB_NAME": "train.sh", "SLURM_NTASKS": "1", "SLURM_NNODES": "1",
                    "SLURM_NODELIST": "node0"}),
         "Trainer(strategy=ddp_static_graph, devices=4) in the batch step of a 1-task SLURM job with 4 GPUs",
         topic=r"task|SLURM_NTASKS"),
    Case("H03", GH + "Lightning-AI/pytorch-lightning/issues/17603",
         "deepspeed_stage_3_offload with a torch AdamW from configure_optimizers: ZeRORuntimeException 'ZeRO-Offload "
         "with a client provided optimizer'",
         "flag",
         check(strategy=DS3, accelerator="cuda", devices=4, gpus=4, precision="16-mixed"),
         "Trainer(strategy=deepspeed_zero3_offload_ckpt, precision='16-mixed', devices=4), configure_optimizers "
         "returns torch.optim.AdamW",
         topic=r"(?i)DeepSpeedCPUAdam|zero_force_ds_cpu_optimizer|cpu[_ -]?adam|client[- ]provided optimizer|"
         r"optimizer[^.\n]{0,60}(on the CPU|offload)",
         model=PLAIN,
         risk=r"(?i)DeepSpeedCPUAdam|zero_force_ds_cpu_optimizer|cpu[_ -]?adam|client[- ]provided optimizer|"
         r"optimizer[^.\n]{0,60}(on the CPU|offload)"),
    Case("H04", GH + "Lightning-AI/pytorch-lightning/issues/12774",
         "training in a Jupyter notebook on a 2-GPU machine with a multi-process strategy: 'not compatible with an "
         "interactive environment'",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=2, gpus=2, interactive=True),
         "Trainer(strategy=ddp_static_graph, devices=2) in a notebook", topic=r"(?i)interactive|notebook|jupyter"),
    Case("H05", GH + "microsoft/mattergen/issues/217",
         "sbatch -N 8 --ntasks-per-node=64 -C gpu without --gres/--gpus: no GPU in the job, 'No supported gpu backend "
         "found!'",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=-1, gpus=0,
               env=_slurm(8, 512, 64, **_SLURM_JOB, SLURM_JOB_NAME="mattergen")),
         "Trainer(strategy=ddp_static_graph, accelerator='cuda', devices=-1) in task 0 of 8 x 64 SLURM tasks, no GPU "
         "visible (num_nodes left at its default: the thread does not show it)",
         topic=r"(?i)no supported gpu|not available|no (visible )?GPU|gres|--gpus|0 GPU"),
    Case("H06", GH + "Lightning-AI/lightning-thunder/issues/1942",
         "a checkpoint folder written by deepspeed_stage_2 cannot be loaded to continue: 'IsADirectoryError: "
         "last.ckpt'",
         "flag",
         _resumed(_deepspeed_checkpoint("ds2_dp2", stage=2, data_parallel=2), strategy="ddp_static_graph",
                  accelerator="cuda", devices=2, gpus=2),
         "Trainer(strategy=ddp_static_graph, devices=2), fit(ckpt_path=<ZeRO-2 folder saved by 2 ranks>)",
         topic=r"(?i)deepspeed|folder|directory"),
    Case("H07", GH + "Lightning-AI/pytorch-lightning/issues/20453",
         "resuming with strategy='deepspeed_stage_2' from a single .ckpt file: 'The provided path is not a valid "
         "DeepSpeed checkpoint'",
         "flag",
         _resumed(_single_file("epoch=9.ckpt"), strategy=DS2, accelerator="cuda", devices=2, gpus=2),
         "Trainer(strategy=deepspeed_zero2_offload, devices=2), fit(ckpt_path=<one-file Lightning checkpoint>)",
         topic=r"(?i)not a (valid )?deepspeed|single[- ]file|folder|directory|\.ckpt"),
    Case("H08", GH + "Lightning-AI/pytorch-lightning/issues/13339",
         "Fully Sharded training does not support Trainer(gradient_clip_val=...) (clipping by norm)",
         "flag",
         check(strategy="fsdp_grad_op", accelerator="cuda", devices=4, gpus=4, gradient_clip_val=1.0),
         "Trainer(strategy=fsdp_grad_op, gradient_clip_val=1.0, devices=4), a module that does not override "
         "configure_gradient_clipping (the thread's fairscale FSDP read as today's FSDP)",
         topic=r"clip", model=PLAIN, risk=r"(?i)clip|configure_gradient_clipping"),
    Case("H09", GH + "kijai/ComfyUI-HunyuanVideoWrapper/issues/98",
         "fp8 matmuls on an RTX 3090 Ti: 'torch._scaled_mm is only supported on CUDA devices with compute capability "
         ">= 9.0 or 8.9'",
         "flag",
         with_presets(("fp8-torchao",), strategy="ddp_static_graph", accelerator="cuda", devices=1, gpus=1,
                      gpu_capability=(8, 6)),
         "Trainer(strategy=ddp_static_graph, plugins=[fp8-torchao], devices=1) on an RTX 3090 Ti (8.6)",
         topic=r"(?i)fp8|float8|8\.9|capability|scaled_mm"),
    Case("H10", GH + "kvcache-ai/ktransformers/issues/934",
         "an fp8 model on A100s: 'fp8e4nv data type is not supported on CUDA arch < 89'",
         "flag",
         with_presets(("fp8-torchao",), strategy="fsdp2", accelerator="cuda", devices=8, gpus=8,
                      gpu_capability=(8, 0)),
         "Trainer(strategy=fsdp2, plugins=[fp8-torchao], devices=8) on A100 (8.0)",
         topic=r"(?i)fp8|float8|8\.9|capability|scaled_mm"),
    Case("H11", GH + "Lightning-AI/pytorch-lightning/issues/5566",
         "8 GPUs allocated by SLURM over two nodes with 5 and 3 free GPUs, Trainer asks for 8 on the node: Lightning "
         "compares 8 with the node's 5",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=8, gpus=5,
               env={**_SLURM_JOB, "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "8", "SLURM_NNODES": "2",
                    "SLURM_TASKS_PER_NODE": "5,3", "SLURM_NODELIST": "node[0-1]"}),
         "Trainer(strategy=ddp_static_graph, devices=8) on the first node (5 GPUs) of a SLURM job of 8 tasks over "
         "2 nodes",
         topic=r"(?i)only has|visible GPU|GPUs? (per|on (the|this|each)) node|same number of (GPUs|devices)|uneven|"
         r"differ"),
    Case("H12", GH + "huggingface/nanotron/issues/250",
         "a parallel layout of 8 processes (data x tensor) in a world of 4: 'The number of process requires to run "
         "all replicas (8) must be equal to the world size (4)'",
         "flag",
         check(strategy="tp2d_hybrid", accelerator="cuda", devices=4, gpus=4, cluster="torchelastic",
               overrides={"data_parallel_size": 2, "tensor_parallel_size": 4}),
         "Trainer(strategy=tp2d_hybrid(data_parallel_size=2, tensor_parallel_size=4), devices=4) under torchrun "
         "--nproc-per-node=4",
         topic=r"(?i)world size|data_parallel_size|tensor_parallel_size|mesh"),
    Case("H13", GH + "Lightning-AI/pytorch-lightning/issues/15874",
         "DDP over nodes with different numbers of GPUs (2, 2 and 1), devices set per node: multi-node DDP fails",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=1, num_nodes=3, gpus=1, cluster="torchelastic",
               env={"WORLD_SIZE": "5", "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "2", "RANK": "4", "LOCAL_RANK": "0",
                    "MASTER_ADDR": "10.0.0.1"}),
         "Trainer(strategy=ddp_static_graph, devices=1, num_nodes=3) on the 1-GPU node of a 2+2+1 GPU job (world 5)",
         topic=r"(?i)world size|WORLD_SIZE|same number|per node|num_nodes"),
    Case("H14", GH + "mlc-ai/pith-train/pull/91",
         "the rendezvous host fell back to localhost on every node: each node formed its own world and the "
         "multi-node run hung at startup",
         "flag",
         check(strategy="ddp_bf16_compress", accelerator="cuda", devices=8, num_nodes=2, gpus=8, cluster="torchelastic",
               env={"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "0", "RANK": "0", "LOCAL_RANK": "0",
                    "MASTER_ADDR": "localhost"}),
         "Trainer(strategy=ddp_bf16_compress, devices=8, num_nodes=2) under a torchrun whose world is its own node "
         "(WORLD_SIZE=8, MASTER_ADDR=localhost)",
         topic=r"(?i)world size|WORLD_SIZE|num_nodes|MASTER_ADDR|localhost|loopback"),
    Case("H15", GH + "Lightning-AI/pytorch-lightning/issues/102",
         "2 GPUs per node on 2 nodes but one SLURM task per node: 'You requested 2 GPUs but launched 1 slurm tasks'",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=2, num_nodes=2, gpus=2, cluster="slurm",
               env=_slurm(2, 2, 1)),
         "Trainer(strategy=ddp_static_graph, devices=2, num_nodes=2) under srun with SLURM_NTASKS=2, "
         "SLURM_NTASKS_PER_NODE=1", topic=r"task|SLURM_NTASKS"),
    Case("H16", GH + "MicrosoftDocs/azure-docs/pull/95788",
         "NODE_RANK set to OMPI_COMM_WORLD_RANK with one MPI process per GPU: the multi-node job hangs (NODE_RANK must "
         "be the node's rank)",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=2, num_nodes=2, gpus=2, cluster="mpi",
               env={"OMPI_COMM_WORLD_SIZE": "4", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
                    "OMPI_COMM_WORLD_LOCAL_SIZE": "2", "OMPI_COMM_WORLD_NODE_RANK": "1", "PMI_RANK": "3",
                    "PMI_SIZE": "4", "NODE_RANK": "3", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "6105"}),
         "Trainer(strategy=ddp_static_graph, devices=2, num_nodes=2) in MPI rank 3 of 4 (2 per node) with NODE_RANK=3",
         topic=r"(?i)NODE_RANK|node rank"),
    Case("H17", GH + "Lightning-AI/pytorch-lightning/issues/17546",
         "Fabric(devices=2) in an interactive Python session: 'Default process group has not been initialized' at "
         "setup",
         "flag",
         check(mode="fabric", strategy="ddp_static_graph", accelerator="cuda", devices=2, gpus=2, interactive=True),
         "Fabric(strategy=ddp_static_graph, devices=2) in an interactive session",
         topic=r"(?i)launch|interactive|notebook|process group"),
    Case("H18", GH + "NVIDIA/Megatron-LM/issues/2458",
         "world size taken from the machine's GPU count (8) under torchrun --nproc_per_node=2: init_process_group "
         "deadlocks",
         "flag",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=-1, gpus=8, cluster="torchelastic",
               env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0"}),
         "Trainer(strategy=ddp_static_graph, devices=-1) on an 8-GPU machine under torchrun --nproc-per-node=2",
         topic=r"(?i)WORLD_SIZE|world size|LOCAL_WORLD_SIZE|nproc|torchrun"),
]  # fmt: skip

LEGAL = [
    Case("G01", GH + "paninski-lab/lightning-pose/issues/220",
         "the fix: --gres=gpu:4 --ntasks-per-node=4 and srun python (task 2 shown)",
         "accept",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=4, gpus=4, cluster="slurm",
               env=_slurm(1, 4, 4, SLURM_PROCID="2", SLURM_LOCALID="2")),
         "Trainer(strategy=ddp_static_graph, devices=4) in task 2 of srun --ntasks-per-node=4"),
    Case("G02", GH + "jwohlwend/boltz/issues/218",
         "an interactive allocation on a GPU node (job name bash): Lightning starts its own processes",
         "accept",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=2, gpus=2,
               env={"SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "bash", "SLURM_NTASKS": "1", "SLURM_NNODES": "1",
                    "SLURM_NODELIST": "gpu001"}),
         "Trainer(strategy=ddp_static_graph, devices=2) in salloc's shell (SLURM_JOB_NAME=bash)"),
    Case("G03", GH + "Lightning-AI/pytorch-lightning/issues/17603",
         "DeepSpeed's documented opt-out: a torch optimizer with ZeRO-Offload and zero_force_ds_cpu_optimizer=false",
         "accept",
         check(strategy=DS3, accelerator="cuda", devices=4, gpus=4, precision="16-mixed",
               overrides={"config": {"zero_optimization": {"stage": 3, "offload_optimizer": {"device": "cpu"},
                                                           "offload_param": {"device": "cpu"}},
                                     "zero_force_ds_cpu_optimizer": False}}),
         "Trainer(strategy=deepspeed_zero3_offload_ckpt(config={ZeRO-3 offload, zero_force_ds_cpu_optimizer: false}), "
         "precision='16-mixed', devices=4), torch AdamW", model=PLAIN),
    Case("G04", GH + "microsoft/mattergen/issues/217",
         "the fix: GPUs requested, one task per GPU (8 nodes x 4 GPUs, task 13 shown)",
         "accept",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=4, num_nodes=8, gpus=4, cluster="slurm",
               env=_slurm(8, 32, 4, SLURM_NODEID="3", SLURM_PROCID="13", SLURM_LOCALID="1")),
         "Trainer(strategy=ddp_static_graph, devices=4, num_nodes=8) in task 13 of sbatch -N 8 --ntasks-per-node=4 "
         "--gpus-per-node=4"),
    Case("G05", GH + "Lightning-AI/pytorch-lightning/issues/17763",
         "resuming DeepSpeed from the checkpoint's own folder (the parent of checkpoint/) on the topology that "
         "saved it",
         "accept",
         _resumed(_deepspeed_checkpoint("ds2_dp8", stage=2, data_parallel=8), strategy=DS2, accelerator="cuda",
                  devices=8, gpus=8),
         "Trainer(strategy=deepspeed_zero2_offload, devices=8), fit(ckpt_path=<ZeRO-2 folder saved by 8 ranks>)"),
    Case("G06", GH + "fsspec/gcsfs/pull/965",
         "a 2D layout that tiles the world (tensor 4 x data 2 = 2 nodes x 4 GPUs)",
         "accept",
         check(strategy="tp2d_hybrid", accelerator="cuda", devices=4, num_nodes=2, gpus=4, cluster="torchelastic",
               overrides={"data_parallel_size": 2, "tensor_parallel_size": 4},
               env={"GROUP_RANK": "1", "RANK": "5", "LOCAL_RANK": "1", "MASTER_ADDR": "10.0.0.1"}),
         "Trainer(strategy=tp2d_hybrid(data_parallel_size=2, tensor_parallel_size=4), devices=4, num_nodes=2) in "
         "local rank 1 of node 1 under torchrun"),
    Case("G07", GH + "pytorch/ao/issues/1057",
         "float8 training on SM89 hardware (RTX 6000 Ada), which torch._scaled_mm supports",
         "accept",
         with_presets(("fp8-torchao",), strategy="ddp_static_graph", accelerator="cuda", devices=2, gpus=2,
                      gpu_capability=(8, 9)),
         "Trainer(strategy=ddp_static_graph, plugins=[fp8-torchao], devices=2) on RTX 6000 Ada (8.9)"),
    Case("G08", GH + "Lightning-AI/pytorch-lightning/issues/18016",
         "Trainer(precision='16-mixed', strategy='deepspeed') runs DeepSpeed's fp16 mode, the V100's precision",
         "accept",
         check(strategy=DS3, accelerator="cuda", devices=8, gpus=8, gpu_capability=(7, 0), precision="16-mixed"),
         "Trainer(strategy=deepspeed_zero3_offload_ckpt, precision='16-mixed', devices=8) on V100 (7.0)"),
    Case("G09", GH + "Lightning-AI/pytorch-lightning/issues/12774",
         "the advice: run as a script, not in the notebook (2 x T4, fp16)",
         "accept",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=2, gpus=2, gpu_capability=(7, 5),
               precision="16-mixed"),
         "Trainer(strategy=ddp_static_graph, precision='16-mixed', devices=2) as a script on 2 x T4 (7.5)"),
    Case("G10", GH + "AMDResearch/hpcfund/issues/47",
         "srun with one task per node starting torchrun --nproc_per_node=4 on each of 2 nodes",
         "accept",
         check(strategy="ddp_bf16_compress", accelerator="cuda", devices=4, num_nodes=2, gpus=4, cluster="torchelastic",
               env={"GROUP_RANK": "1", "RANK": "4", "LOCAL_RANK": "0", "MASTER_ADDR": "10.0.0.1",
                    "SLURM_JOB_ID": "190624", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": "2",
                    "SLURM_NTASKS_PER_NODE": "1", "SLURM_NNODES": "2", "SLURM_NODEID": "1", "SLURM_PROCID": "1",
                    "SLURM_LOCALID": "0"}),
         "Trainer(strategy=ddp_bf16_compress, devices=4, num_nodes=2) in local rank 0 of node 1, torchrun inside an "
         "srun task (SLURM_NTASKS=2, one per node)"),
    Case("G11", GH + "NVIDIA/Megatron-LM/issues/2458",
         "the fix: the world taken from torchrun (2 processes on an 8-GPU machine), devices=2",
         "accept",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=2, gpus=8, cluster="torchelastic"),
         "Trainer(strategy=ddp_static_graph, devices=2) on an 8-GPU machine under torchrun --nproc-per-node=2"),
    Case("G12", GH + "fishaudio/fish-diffusion/issues/2",
         "the workaround: DDP with process_group_backend='gloo' on GPUs (slower than NCCL, but legal)",
         "accept",
         check(strategy="ddp_static_graph", accelerator="cuda", devices=2, gpus=2,
               overrides={"process_group_backend": "gloo"}),
         "Trainer(strategy=ddp_static_graph(process_group_backend='gloo'), devices=2)"),
]  # fmt: skip

SKIPPED = [
    (GH + "HannesStark/boltzgen/issues/39", "ranks on one GPU under sbatch --ntasks-per-node=3: whether srun started "
     "the tasks is not visible in one process's environment (the same variables as a correct srun task)"),
    (GH + "Stability-AI/stable-audio-tools/issues/131", "a kernel without bfloat16 (weight_norm) under DeepSpeed bf16: "
     "a property of the model's ops, which check does not run on a GPU"),
    (GH + "aqlaboratory/openfold/issues/39", "log_sigmoid not implemented for bfloat16: an op of the model, as above"),
    (GH + "modelscope/DiffSynth-Studio/issues/576", "ZeRO-3 with the model's own gradient-checkpointing offload: in "
     "the model code, not in the Trainer's arguments"),
    (GH + "Lightning-AI/pytorch-lightning/issues/16136", "ddp_notebook fails after CUDA was initialised in an earlier "
     "cell: notebook state, not a configuration"),
    (GH + "Lightning-AI/pytorch-lightning/issues/20626", "an RTX 5080 with a torch build without its architecture: the "
     "installed wheel, not a configuration"),
    (GH + "fishaudio/fish-diffusion/issues/2", "DDP on Windows, where torch has no NCCL: check simulates Linux (the "
     "workaround is legal case G12)"),
    (GH + "NVIDIA/nvidia-resiliency-ext/issues/142", "a --node-rank flag on another node under c10d rendezvous: not "
     "visible from the checked process"),
    (GH + "AMDResearch/hpcfund/issues/47", "the two-node failure was the rendezvous port (network); the launch pattern "
     "itself is legal case G10"),
    (GH + "Lightning-AI/pytorch-lightning/issues/14986", "ncclSystemError between nodes: the network"),
    (GH + "Lightning-AI/pytorch-lightning/issues/18820", "FSDP with TransformerEngine fp8: the fp8-te preset's extra "
     "(transformer_engine) is not installed here, so the case would test the missing extra"),
    (GH + "Lightning-AI/lit-llama/issues/216", "DeepSpeed with bf16-true: the same failure as the fresh set's M02, "
     "which Lightning 2.6.6 no longer raises (stale there); not counted twice"),
    (GH + "deepspeedai/DeepSpeed/issues/7220", "grad_norm printed above the clip value: the norm before clipping, no "
     "misconfiguration"),
]  # fmt: skip


def _cases() -> list[Case]:
    return [*MISCONFIGURATIONS, *LEGAL]


def run(only: set[str] | None = None) -> dict[str, Any]:
    """Every case (or the ids in ``only``) through ``bench_field_fresh``'s runner and judge."""
    cases = [case for case in _cases() if only is None or case.id in only]
    records = []
    with tempfile.TemporaryDirectory(prefix="field_heldout_") as folder:
        scratch = Path(folder)
        with fresh._models_here(scratch):
            for case in cases:
                models = [case.model, None] if case.model is not None else [None]
                runs = [fresh._run_one(case, scratch, model) for model in models]
                records.append({**fresh._describe(case), "runs": runs, "verdict": fresh._judge(case, runs)})
    skipped = [{"source": source, "reason": reason} for source, reason in SKIPPED]
    return {"versions": fresh._versions(), "records": records, "summary": fresh._summary(records), "skipped": skipped}


TITLE = ("Held-out field cases (issue 23): a second fresh set, threads used nowhere else in the project, translated to "
         "presets, checked on simulated hardware")  # fmt: skip


def render(result: dict[str, Any], command: str, seconds: float) -> str:
    text = fresh.render(result, command, seconds)
    _, rest = text.split("\n", 1)
    lines = [TITLE, rest.rstrip("\n"), "", f"threads read but not turned into cases ({len(result['skipped'])}):"]
    lines += [f"  {each['source']}: {each['reason']}" for each in result["skipped"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    return fresh.command_line(argv, name="field_heldout", doc=__doc__ or "", run_cases=run, render_text=render)


if __name__ == "__main__":
    raise SystemExit(main())
