"""The failure signatures: one declaration each, in the order they are tried (the most specific first).

Every signature quotes the error text of the public thread it comes from (or of the CPU reproduction that produced
it); the signature tests match each quote and check the category. Codes LP040-LP089.
"""

from __future__ import annotations

import re

from lightning_presets.failures.model import Signature, words

# --- NCCL ------------------------------------------------------------------------------------------------------

NCCL_SYSTEM_ERROR = Signature(
    code="LP040", title="NCCL failed a system call: usually the network interface it picked",
    category="nccl_network",
    pattern=r"NCCL error[^\n]{0,400}unhandled system error|ncclSystemError",
    cause="NCCL failed a system call while connecting the ranks (`unhandled system error`): most often it picked a "
    "network interface the other nodes cannot reach (a docker bridge, a second NIC), or a firewall blocks it",
    fix="NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=<the interface the nodes share, e.g. eth0> torchrun ...",
    probe="nccl_interfaces",
    source="https://github.com/NVIDIA/nccl/issues/286",
    quote="RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:410, unhandled system error, "
    "NCCL version 2.4.8",
    needles=("nccl error", "ncclsystemerror"),
    level="category",
)  # fmt: skip

NCCL_SHARED_MEMORY = Signature(
    code="LP041", title="NCCL could not create its shared-memory segment in /dev/shm",
    category="nccl_shm",
    pattern=r"(?:Error while (?:creating|attaching to) shared memory segment|failed to extend) (?:/dev/shm/)?nccl-"
    r"\S{0,100}(?:[^\n]{0,200}error: (?P<error>[^(\n]{0,199}[^(\s])[ \t]{0,20}(?:\(|$))?|"
    r"NCCL WARN Call to posix_fallocate failed ?: (?P<error_b>[^\n]{0,199}\S)[ \t]{0,20}$",
    cause="NCCL could not create its shared-memory segment in /dev/shm ({error}): the container's /dev/shm is too "
    "small (docker's default is 64 MiB) or not writable",
    fix="docker run --shm-size=16g (or --ipc=host); or NCCL_SHM_DISABLE=1 to skip shared memory (slower)",
    probe="shared_memory",
    supersedes=(NCCL_SYSTEM_ERROR,),
    source="https://github.com/pytorch/ci-infra/pull/490",
    quote="misc/shmutils.cc:132 NCCL WARN Error while creating shared memory segment /dev/shm/nccl-WU88OE (size "
    "9637888), error: No space left on device (28)",
    needles=("shared memory segment", "failed to extend", "posix_fallocate"),
)  # fmt: skip

NCCL_DUPLICATE_GPU = Signature(
    code="LP042", title="two ranks on one GPU: NCCL refuses a duplicate device",
    category="device_mapping",
    pattern=r"Duplicate GPU detected ?: rank (?P<rank>\d+) and rank (?P<other>\d+) both on CUDA device (?P<bus>\w+)",
    cause="ranks {rank} and {other} both use the GPU on bus {bus}: each process must select its own device (its "
    "LOCAL_RANK), and CUDA_VISIBLE_DEVICES must show each process the GPUs it is meant to use",
    fix="torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before init_process_group (Lightning does it: do not "
    "pin a device yourself), and no CUDA_VISIBLE_DEVICES that hides GPUs from the ranks",
    supersedes=(NCCL_SYSTEM_ERROR,),
    source="https://github.com/NVIDIA/Megatron-LM/issues/661",
    quote="ncclInvalidUsage: This usually reflects invalid usage of NCCL library.\nLast error:\nDuplicate GPU "
    "detected : rank 3 and rank 0 both on CUDA device f000",
    needles=("duplicate gpu detected",),
)  # fmt: skip

NCCL_REMOTE_ERROR = Signature(
    code="LP043", title="NCCL lost a peer: a remote process exited or the network failed",
    category="nccl_network", role="consequence",
    pattern=r"remote process exited or there was a network error|ncclRemoteError",
    cause="NCCL lost its connection to another rank: that rank exited (look for its own error first) or the "
    "network between the nodes failed (InfiniBand or Ethernet errors)",
    fix="find the rank that failed first (`lightning-presets explain` on every rank's log); if none did, check the "
    "links: NCCL_DEBUG=INFO, ibstat, and NCCL_IB_DISABLE=1 to try TCP",
    supersedes=(NCCL_SYSTEM_ERROR,),
    source="https://github.com/NVIDIA/nccl/issues/2076",
    quote="torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/NCCLUtils.hpp:268, "
    "remote process exited or there was a network error, NCCL version 2.21.5\nncclRemoteError: A call failed "
    "possibly due to a network error or a remote process exiting prematurely.",
    needles=("remote process exited", "ncclremoteerror"),
    level="category",
)  # fmt: skip

NCCL_INTERNAL_ERROR = Signature(
    code="LP066", title="NCCL failed while connecting the ranks with an internal error: usually the network setup",
    category="nccl_network",
    pattern=r"ncclInternalError|NCCL error[^\n]{0,400}internal error|NCCL WARN (?:Net|NET/\w{1,40}|Proxy)\b"
    r"[^\n]{0,400}(?:Connection closed|failed)|NCCL WARN Could not find NET|\[\d+\] include/socket\.h:\d+ "
    r"(?:NCCL )?WARN (?:Call to connect "
    r"failed|Connection closed by remote peer)",
    cause="NCCL hit an internal error while it connected the ranks (`ncclInternalError`, a socket connect that failed "
    "or timed out, a socket or proxy connection closed): most often the network setup, not NCCL: an interface the "
    "nodes cannot reach, IPv6 where the peers use IPv4, an HTTP proxy in the environment, or a NET plugin that finds "
    "no usable NIC",
    fix="NCCL_DEBUG=INFO NCCL_SOCKET_IFNAME=<the interface the nodes share> torchrun ...; unset http_proxy/"
    "https_proxy for the job; try NCCL_IB_DISABLE=1 to rule out InfiniBand",
    probe="nccl_interfaces",
    supersedes=(NCCL_SYSTEM_ERROR,),
    source="https://github.com/NVIDIA/nccl/issues/833",
    quote="ncclInternalError: Internal check failed. This is either a bug in NCCL or due to memory corruption",
    needles=("ncclinternalerror", "nccl error", "nccl warn", "include/socket.h"),
    level="category",
)  # fmt: skip

NCCL_WATCHDOG_TIMEOUT = Signature(
    code="LP044", title="a NCCL collective timed out: a rank never reached it",
    category="collective_desync", role="consequence",
    pattern=r"Watchdog caught collective operation timeout: WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)"
    r"[^\n]{0,400}\) ran for (?P<ms>\d+) milliseconds",
    cause="the {op} collective number {seq} waited {ms} ms for a rank that never joined it: that rank failed, hung, "
    "or took another code path (a rank-dependent branch, uneven data)",
    fix="look for the first failure on the other ranks; if there is none, TORCH_DISTRIBUTED_DEBUG=DETAIL and "
    "TORCH_NCCL_DUMP_ON_TIMEOUT=1 show which rank called what",
    source="https://github.com/NVIDIA/Megatron-LM/issues/1207",
    quote="Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
    "Timeout(ms)=600000) ran for 600013 milliseconds before timing out.",
    needles=("watchdog caught collective operation timeout",),
    level="category",
)  # fmt: skip

# --- gloo ------------------------------------------------------------------------------------------------------

GLOO_FULL_MESH = Signature(
    code="LP045", title="gloo could not connect the ranks: usually the network interface",
    category="gloo_network",
    pattern=r"Gloo connectFullMesh failed|transport/tcp/pair\.cc:\d+\] connect \[[^\]]*\]:\d+: Connection refused",
    cause="gloo could not open connections between the ranks: it resolved this host to an address the others "
    "cannot reach (127.0.1.1 from /etc/hosts, a docker bridge, a second NIC)",
    fix="GLOO_SOCKET_IFNAME=<the interface the nodes share, e.g. eth0> (and NCCL_SOCKET_IFNAME for NCCL)",
    probe="gloo_interfaces",
    source="https://github.com/vllm-project/vllm/issues/5094",
    quote="RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no "
    "error",
    needles=("gloo connectfullmesh failed", "transport/tcp/pair.cc"),
)  # fmt: skip

GLOO_TIMEOUT = Signature(
    code="LP046", title="a gloo collective timed out waiting for a rank",
    category="collective_desync", role="consequence",
    pattern=r"Timed out waiting (?P<ms>\d+)ms for (?P<op>send|recv) operation to complete",
    cause="a gloo collective waited {ms} ms for a rank that never sent its part: that rank failed or hung first, or "
    "took another code path",
    fix="look for the first failure on the other ranks; the timeout itself is `timeout=` of init_process_group "
    "(Lightning: the strategy's `timeout`)",
    source="CPU reproduction: a run whose rank 1 raises, in the explain tests",
    quote="RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out "
    "waiting 3000ms for recv operation to complete",
    needles=("timed out waiting",),
    level="category",
)  # fmt: skip

GLOO_PEER_CLOSED = Signature(
    code="LP047", title="a gloo peer closed its connection: another rank crashed",
    category="collective_desync", role="consequence",
    pattern=r"gloo/transport/tcp/pair\.cc:\d+\] (?:Connection closed by peer|Connection reset by peer|Read error)",
    cause="another rank closed its connection in the middle of a collective: it crashed or exited first",
    fix="read the first failure (the other rank's error) and fix that",
    source="CPU reproduction: a run whose rank 1 exits at once, in the explain tests",
    quote="RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by "
    "peer [127.0.0.1]:5277. This is typically caused by a remote worker crashing.",
    needles=("gloo/transport/tcp/pair.cc",),
    level="category",
)  # fmt: skip

# --- rendezvous ------------------------------------------------------------------------------------------------

MASTER_VARIABLE_MISSING = Signature(
    code="LP048", title="the env:// rendezvous needs a variable that is not set",
    category="rendezvous_env",
    pattern=r"environment variable (?P<variable>MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK) expected, but "
    r"not set|raise _env_error\(\"(?P<variable_b>MASTER_ADDR|MASTER_PORT|RANK|WORLD_SIZE|LOCAL_RANK)\"\)",
    cause="init_process_group used the env:// rendezvous, but {variable} is not set: the script was started with "
    "plain `python` instead of a launcher, or the launcher's variables were not passed on",
    fix="torchrun --nproc-per-node N script.py (or srun under SLURM; or export MASTER_ADDR=127.0.0.1 "
    "MASTER_PORT=29500 RANK WORLD_SIZE yourself)",
    source="https://github.com/pytorch/pytorch/issues/39832",
    quote="ValueError: Error initializing torch.distributed using env:// rendezvous: environment variable MASTER_ADDR "
    "expected, but not set",
    needles=("environment variable", "_env_error("),
)  # fmt: skip

ADDRESS_IN_USE = Signature(
    code="LP049", title="the rendezvous port is already taken",
    category="rendezvous_port",
    pattern=r"(?:failed to (?:bind|listen) (?:to|on) \S{0,200}:(?P<port>\d+) \(errno: 98|"
    r"port: (?P<port_b>\d+),[^\n]{0,400}EADDRINUSE|EADDRINUSE|errno: 98 - Address already in use|"
    r"RuntimeError: Address already in use)",
    cause="the rendezvous store could not listen on port {port}: another job (or a previous run still exiting) "
    "holds it; 29500 is everyone's default",
    fix="torchrun --master-port $((29500 + RANDOM % 1000)) ... (or --rdzv-endpoint localhost:0 for one node; "
    "MASTER_PORT=... under Lightning/SLURM)",
    source="https://github.com/meta-pytorch/torchtune/issues/392",
    quote="torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. "
    "The server socket has failed to bind to [::]:29500 (errno: 98 - Address already in use). The server socket has "
    "failed to bind to 0.0.0.0:29500 (errno: 98 - Address already in use).",
    needles=("errno: 98", "eaddrinuse", "address already in use"),
)  # fmt: skip

SLURM_TASKS_MISMATCH = Signature(
    code="LP050", title="Lightning's devices/num_nodes differ from the SLURM allocation",
    category="rank_world_mismatch",
    pattern=r"You set `(?P<argument>devices|num_nodes)=(?P<value>\d+)` in Lightning, but the number of "
    r"(?:tasks per node|nodes) configured in SLURM `(?P<slurm>--[\w-]+=\d+)` does not match",
    cause="the Trainer/Fabric asks for {argument}={value}, but SLURM started the job with {slurm}: Lightning refuses "
    "a world size that differs from the processes SLURM launched",
    fix="make them equal: #SBATCH --ntasks-per-node=<devices> --nodes=<num_nodes> (one task per GPU), or the same "
    "numbers in the Trainer",
    source="CPU reproduction: SLURMEnvironment.validate_settings raises it, in the signature tests; "
    "thread: https://github.com/Lightning-AI/pytorch-lightning/issues/20391",
    quote="ValueError: You set `devices=2` in Lightning, but the number of tasks per node configured in SLURM "
    "`--ntasks-per-node=1` does not match. HINT: Set `devices=1`.",
    needles=("in lightning, but the number of",),
)  # fmt: skip

SLURM_TASKS_WITHOUT_LAYOUT = Signature(
    code="LP068", title="a SLURM job that asks for --ntasks without --ntasks-per-node",
    category="rank_world_mismatch",
    pattern=r"You set `--ntasks=(?P<ntasks>\d+)` in your SLURM bash script, but this variable is not supported",
    cause="the job asked SLURM for --ntasks={ntasks} and no --ntasks-per-node, which Lightning's SLURM environment "
    "refuses when the Trainer/Fabric is built (with --ntasks alone SLURM may place more tasks on a node than it has "
    "devices); its hint, --ntasks-per-node={ntasks}, is right for one node only",
    fix="#SBATCH --nodes=<num_nodes> --ntasks-per-node=<devices> (one task per device on each node, the Trainer's "
    "devices and num_nodes), in place of --ntasks",
    source="CPU reproduction: SLURMEnvironment() raises it under SLURM_NTASKS=4 without SLURM_NTASKS_PER_NODE, in the "
    "signature tests",
    quote="RuntimeError: You set `--ntasks=4` in your SLURM bash script, but this variable is not supported. HINT: "
    "Use `--ntasks-per-node=4` instead.",
    needles=("in your slurm bash script",),
)  # fmt: skip

NO_PROCESS_GROUP = Signature(
    code="LP051", title="a collective before the process group exists",
    category="process_group_missing",
    pattern=words("Default process group has not been initialized, please make sure to call init_process_group")
    + "|" + words("Default process group is not initialized"),
    cause="torch.distributed was used before any process group existed: code called outside the Trainer/Fabric's "
    "run (before `fit`/`fabric.launch()`, at import, in a single-process run), or SyncBatchNorm without DDP",
    fix="move the collective into the LightningModule's hooks (or after `fabric.launch()`), or guard it with "
    "`if torch.distributed.is_initialized():`",
    source="https://github.com/Lightning-AI/pytorch-lightning/issues/20690",
    quote="ValueError: Default process group has not been initialized, please make sure to call init_process_group.",
    needles=("process", "initialized"),
)  # fmt: skip

# --- devices ---------------------------------------------------------------------------------------------------

INVALID_DEVICE_ORDINAL = Signature(
    code="LP052", title="a rank selected a GPU that is not visible to it",
    category="device_mapping",
    pattern=r"invalid device ordinal",
    cause="a process selected a GPU index that does not exist for it: more processes per node than visible GPUs "
    "(`--nproc-per-node`, `devices=`), or CUDA_VISIBLE_DEVICES hides some",
    fix="torchrun --nproc-per-node $(nvidia-smi -L | wc -l) ... (or devices= at most the visible GPUs; check "
    "CUDA_VISIBLE_DEVICES)",
    source="https://github.com/tatsu-lab/stanford_alpaca/issues/67",
    quote="RuntimeError: CUDA error: invalid device ordinal\nCUDA kernel errors might be asynchronously reported at "
    "some other API call,so the stacktrace below might be incorrect.",
    needles=("invalid device ordinal",),
)  # fmt: skip

REQUESTED_GPUS_MISSING = Signature(
    code="LP053", title="Lightning was asked for more GPUs than the process sees",
    category="rank_world_mismatch",
    pattern=r"You requested (?:gpu|GPUs): \[(?P<requested>[\d, ]+)\](?:\s|\\n)*"
    r"But your machine only has: \[(?P<has>[\d, ]*)\]",
    cause="the process sees GPUs [{has}] but was asked for [{requested}]: the scheduler gives each task its own GPUs "
    "(SLURM --gpus-per-task, CUDA_VISIBLE_DEVICES) while Lightning expects to see the whole node",
    fix="#SBATCH --gres=gpu:N --ntasks-per-node=N (not --gpus-per-task), or devices= the number of GPUs one process "
    "sees",
    source="https://github.com/Lightning-AI/pytorch-lightning/issues/16828",
    quote="MisconfigurationException('You requested gpu: [0, 1, 2, 3, 4, 5, 6, 7]\\n But your machine only has: [0]",
    needles=("you requested",),
)  # fmt: skip

FORK_AFTER_CUDA = Signature(
    code="LP054", title="CUDA used in a forked process",
    category="fork_cuda",
    pattern=words("Cannot re-initialize CUDA in forked subprocess"),
    cause="a process started with fork (strategy='ddp_fork'/'ddp_notebook', or DataLoader workers) touched CUDA after "
    "the parent had already initialised it",
    fix="strategy='ddp' (or 'ddp_spawn') instead of a fork strategy; keep CUDA out of the parent before fit (no "
    "`.cuda()` or `torch.cuda.*` calls at import), and no CUDA tensors in Dataset.__getitem__",
    source="https://github.com/Lightning-AI/pytorch-lightning/issues/7088",
    quote="RuntimeError: Cannot re-initialize CUDA in forked subprocess. To use CUDA with multiprocessing, you must "
    "use the 'spawn' start method",
    needles=("re-initialize",),
)  # fmt: skip

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

# --- checkpoints, builds and versions --------------------------------------------------------------------------

STATE_DICT_MISMATCH = Signature(
    code="LP061", title="the checkpoint's state dict does not fit the model",
    category="checkpoint",
    pattern=r"Error\(s\) in loading state_dict for(?: (?P<model>\w+)|[ \t]*$)|Size mismatch between saved "
    r"(?P<saved>torch\.Size\(\[[\d, ]{0,100}\]\)) and current: (?P<current>torch\.Size\(\[[\d, ]{0,100}\]\))",
    cause="the checkpoint's weights do not fit {model}: other shapes or key names (another model configuration, a "
    "wrapper prefix such as `module.`/`_forward_module.`, or a sharded checkpoint read as a full one)",
    fix="load it into the model it was saved from (same config), strip the prefix from the keys, or "
    "load_state_dict(..., strict=False) only when missing keys are expected",
    source="https://github.com/deepspeedai/DeepSpeed/issues/5570",
    quote="RuntimeError: Error(s) in loading state_dict for Qwen2ForCausalLM:\n        size mismatch for "
    "model.layers.21.self_attn.v_proj.bias: copying a param with shape torch.Size([1024]) from checkpoint, the shape "
    "in current model is torch.Size([4096]).",
    needles=("error(s) in loading state_dict", "size mismatch between saved"),
)  # fmt: skip

EXTENSION_ABI = Signature(
    code="LP062", title="a compiled extension was built against another torch",
    category="import_abi",
    pattern=r"undefined symbol: (?P<symbol>_ZN(?:K?\d+(?:torch|c10|at|caffe2|c10d)\w*))",
    cause="a compiled extension refers to a torch symbol ({symbol}) that the installed torch does not have: it was "
    "built against another torch release (or the wheel is for another CUDA)",
    fix="pip install --force-reinstall --no-cache-dir --no-binary :all: <the extension> (rebuild it against this "
    "torch), or install the wheel built for this torch and CUDA",
    probe="extension_build",
    source="https://github.com/rusty1s/pytorch_scatter/issues/133",
    quote="OSError: /home/unreal/miniconda3/envs/pytorch/lib/python3.6/site-packages/torch_sparse/_version.so: "
    "undefined symbol: _ZN5torch3jit17parseSchemaOrNameERKSs",
    needles=("undefined symbol",),
)  # fmt: skip

CUDA_HOME_MISSING = Signature(
    code="LP063", title="an optional dependency needs the CUDA toolkit to build its ops",
    category="optional_dep_build",
    pattern=words("CUDA_HOME does not exist, unable to compile CUDA op(s)"),
    cause="DeepSpeed (or another extension) compiles its CUDA ops on first use and found no CUDA toolkit (nvcc): "
    "the driver alone cannot build them",
    fix="export CUDA_HOME=/usr/local/cuda (a toolkit matching torch.version.cuda; `module load cuda` on a cluster), "
    "or install prebuilt ops: DS_BUILD_OPS=1 pip install deepspeed on a machine with the toolkit",
    source="https://github.com/deepspeedai/DeepSpeed/issues/2772",
    quote="deepspeed.ops.op_builder.builder.MissingCUDAException: CUDA_HOME does not exist, unable to compile CUDA "
    "op(s)",
    needles=("cuda_home",),
)  # fmt: skip

LIGHTNING_PACKAGES_MIXED = Signature(
    code="LP064", title="the model and the Trainer come from different Lightning packages",
    category="version_skew",
    pattern=r"`model` must be a `LightningModule` or `torch\._dynamo\.OptimizedModule`, got `(?P<model>[^`\n]{1,200})`",
    cause="the Trainer refused {model}: the model subclasses one Lightning package (`pytorch_lightning`) and the "
    "Trainer comes from the other (`lightning.pytorch`), or two Lightning versions are installed",
    fix="import both from one package: `import lightning.pytorch as pl` everywhere (or `pytorch_lightning` "
    "everywhere), and pip install one version of each",
    source="https://github.com/Lightning-AI/pytorch-lightning/issues/19252",
    quote="TypeError: `model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, got `LightningModule`",
    needles=("must be a `lightningmodule`",),
)  # fmt: skip

NO_KERNEL_IMAGE = Signature(
    code="LP065", title="the torch build has no kernels for this GPU",
    category="accelerator_limit",
    pattern=r"no kernel image is available for execution on the device|with CUDA capability (?P<arch>sm_\d+) is not "
    r"compatible with the current PyTorch installation",
    cause="the installed torch was not compiled for this GPU's architecture {arch} (a wheel for older or newer GPUs "
    "only)",
    fix="pip install torch --index-url https://download.pytorch.org/whl/cu<version> with a CUDA build that lists "
    "this GPU's sm_XX (python -c 'import torch; print(torch.cuda.get_arch_list())')",
    source="https://github.com/PrateekMunjal/TorchAL/issues/4",
    quote="NVIDIA A100-PCIE-40GB with CUDA capability sm_80 is not compatible with the current PyTorch installation.",
    flags=re.IGNORECASE,
    needles=("no kernel image", "cuda capability"),
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

DRIVER_TOO_OLD = Signature(
    code="LP073", title="the NVIDIA driver is older than the CUDA that torch was built with",
    category="driver_version",
    pattern=r"The NVIDIA driver on your system is too old \(found version (?P<found>\d+)\)|CUDA driver version is "
    r"insufficient for CUDA runtime version",
    cause="the installed NVIDIA driver (version {found}) is older than the CUDA runtime this torch build needs",
    fix="pip install torch --index-url https://download.pytorch.org/whl/cu<a CUDA the driver supports> (nvidia-smi "
    "shows the highest), or update the driver",
    source="https://github.com/daniilidis-group/neural_renderer/issues/121",
    quote="RuntimeError: The NVIDIA driver on your system is too old (found version 10010). Please update your GPU "
    "driver by downloading and installing a new version from the URL: http://www.nvidia.com/Download/index.aspx",
    needles=("driver on your system is too old", "driver version is insufficient"),
)  # fmt: skip

DEVICE_BUSY = Signature(
    code="LP074", title="the GPU is busy or unavailable (exclusive-process mode, or another job holds it)",
    category="device_busy", level="category",
    pattern=r"CUDA-capable device\(s\) is/are busy or unavailable|all CUDA-capable devices are busy or unavailable",
    flags=re.IGNORECASE,
    cause="CUDA could not open the GPU: it is in exclusive-process compute mode and another process holds it (a "
    "second rank on the same GPU, a leftover process), or the device is unavailable (a vGPU or a GPU in a bad state)",
    fix="nvidia-smi --query-gpu=compute_mode --format=csv and nvidia-smi (processes on it); one rank per GPU "
    "(devices= at most the GPUs, each rank its LOCAL_RANK); kill leftover processes",
    source="https://github.com/pytorch/pytorch/issues/3871",
    quote="THCudaCheck FAIL file=/opt/conda/conda-bld/pytorch_1503970438496/work/torch/lib/THC/generic/THCStorage.cu "
    "line=66 error=46 : all CUDA-capable devices are busy or unavailable",
    needles=("busy or unavailable",),
)  # fmt: skip

# --- what no signature knows -----------------------------------------------------------------------------------

UNKNOWN_EXCEPTION = Signature(
    code="LP089", title="a rank raised an exception no signature knows",
    category="unknown",
    pattern=r"(?!x)x",  # never matches text: explain reports each unrecognised traceback's exception with this code
    cause="an error no signature knows: {exception}",
    fix="read that rank's traceback: it is the failure to fix; the other ranks' errors follow from it",
    source="CPU reproduction: a run whose rank 1 raises, in the explain tests",
    quote="ValueError: the batch of rank 1 has 0 samples",
    fails="lightning-presets explain run.log   # run.log: a traceback ending in ValueError: the batch of rank 1 has 0 "
    "samples",
    fixed="lightning-presets explain run.log   # run.log: the run's normal output, no traceback",
)  # fmt: skip

SIGNATURES: tuple[Signature, ...] = (
    NCCL_SHARED_MEMORY,
    NCCL_DUPLICATE_GPU,
    NCCL_SYSTEM_ERROR,
    NCCL_REMOTE_ERROR,
    NCCL_INTERNAL_ERROR,
    NCCL_WATCHDOG_TIMEOUT,
    GLOO_FULL_MESH,
    GLOO_TIMEOUT,
    GLOO_PEER_CLOSED,
    MASTER_VARIABLE_MISSING,
    ADDRESS_IN_USE,
    SLURM_TASKS_MISMATCH,
    SLURM_TASKS_WITHOUT_LAYOUT,
    NO_PROCESS_GROUP,
    INVALID_DEVICE_ORDINAL,
    REQUESTED_GPUS_MISSING,
    FORK_AFTER_CUDA,
    DDP_UNUSED_PARAMETERS,
    FSDP_MIXED_DTYPES,
    FSDP_MIXED_REQUIRES_GRAD,
    DEEPSPEED_BATCH_SIZE,
    DTENSOR_MIXED,
    NCCL_CUDA_OUT_OF_MEMORY,
    CUDA_OUT_OF_MEMORY,
    SLURM_OOM_KILL,
    HOST_OUT_OF_MEMORY,
    STATE_DICT_MISMATCH,
    EXTENSION_ABI,
    CUDA_HOME_MISSING,
    LIGHTNING_PACKAGES_MIXED,
    NO_KERNEL_IMAGE,
    DATALOADER_WORKER_KILLED,
    LOSS_SCALE_MINIMUM,
    DRIVER_TOO_OLD,
    DEVICE_BUSY,
)
"""Every signature a text is matched against, most specific first; :data:`UNKNOWN_EXCEPTION` is not among them (it
names a traceback that none of these matched)."""
