"""``check``'s launcher rules: the arithmetic of ranks, node ranks, tasks and devices under each launcher Lightning can
run under (torchrun, SLURM, MPI, Kubeflow, Ray, SkyPilot), and launchers nested in each other or missing. The
arithmetic itself is ``guards.launch_rules``' (the guards run it at construction too); these rules say it of the job
``check`` simulates."""

from __future__ import annotations

import importlib.util

from lightning_presets.core.rules import Problem, rule
from lightning_presets.guards import launch_rules as launch
from lightning_presets.tools.check.request import COMMAND as CHECK
from lightning_presets.tools.check.target import Target, _int


@rule(
    code="LP717", severity="error", stage="check", title="a node rank outside the nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --env MASTER_ADDR=10.0.0.1 "
    "--env NODE_RANK=2",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --env MASTER_ADDR=10.0.0.1 "
    "--env NODE_RANK=1",
    evidence="runtime: fit: torch's gloo process group raises `rank < size`",
)  # fmt: skip
def node_rank_outside(t: Target) -> Problem | None:
    return t.about(launch.node_rank_outside(t.launch), f"num_nodes={t.num_nodes}")


@rule(
    code="LP718", severity="error", stage="check", title="a rank outside the world the launcher sets",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic --env RANK=16",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic --env RANK=15",
    evidence="runtime: fit: torch's gloo process group raises `rank < size`",
)  # fmt: skip
def rank_outside(t: Target) -> Problem | None:
    return t.about(launch.rank_outside(t.launch), t.devices_part, f"num_nodes={t.num_nodes}")


@rule(
    code="LP719", severity="warning", stage="check", title="a loopback MASTER_ADDR for a job across several nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic "
    "--env MASTER_ADDR=127.0.0.1",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic "
    "--env MASTER_ADDR=10.0.0.1",
)  # fmt: skip
def loopback_main_address(t: Target) -> Problem | None:
    address = launch.loopback_main_address(t.launch)
    if address is None:
        return None
    return Problem(
        f"{t.call(f'num_nodes={t.num_nodes}')}: MASTER_ADDR={address!r} is this machine's own loopback address; "
        f"the processes of the other {t.num_nodes - 1} node(s) would look for rank 0 on themselves and wait until "
        "the rendezvous times out",
        "set MASTER_ADDR to the first node's host name or address, the same on every node (torchrun: "
        "--master-addr or --rdzv-endpoint)",
    )


@rule(
    code="LP725", severity="warning", stage="check", title="the launcher's WORLD_SIZE differs from devices × num_nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster ray --env WORLD_SIZE=8",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster ray",
)  # fmt: skip
def launcher_world_size(t: Target) -> Problem | None:
    found = launch.launcher_world(t.launch)
    world = t.world_size
    if found is None or world is None or found[1] == world:
        return None
    name, size = found
    if t.environment == "KubeflowEnvironment" and t.kubeflow:  # the operator's WORLD_SIZE: replicas × nprocPerNode
        nodes, per_node = _int(t.env.get("PET_NNODES")), _int(t.env.get("PET_NPROC_PER_NODE"))
        counts = (f" (PET_NNODES={nodes} × PET_NPROC_PER_NODE={per_node}: replicas × nprocPerNode)"
                  if nodes is not None and per_node is not None and nodes * per_node == size else "")  # fmt: skip
        return Problem(
            f"{t.call(t.devices_part, f'num_nodes={t.num_nodes}')}: the PyTorchJob's WORLD_SIZE={size}{counts}, but "
            f"devices={t.devices} × num_nodes={t.num_nodes} = {world}; KubeflowEnvironment takes the world and the "
            "ranks from the operator, one process per pod, but DDP, FSDP and DeepSpeed split the data among devices × "
            f"num_nodes = {world} (their DistributedSampler"
            + (
                f" refuses rank {world}: 'Invalid rank {world}, rank should be in the interval [0, {world - 1}]')"
                if size > world
                else ": part of every epoch is never read)"
            )
            + "; ModelParallelStrategy presets lay their mesh on the operator's world",
            f"set devices=1 and num_nodes={size} (the PyTorchJob's WORLD_SIZE), or run {t.num_nodes} replicas with "
            "nprocPerNode: 1 and devices=1 (KubeflowEnvironment starts one process per pod), or drop "
            f"KubeflowEnvironment and run torchrun in each pod with nprocPerNode: {t.devices} (Lightning then follows "
            "torchrun)",
        )
    reads = (
        "takes the world from WORLD_SIZE and ignores devices × num_nodes"
        if t.environment == "KubeflowEnvironment"
        else "builds a world of devices × num_nodes, which the launcher's processes do not fill (or overfill)"
    )
    return Problem(
        f"{t.call(t.devices_part, f'num_nodes={t.num_nodes}')}: the launcher set {name}={size}, but devices="
        f"{t.devices} × num_nodes={t.num_nodes} = {world}; {t.environment} {reads}, and nothing checks that they agree",
        f"start {world} processes ({t.devices} per node on {t.num_nodes} nodes), or set devices and num_nodes so "
        f"that their product is {size}",
    )


@rule(
    code="LP726", severity="warning", stage="check", title="Lightning's computed rank differs from the launcher's RANK",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 1 --num-nodes 2 --cluster ray --env WORLD_SIZE=4 "
    "--env NODE_RANK=1 --env LOCAL_RANK=0 --env RANK=2",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 2 --num-nodes 2 --cluster ray --env WORLD_SIZE=4 "
    "--env NODE_RANK=1 --env LOCAL_RANK=0 --env RANK=2",
)  # fmt: skip
def lightning_rank_differs(t: Target) -> Problem | None:
    computed = launch.lightning_rank(t.launch)
    given = t.differs("RANK", computed)
    if given is None:
        return None
    node = launch.lightning_node_rank(t.launch)
    node_text = f"{node[0]}={node[1]}" if node else "node rank 0"
    return Problem(
        f"{t.call(t.devices_part)}: the launcher gave this process RANK={given}, but Lightning's own "
        f"environment ignores RANK and computes {node_text} × devices={t.devices} + LOCAL_RANK="
        f"{t.env.get('LOCAL_RANK')} = {computed}; two processes can get the same rank and the job waits for the "
        "missing one",
        "set devices to the processes the launcher starts on each node (Ray: one per worker on the node), or pass "
        "the launcher's own cluster environment plugin, which takes RANK as it is",
    )


@rule(
    code="LP727", severity="warning", stage="check", title="torchrun started by another launcher",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic "
    "--env SLURM_NTASKS=16 --env SLURM_NTASKS_PER_NODE=8 --env SLURM_JOB_ID=4242",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic "
    "--env SLURM_NTASKS=2 --env SLURM_NTASKS_PER_NODE=1 --env SLURM_JOB_ID=4242",
)  # fmt: skip
def nested_launchers(t: Target) -> Problem | None:
    if not t.torchelastic:
        return None
    outer = [
        (name, launcher, _int(t.env.get(name)) or 0)
        for name, launcher in (("SLURM_NTASKS_PER_NODE", "srun"), ("OMPI_COMM_WORLD_LOCAL_SIZE", "mpiexec"))
    ]
    found = next((each for each in outer if each[2] > 1), None)
    if found is None:
        return None
    name, launcher, tasks = found
    per_torchrun = t.env.get("LOCAL_WORLD_SIZE", "?")
    return Problem(
        f"{t.call(t.devices_part)}: {launcher} starts {name}={tasks} tasks per node and each runs torchrun, "
        f"which starts LOCAL_WORLD_SIZE={per_torchrun} process(es) of its own; Lightning follows torchrun "
        f"(TorchElasticEnvironment is detected before {launcher}'s), so {tasks} torchrun agents per node compete "
        "for the same rendezvous and GPUs",
        f"run one torchrun per node ({launcher} with one task per node, e.g. srun --ntasks-per-node=1), or drop "
        f"torchrun and let {launcher} start the {t.devices} processes per node",
    )


@rule(
    code="LP728", severity="error", stage="check", title="a batch job across nodes started without its launcher",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --env SLURM_JOB_ID=4242 "
    "--env SLURM_NNODES=2",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster slurm",
    evidence="runtime: a hang: torch's rendezvous times out, 1/2 clients joined",
)  # fmt: skip
def batch_job_without_launcher(t: Target) -> Problem | None:
    variable = launch.batch_job_without_launcher(t.launch)
    if variable is None:
        return None
    launcher = launch.BATCH_JOB_VARIABLES[variable]
    return Problem(
        f"{t.call(f'num_nodes={t.num_nodes}')}: {variable}={t.env[variable]} is set, but no launcher started this "
        f"process (none of its task variables, no LOCAL_RANK or NODE_RANK): the batch script ran it once, on the "
        f"first node, where Lightning launches {t.devices or 'its'} process(es) as node 0 and waits for "
        f"{t.num_nodes - 1} other node(s) forever",
        f"start the script through {launcher} in the batch script (e.g. srun python train.py), one task per "
        "device on every node",
    )


@rule(
    code="LP729", severity="warning", stage="check", title="processes started by a launcher Lightning does not detect",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster mpi",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic",
)  # fmt: skip
def undetected_launcher(t: Target) -> Problem | None:
    if t.environment != "LightningEnvironment" or "LOCAL_RANK" in t.env:
        return None
    mpi = next((name for name in ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE") if (_int(t.env.get(name)) or 0) > 1), None)
    if mpi is not None:
        installed = importlib.util.find_spec("mpi4py") is not None
        return Problem(
            f"{t.call(t.devices_part, f'num_nodes={t.num_nodes}')}: mpiexec started {mpi}={t.env[mpi]} "
            "processes, but Lightning selected its own environment: "
            + ("mpi4py is not installed, so MPIEnvironment is never detected; "
               if not installed else "MPIEnvironment is detected only inside mpiexec's world; ")
            + f"without it every MPI rank launches {t.devices} process(es) of its own as node 0",
            "install mpi4py (Lightning then selects MPIEnvironment: ranks and nodes from MPI), or start one process "
            "per node and let Lightning launch the devices (mpiexec --npernode 1 with NODE_RANK and MASTER_ADDR set)",
        )  # fmt: skip
    world = _int(t.env.get("WORLD_SIZE"))
    if "KUBERNETES_PORT" in t.env and "RANK" in t.env and world is not None and world > 1:
        return Problem(
            f"{t.call(f'num_nodes={t.num_nodes}')}: a Kubeflow PyTorchJob pod (KUBERNETES_PORT, RANK="
            f"{t.env['RANK']}, WORLD_SIZE={world}), but Lightning never detects Kubeflow: in its own environment every "
            f"pod is node 0 and launches {t.devices} process(es) of its own",
            f"pass plugins=[KubeflowEnvironment()] (one process per pod: devices=1, num_nodes={world}), or launch "
            "torchrun in each pod (PyTorchJob's nprocPerNode)",
        )
    return None
