"""Failure signatures of the run itself: the strategies' first steps (DDP, FSDP, DeepSpeed, DTensor), memory (the
GPU's, the host's, SLURM's limit, the DataLoader's workers) and numerics. Part of :data:`.signatures.SIGNATURES`,
which gives the order they are tried in."""

from __future__ import annotations

import re

from lightning_presets.failures.model import Signature, words
from lightning_presets.failures.network import NCCL_INTERNAL_ERROR, NCCL_SYSTEM_ERROR

# --- first steps of the strategies -----------------------------------------------------------------------------

DDP_UNUSED_PARAMETERS = Signature(
    code="LP055", title="DDP found parameters that received no gradient",
    category="ddp_reducer",
    pattern=words("Expected to have finished reduction in the prior iteration before starting a new one")
    + "|" + words("It looks like your LightningModule has parameters that were not used in producing the loss"),
    cause="some parameters took no part in the loss of the previous step (a branch not taken, a frozen head still "
    "requiring grad), so DDP's reducer was still waiting for their gradients",
    fix="strategy='ddp_find_unused_parameters_true' (or DDPStrategy(find_unused_parameters=True)); better: "
    "requires_grad_(False) on what is not trained",
    source="https://github.com/pytorch/pytorch/issues/57473",
    quote="RuntimeError: Expected to have finished reduction in the prior iteration before starting a new one. This "
    "error indicates that your module has parameters that were not used in producing loss.",
    needles=("reduction", "lightningmodule"),
)  # fmt: skip

FSDP_MIXED_DTYPES = Signature(
    code="LP056", title="FSDP cannot flatten parameters of different dtypes into one unit",
    category="fsdp_first_step",
    pattern=r"(?:`?FlatParameter`? requires|Must flatten tensors with) uniform dtype but got (?P<a>torch\.\w+) and "
    r"(?P<b>torch\.\w+)",
    cause="one FSDP unit holds parameters of {a} and {b}: FSDP1 flattens a unit into one tensor of one dtype (a "
    "model loaded half in bf16, an adapter kept in fp32)",
    fix="model.to(torch.float32) before fit and let precision='bf16-mixed' cast (or one dtype per wrapped unit; "
    "FSDP2 `fsdp2` presets accept mixed dtypes)",
    source="https://github.com/huggingface/peft/issues/484",
    quote="[rank0]: ValueError: Must flatten tensors with uniform dtype but got torch.bfloat16 and torch.float32",
    needles=("uniform dtype",),
)  # fmt: skip

FSDP_MIXED_REQUIRES_GRAD = Signature(
    code="LP067", title="FSDP cannot flatten frozen and trainable parameters into one unit",
    category="fsdp_first_step",
    pattern=r"(?:`?FlatParameter`? requires|Must flatten tensors with) uniform `?requires_grad`?",
    cause="one FSDP unit holds frozen (requires_grad=False) and trainable parameters while use_orig_params=False: "
    "FSDP1 flattens a unit into one tensor, which either requires grad or not (an adapter such as LoRA next to "
    "frozen base weights, a partly frozen layer)",
    fix="use_orig_params=True (Lightning's FSDPStrategy default: drop use_orig_params=False), or an "
    "auto_wrap_policy that puts the frozen and the trainable parameters in separate units",
    source="https://github.com/pytorch/pytorch/issues/104690",
    quote="ValueError: `FlatParameter` requires uniform `requires_grad`",
    needles=("uniform",),
)  # fmt: skip

DEEPSPEED_BATCH_SIZE = Signature(
    code="LP057", title="DeepSpeed's batch sizes do not multiply up to the world size",
    category="deepspeed_first_step",
    pattern=words("train_batch_size is not equal to micro_batch_per_gpu * gradient_acc_step * world_size")
    + r"\s*(?P<train>\d+)\s+!=\s+(?P<micro>\d+)\s+\*\s+(?P<accumulation>\d+)\s+\*\s+(?P<world>\d+)",
    cause="DeepSpeed's config says train_batch_size={train}, but micro batch {micro} × accumulation {accumulation} × "
    "world size {world} differs: the config was written for another number of GPUs",
    fix="drop train_batch_size from the DeepSpeed config (Lightning fills it from the batch size, accumulation and "
    "world size), or set it to micro × accumulation × world size",
    source="https://github.com/deepspeedai/DeepSpeed/issues/6914",
    quote="[rank0]: AssertionError: Check batch related parameters. train_batch_size is not equal to "
    "micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 1",
    needles=("train_batch_size",),
)  # fmt: skip

DTENSOR_MIXED = Signature(
    code="LP058", title="a plain tensor met a DTensor in a sharded model",
    category="tp_first_step",
    pattern=r"(?<![\w.])(?P<op>[\w.]{1,200}):? got mixed torch\.Tensor and DTensor",
    flags=re.IGNORECASE,  # logs pasted lower-cased ("got mixed torch.tensor and dtensor")
    cause="{op} received a plain torch.Tensor and a DTensor: a tensor created inside the model (a mask, a buffer, a "
    "constant) or an input was not distributed like the parameters it meets",
    fix="build that tensor as a DTensor (DTensor.from_local / distribute_tensor on the same mesh), or keep the "
    "module it lives in out of the parallelize plan",
    source="https://github.com/pytorch/torchtitan/issues/875",
    quote="RuntimeError: npu.npu_fusion_attention.default: got mixed torch.Tensor and DTensor, need to convert all "
    "torch.Tensor to DTensor before calling distributed operators.",
    needles=("got mixed",),
)  # fmt: skip

# --- memory ----------------------------------------------------------------------------------------------------

CUDA_OUT_OF_MEMORY = Signature(
    code="LP059", title="CUDA out of memory on a GPU",
    category="oom_config",
    pattern=r"(?:CUDA|HIP) out of memory\.(?: Tried to allocate (?P<size>[\d.]+ [KMGT]?i?B))?(?:\.? GPU (?P<gpu>\d+))?",
    cause="GPU {gpu} ran out of memory allocating {size}: the preset keeps more per GPU than it holds at this batch "
    "size and sequence length",
    fix="lightning-presets plan --model your.module:build --gpu <type> (a sharded or offloaded preset that fits), or "
    "a smaller micro batch with accumulate_grad_batches; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True for "
    "fragmentation",
    source="https://github.com/meta-pytorch/torchtune/issues/2071",
    quote="[rank5]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.96 GiB. GPU 5 has a total "
    "capacity of 23.43 GiB of which 210.06 MiB is free.",
    needles=("out of memory",),
)  # fmt: skip

HOST_OUT_OF_MEMORY = Signature(
    code="LP060", title="a rank killed with SIGKILL and no traceback: probably the host's OOM killer",
    category="host_oom",
    pattern=r"Signal 9 \(SIGKILL\) received by PID (?P<pid>\d+)|exitcode\s*:\s*-9\b|failed \(exitcode: -9\)",
    cause="a rank was killed with signal 9 without a Python traceback: most likely the host's OOM killer (CPU "
    "memory: every rank loading the full checkpoint or dataset, CPU offload, too many DataLoader workers), or the "
    "scheduler's memory limit",
    fix="dmesg | grep -i 'killed process' (or sacct -j <job> -o MaxRSS,State) to confirm; then load the model once "
    "(a meta-device init, `configure_model`), fewer num_workers, or ask for more memory (#SBATCH --mem)",
    source="https://github.com/lzhxmu/CPPO/issues/6",
    quote="  exitcode  : -9 (pid: 14750)\n  error_file: <N/A>\n  traceback : Signal 9 (SIGKILL) received by PID 14750",
    needles=("sigkill", "exitcode"),
    level="category",
)  # fmt: skip

# --- added with the second held-out set's first contact (each quote from a thread outside that set) ----------

NCCL_CUDA_OUT_OF_MEMORY = Signature(
    code="LP069", title="NCCL could not allocate GPU memory for its buffers",
    category="oom_config",
    pattern=r"NCCL WARN Cuda failure (?:\d+ )?'out of memory'|NCCL WARN Failed to CUDA calloc (?P<bytes>\d+) bytes",
    cause="NCCL ran out of GPU memory allocating its own buffers (a connection, a collective's workspace): the GPU "
    "was already full with the model's memory (or another process's) when the collective set up",
    fix="leave NCCL room: a smaller micro batch or a sharded preset (lightning-presets plan ...); check nvidia-smi for "
    "other processes on the GPU; NCCL_BUFFSIZE lowers NCCL's own share",
    supersedes=(NCCL_SYSTEM_ERROR, NCCL_INTERNAL_ERROR),
    source="https://github.com/NVIDIA/nccl/issues/844",
    quote="696b7901f9044f23b786795c0ef7257b000000:39:298 [0] include/alloc.h:48 NCCL WARN Cuda failure 'out of memory'",
    needles=("nccl warn cuda failure", "failed to cuda calloc"),
)  # fmt: skip

SLURM_OOM_KILL = Signature(
    code="LP070", title="SLURM's memory limit killed a task (cgroup OOM)",
    category="host_oom",
    pattern=r"Detected (?P<events>\d+) oom[-_]kill event|task (?P<task>\d+): Out Of Memory",
    cause="the job's tasks used more host memory than SLURM's allocation ({events} oom-kill event(s)): every rank "
    "loading the full checkpoint or dataset, CPU offload, or many DataLoader workers",
    fix="#SBATCH --mem=<more> (or --mem-per-gpu); load the model once (meta-device init, `configure_model`) and use "
    "fewer num_workers; sacct -j <job> -o MaxRSS shows what it used",
    source="https://github.com/NBISweden/Earth-Biogenome-Project-pilot/issues/81",
    quote="slurmstepd: error: Detected 1959 oom_kill events in StepId=45226719.batch. Some of the step tasks have been "
    "OOM Killed.",
    needles=("oom-kill", "oom_kill", "out of memory"),
)  # fmt: skip

DATALOADER_WORKER_KILLED = Signature(
    code="LP071", title="a DataLoader worker was killed (a bus error: shared memory)",
    category="dataloader_workers", level="category",
    pattern=r"DataLoader worker \(pid (?P<pid>\d+)\) is killed by signal: (?P<signal>[\w ]{1,40})\.|"
    r"Unexpected bus error encountered in worker",
    cause="a DataLoader worker process was killed ({signal}): a bus error most often means /dev/shm is too small for "
    "the batches the workers hand over (docker's default is 64 MiB); it can also be a corrupt data file or the host "
    "running out of memory",
    fix="docker run --shm-size=16g (or --ipc=host); or fewer num_workers / a smaller batch; df -h /dev/shm shows "
    "its size",
    source="https://github.com/PaddlePaddle/Paddle/issues/24708",
    quote="RuntimeError: DataLoader worker (pid 3002) is killed by signal: Bus error. It is possible that dataloader's "
    "workers are out of shared memory. Please try to raise your shared memory limit.",
    needles=("dataloader worker", "bus error encountered in worker"),
)  # fmt: skip

LOSS_SCALE_MINIMUM = Signature(
    code="LP072", title="fp16 loss scaling gave up: the gradients overflow at every scale",
    category="numerics",
    pattern=r"Current loss scale already at minimum",
    cause="fp16 mixed precision skipped steps until its loss scale reached the minimum: the gradients (or the loss) "
    "are inf/NaN at every scale, usually a model trained in bf16 now run in fp16, or a learning rate that diverges",
    fix="precision='bf16-mixed' (on GPUs that have it), or a lower learning rate; check the loss for NaN before the "
    "scale collapses",
    source="https://github.com/ymcui/Chinese-LLaMA-Alpaca/issues/534",
    quote="Exception: Current loss scale already at minimum - cannot decrease scale anymore. Exiting run.",
    needles=("loss scale already at minimum",),
)  # fmt: skip
