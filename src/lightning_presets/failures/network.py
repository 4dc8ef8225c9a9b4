"""Failure signatures of the ranks reaching each other: NCCL, gloo and the rendezvous (the launcher, SLURM, the
process group). Part of :data:`.signatures.SIGNATURES`, which gives the order they are tried in."""

from __future__ import annotations

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
