"""Rules every strategy preset gets about how the job is launched: what Lightning's launcher checks only at ``fit``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from lightning_presets.core.codes import Setting
from lightning_presets.core.context import Context
from lightning_presets.core.rules import Problem, Rule, rule


@rule(
    "LP095", "error", "construction", "a launcher environment that refuses the devices and nodes",
    fails='Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=8, num_nodes=2)   # under SLURM with '
    "--ntasks-per-node=4",
    fixed='Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=4, num_nodes=2)   # under SLURM with '
    "--ntasks-per-node=4",
    evidence="runtime: SLURMEnvironment/TorchElasticEnvironment.validate_settings raise ValueError when `fit` launches",
    setting=Setting(gpus=4, nodes=2, cluster="slurm"),  # SLURM's variables for 4 tasks on each of 2 nodes
)  # fmt: skip
def environment_takes_the_job(ctx: Context) -> Problem | None:
    """The environment's own ``validate_settings`` ran when the snapshot was taken (``Context.environment_refusal``)."""
    if ctx.environment_refusal is None:
        return None
    return Problem(
        f"{ctx.call('devices', 'num_nodes')}: the {ctx.cluster_environment} Lightning selected refuses the job: "
        f"{ctx.environment_refusal}; once `fit` starts, DDP's launcher raises this on every rank, and FSDP and "
        "ModelParallelStrategy, which never ask the environment, run with the launcher's processes instead of "
        f"{ctx.world_arithmetic} (ModelParallelStrategy's device mesh then fails)",
        "make devices and num_nodes match what the launcher starts (its tasks per node and nodes), or launch with "
        "the matching counts",
    )


# --- the launch arithmetic, shared by ``check``'s cluster rules and construction ------------------------------------
# Pure functions over the variables the job's processes see, the cluster environment Lightning selected (its class
# name) and the devices and nodes asked for. Each returns what is wrong (without the call it is about) and the fix.

LOOPBACK_ADDRESSES = ("localhost", "::1", "0.0.0.0")
BATCH_JOB_VARIABLES = {"SLURM_JOB_ID": "SLURM (srun)", "PBS_JOBID": "PBS (mpiexec or pbsdsh)",
                       "LSB_JOBID": "LSF (jsrun or blaunch)"}  # fmt: skip
"""A batch scheduler's job id and the launcher that starts the job's processes under it."""
_READS_MASTER_ADDR = ("LightningEnvironment", "TorchElasticEnvironment", "SLURMEnvironment", "KubeflowEnvironment")
"""The environments whose processes meet at ``MASTER_ADDR`` (LSF reads its rank file, MPI broadcasts rank 0's host)."""


@dataclass(frozen=True, slots=True)
class Launch:
    """The job as its launcher starts it: what every launch function reads."""

    env: Mapping[str, str]
    environment: str
    """The class name of the cluster environment Lightning selects."""
    devices: int | None
    num_nodes: int


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _loopback(address: str) -> bool:
    return address.strip().lower() in LOOPBACK_ADDRESSES or address.strip().startswith("127.")


def lightning_node_rank(launch: Launch) -> tuple[str, int] | None:
    """The variable and value of the node rank ``LightningEnvironment`` reads (``NODE_RANK``, else ``GROUP_RANK``)."""
    for name in ("NODE_RANK", "GROUP_RANK"):
        value = _int(launch.env.get(name))
        if value is not None:
            return name, value
    return None


def node_rank_outside(launch: Launch) -> Problem | None:
    """A node rank outside ``0 .. num_nodes - 1``: Lightning gives this node's processes global ranks
    ``node_rank × devices + local_rank``, outside the world of devices × num_nodes."""
    if launch.environment != "LightningEnvironment":
        return None
    found = lightning_node_rank(launch)
    if found is None or 0 <= found[1] < launch.num_nodes:
        return None
    name, rank = found
    world = None if launch.devices is None else launch.devices * launch.num_nodes
    first = None if launch.devices is None else rank * launch.devices
    return Problem(
        f"{name}={rank} is outside the {launch.num_nodes} node(s) (node ranks 0 to {launch.num_nodes - 1}); "
        + (f"this node's processes get global ranks from {first} in a world of {world}: " if first is not None else "")
        + "torch's process group refuses a rank outside the world (gloo: `rank < size`) while rank 0 waits for it",
        f"number the nodes from 0: {name}=0 on the first node up to {launch.num_nodes - 1} on the last, or set "
        f"num_nodes to the number of nodes",
    )


def _launcher_rank(launch: Launch) -> tuple[str, int, str, int] | None:
    """``(rank variable, rank, world variable, world)`` of an environment taking the global rank from the launcher."""
    if launch.environment in ("TorchElasticEnvironment", "KubeflowEnvironment"):
        rank, world = _int(launch.env.get("RANK")), _int(launch.env.get("WORLD_SIZE"))
        if rank is not None and world is not None:
            return "RANK", rank, "WORLD_SIZE", world
    return None


def rank_outside(launch: Launch) -> Problem | None:
    """A global or local rank outside the world: torchrun's (or Kubeflow's) ``RANK`` at or past ``WORLD_SIZE``, or the
    ``LOCAL_RANK`` of a process Lightning did not start at or past the devices per node."""
    found = _launcher_rank(launch)
    if found is not None:
        rank_name, rank, world_name, world = found
        if 0 <= rank < world:
            return None
        return Problem(
            f"{rank_name}={rank} is outside {world_name}={world} (ranks 0 to {world - 1}): the "
            f"{launch.environment} Lightning selected passes this rank to torch's process group, which refuses it "
            "(gloo: `rank < size`) while rank 0 waits for it",
            f"give each process a rank from 0 to {world - 1} ({world_name}={world} processes in all), or raise "
            f"{world_name} to the number of processes the launcher starts",
        )
    computed = lightning_rank(launch)
    if computed is None or launch.devices is None or node_rank_outside(launch) is not None:
        return None  # a node rank outside the nodes: node_rank_outside says so
    world = launch.devices * launch.num_nodes
    if 0 <= computed < world:
        return None
    return Problem(
        f"LOCAL_RANK={launch.env['LOCAL_RANK']} on node {_node_text(launch)}: Lightning's own environment gives this "
        f"process the global rank node_rank × devices + LOCAL_RANK = {computed}, outside the world of "
        f"devices={launch.devices} × num_nodes={launch.num_nodes} = {world}; torch's process group refuses it (gloo: "
        "`rank < size`) while rank 0 waits for it",
        f"start {launch.devices} process(es) per node (LOCAL_RANK 0 to {launch.devices - 1}), or set devices to the "
        "processes your launcher starts on each node",
    )


def _node_text(launch: Launch) -> str:
    found = lightning_node_rank(launch)
    return f"{found[0]}={found[1]}" if found else "rank 0 (no NODE_RANK)"


def loopback_main_address(launch: Launch) -> str | None:
    """The loopback ``MASTER_ADDR`` of a job across several nodes (the processes of the other nodes reach themselves,
    not node 0), or ``None``."""
    address = launch.env.get("MASTER_ADDR")
    if launch.num_nodes <= 1 or address is None or launch.environment not in _READS_MASTER_ADDR:
        return None
    return address if _loopback(address) else None


def launcher_world(launch: Launch) -> tuple[str, int] | None:
    """The world size a launcher Lightning does not check sets (``WORLD_SIZE`` for processes started outside Lightning
    in its own environment, and under Kubeflow), as ``(variable, size)``."""
    size = _int(launch.env.get("WORLD_SIZE"))
    if size is None:
        return None
    if launch.environment == "KubeflowEnvironment":
        return "WORLD_SIZE", size
    if launch.environment == "LightningEnvironment" and "LOCAL_RANK" in launch.env:
        return "WORLD_SIZE", size
    return None


def lightning_rank(launch: Launch) -> int | None:
    """The global rank Lightning gives a process it did not start in its own environment (node_rank × devices +
    local_rank), or ``None``."""
    local = _int(launch.env.get("LOCAL_RANK"))
    if launch.environment != "LightningEnvironment" or local is None or launch.devices is None:
        return None
    found = lightning_node_rank(launch)
    return (found[1] if found else 0) * launch.devices + local


def batch_job_without_launcher(launch: Launch) -> str | None:
    """The batch scheduler's job-id variable when a job across several nodes runs there in Lightning's own environment
    with no process started by a launcher and no node rank: the script ran once, on the first node, or ``None``."""
    if launch.environment != "LightningEnvironment" or launch.num_nodes <= 1:
        return None
    if any(name in launch.env for name in ("LOCAL_RANK", "NODE_RANK", "GROUP_RANK")):
        return None
    if launch.env.get("SLURM_JOB_NAME") in ("bash", "interactive"):
        return None  # SLURM's interactive job names: LP712 says why
    return next((name for name in BATCH_JOB_VARIABLES if name in launch.env), None)


def launch_problem(launch: Launch) -> Problem | None:
    """The first launch error of the job: a node rank or a rank outside it, or a batch job across nodes that no
    launcher started (what ``check`` reports as LP717, LP718 and LP728)."""
    problem = node_rank_outside(launch) or rank_outside(launch)
    if problem is not None:
        return problem
    variable = batch_job_without_launcher(launch)
    if variable is None:
        return None
    return Problem(
        f"{variable}={launch.env[variable]} is set, but no launcher started this process (no task variables, no "
        f"LOCAL_RANK or NODE_RANK): it runs on the first node only, as node 0, and waits for {launch.num_nodes - 1} "
        "other node(s) forever",
        f"start the script through {BATCH_JOB_VARIABLES[variable]} in the batch script (e.g. srun python train.py)",
    )


@rule(
    "LP096", "error", "construction", "launch variables that put a rank outside the job",
    fails='import os\nos.environ.update(NODE_RANK="2", LOCAL_RANK="0", MASTER_ADDR="10.0.0.1")  # numbered from 1\n'
    'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=1, num_nodes=2)',
    fixed='import os\nos.environ.update(NODE_RANK="1", LOCAL_RANK="0", MASTER_ADDR="10.0.0.1")  # the last node\n'
    'Trainer(strategy="ddp_static_graph", accelerator="cpu", devices=1, num_nodes=2)',
    evidence="runtime: fit: torch's gloo process group raises `rank < size`; a rank past WORLD_SIZE and a batch job "
    "without srun: the same file",
    setting=Setting(gpus=0),
)  # fmt: skip
def launch_arithmetic(ctx: Context) -> Problem | None:
    """``check``'s launch errors (LP717, LP718, LP728) on the variables this process was started with."""
    if ctx.cluster_environment == "none":
        return None
    problem = launch_problem(Launch(os.environ, ctx.cluster_environment, ctx.devices_per_node, ctx.num_nodes))
    if problem is None:
        return None
    return Problem(f"{ctx.call('devices', 'num_nodes')}: {problem.message}", problem.hint)


LAUNCH_RULES: tuple[Rule, ...] = (environment_takes_the_job, launch_arithmetic)
"""Run for every strategy preset, built-in or not (the guard head adds them)."""
