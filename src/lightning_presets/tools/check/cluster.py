"""Cluster-consistency rules of ``check``: the settings that make a multi-node job hang instead of fail.

Rules over a :class:`Target` (what the job asks for and the environment it will see), stage ``check``.
"""

from __future__ import annotations

from collections.abc import Callable

from lightning_presets.core.findings import Finding, Severity
from lightning_presets.core.namespaces import constructor
from lightning_presets.core.rules import Problem, Rule, rule, run_rules
from lightning_presets.guards import launch_rules as launch
from lightning_presets.tools.check.launchers import (
    batch_job_without_launcher,
    launcher_world_size,
    lightning_rank_differs,
    loopback_main_address,
    nested_launchers,
    node_rank_outside,
    rank_outside,
    undetected_launcher,
)
from lightning_presets.tools.check.request import COMMAND as CHECK
from lightning_presets.tools.check.target import Target

__all__ = [
    "CLUSTER_RULES",
    "ENVIRONMENT_RULES",
    "LAUNCH_ARITHMETIC_RULES",
    "REFUSAL_RULES",
    "SUPERSEDES",
    "Target",
    "cluster_findings",
]

_SINGLE_DEVICE_STRATEGIES = ("single_device", "single_xla", "single_tpu")


def _from_kubeflow(t: Target, *names: str) -> str:
    """`` (from Kubeflow's PET_NNODES=2 × PET_NPROC_PER_NODE=4)``: the operator's counts torchrun read in a Kubeflow
    pod, the ones that differ from devices and num_nodes named first; empty elsewhere."""
    if not t.kubeflow or not all(name in t.env for name in names):
        return ""
    given = " × ".join(f"{name}={t.env[name]}" for name in names)
    differs = t.kubeflow_disagrees()
    return f" (Kubeflow's {given}" + (f": {', '.join(differs)}" if differs else "") + ")"


def launcher_count(
    code: str, severity: Severity, title: str, *, environment: str, variable: str, expects: str,
    says: Callable[[Target, int], Problem], fails: str, fixed: str, evidence: str = "",
) -> Rule:  # fmt: skip
    """A ``check`` rule for a count the launcher sets (``variable``, read when Lightning selects ``environment``) that
    differs from what the job expects of it (the :class:`Target` attribute ``expects``: ``devices``, ``num_nodes`` or
    ``world_size``); ``says`` words the problem from the target and the launcher's number."""

    def check(t: Target) -> Problem | None:
        found = t.differs(variable, getattr(t, expects)) if t.environment == environment else None
        return None if found is None else says(t, found)

    return rule(code, severity, "check", title, fails=fails, fixed=fixed, evidence=evidence)(check)


slurm_tasks_per_node = launcher_count(
    "LP705", "error", "SLURM tasks per node differ from devices",
    environment="SLURMEnvironment", variable="SLURM_NTASKS_PER_NODE", expects="devices",
    says=lambda t, tasks: Problem(
        f"{t.call(t.devices_part)}: SLURM starts --ntasks-per-node={tasks} task(s) per node but each "
        f"process expects {t.devices} per node; the job would hang or fail when the processes meet",
        f"set devices={tasks}, or #SBATCH --ntasks-per-node={t.devices}",
    ),
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --cluster slurm --env SLURM_NTASKS_PER_NODE=4",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --cluster slurm --env SLURM_NTASKS_PER_NODE=4",
    evidence="runtime: fit: Lightning's SLURM check raises ValueError",
)  # fmt: skip

slurm_nodes = launcher_count(
    "LP706", "error", "SLURM node count differs from num_nodes",
    environment="SLURMEnvironment", variable="SLURM_NNODES", expects="num_nodes",
    says=lambda t, nodes: Problem(
        f"{t.call(f'num_nodes={t.num_nodes}')}: SLURM allocated --nodes={nodes}; the processes would wait for "
        f"{t.num_nodes} node(s) that never join" + (" (a hang)" if t.num_nodes > nodes else ""),
        f"set num_nodes={nodes}, or #SBATCH --nodes={t.num_nodes}",
    ),
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NNODES=2",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster slurm --env SLURM_NNODES=2",
    evidence="runtime: fit: Lightning's SLURM check raises ValueError",
)  # fmt: skip

slurm_tasks = launcher_count(
    "LP707", "error", "SLURM_NTASKS differs from devices × num_nodes",
    environment="SLURMEnvironment", variable="SLURM_NTASKS", expects="world_size",
    says=lambda t, tasks: Problem(
        f"{t.call(t.devices_part, f'num_nodes={t.num_nodes}')}: SLURM_NTASKS={tasks}, but devices="
        f"{t.devices} × num_nodes={t.num_nodes} = {t.world_size} processes are expected",
        f"request #SBATCH --nodes={t.num_nodes} --ntasks-per-node={t.devices} (= {t.world_size} tasks), or set "
        f"devices and num_nodes so that their product is {tasks}",
    ),
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NTASKS=8",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NTASKS=32",
    evidence="runtime: Lightning trains with SLURM's world of 1 and silently ignores devices × num_nodes = 2",
)  # fmt: skip

elastic_world_size = launcher_count(
    "LP708", "error", "torchelastic WORLD_SIZE differs from devices × num_nodes",
    environment="TorchElasticEnvironment", variable="WORLD_SIZE", expects="world_size",
    says=lambda t, size: Problem(
        f"{t.call(t.devices_part, f'num_nodes={t.num_nodes}')}: torchrun's WORLD_SIZE={size}"
        + _from_kubeflow(t, "PET_NNODES", "PET_NPROC_PER_NODE")
        + f", but devices={t.devices} × num_nodes={t.num_nodes} = {t.world_size}; ranks and data shards would not "
        "line up",
        (f"set {t.kubeflow_fix()}, or set devices and num_nodes so that their product is {size}" if t.kubeflow else
         f"launch with torchrun --nnodes={t.num_nodes} --nproc-per-node={t.devices}, or set devices and "
         f"num_nodes so that their product is {size}"),
    ),
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster torchelastic --env WORLD_SIZE=8",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster torchelastic",
    evidence="runtime: fit: Lightning raises ValueError",
)  # fmt: skip

elastic_local_world_size = launcher_count(
    "LP709", "warning", "torchelastic LOCAL_WORLD_SIZE differs from devices",
    environment="TorchElasticEnvironment", variable="LOCAL_WORLD_SIZE", expects="devices",
    says=lambda t, size: Problem(
        f"{t.call(t.devices_part)}: torchrun starts LOCAL_WORLD_SIZE={size} process(es) per node"
        + _from_kubeflow(t, "PET_NPROC_PER_NODE") + f", not {t.devices}",
        f"set devices={size}, or "
        + (f"set {t.kubeflow_fix()}" if t.kubeflow else f"launch with torchrun --nproc-per-node={t.devices}"),
    ),
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --cluster torchelastic --env LOCAL_WORLD_SIZE=4",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --cluster torchelastic --env LOCAL_WORLD_SIZE=4",
)  # fmt: skip

lsf_world_size = launcher_count(
    "LP714", "error", "LSF JSM_NAMESPACE_SIZE differs from devices × num_nodes",
    environment="LSFEnvironment", variable="JSM_NAMESPACE_SIZE", expects="world_size",
    says=lambda t, size: Problem(
        f"{t.call(t.devices_part, f'num_nodes={t.num_nodes}')}: jsrun starts JSM_NAMESPACE_SIZE={size} "
        f"task(s), but devices={t.devices} × num_nodes={t.num_nodes} = {t.world_size}",
        f"run jsrun with {t.world_size} tasks ({t.devices} per node), or set devices and num_nodes to match {size}",
    ),
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster lsf --env JSM_NAMESPACE_SIZE=8",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster lsf",
    evidence="runtime: Lightning trains with LSF's world of 1 and silently ignores devices × num_nodes = 2",
)  # fmt: skip


@rule(
    "LP734", "error", "check", "a SLURM job with --ntasks and no --ntasks-per-node",
    fails=f"{CHECK} --accelerator cuda --gpus 4 --devices 4 --num-nodes 2 --env SLURM_JOB_ID=4242 "
    "--env SLURM_NTASKS=8 --env SLURM_NNODES=2",
    fixed=f"{CHECK} --accelerator cuda --gpus 4 --devices 4 --num-nodes 2 --cluster slurm",
    evidence="runtime: Lightning's SLURMEnvironment raises RuntimeError while the Trainer/Fabric is built",
)  # fmt: skip
def slurm_tasks_without_tasks_per_node(t: Target) -> Problem | None:
    """Read from Lightning's own refusal (``Target.environment_refusal``): SLURM's environment, made from variables
    without ``SLURM_NTASKS_PER_NODE``, raised."""
    if t.environment != "SLURMEnvironment" or t.environment_refusal is None or "SLURM_NTASKS_PER_NODE" in t.env:
        return None
    tasks = t.env.get("SLURM_NTASKS", "?")
    per_node = t.devices if t.devices is not None else "<devices>"
    return Problem(
        f"{t.call(t.devices_part, f'num_nodes={t.num_nodes}')}: SLURM_NTASKS={tasks} and no SLURM_NTASKS_PER_NODE "
        f"(the job asked for --ntasks, not --ntasks-per-node): Lightning's SLURM environment refuses it while the "
        f"{constructor(t.kind)} is built, on every task (Lightning: {t.environment_refusal!r})",
        f"#SBATCH --nodes={t.num_nodes} --ntasks-per-node={per_node} in place of --ntasks={tasks}: one task per "
        f"device on each node (Lightning's hint, --ntasks-per-node={tasks}, holds for one node only)",
    )


@rule(
    code="LP710", severity="error", stage="check", title="more devices than GPUs visible",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --env CUDA_VISIBLE_DEVICES=0,1,2,3",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --env CUDA_VISIBLE_DEVICES=0,1,2,3",
    evidence="runtime: Lightning raises MisconfigurationException",
)  # fmt: skip
def devices_visible(t: Target) -> Problem | None:
    if t.accelerator not in ("cuda", "gpu"):
        return None
    visible = t.env.get("CUDA_VISIBLE_DEVICES")
    where = (
        f"CUDA_VISIBLE_DEVICES={visible!r} leaves {t.gpus_visible}"
        if visible is not None
        else (f"the node has {t.gpus_visible}")
    )
    if t.gpus_visible == 0:
        return Problem(
            f"{t.call(f'accelerator={t.accelerator!r}')}: no GPU is visible ({where} GPU(s))",
            "describe the target node with --gpus N (e.g. --gpus 8)"
            + (", and widen CUDA_VISIBLE_DEVICES" if visible is not None else ""),
        )
    if t.devices is None or t.devices <= t.gpus_visible:
        return None
    return Problem(
        f"{t.call(t.devices_part)}: {t.devices} GPU(s) per node requested, but {where} visible GPU(s)",
        f"set devices={t.gpus_visible} (or devices='auto')"
        + (f", or list {t.devices} GPUs in CUDA_VISIBLE_DEVICES" if visible is not None else ""),
    )


@rule(
    code="LP711", severity="error", stage="check", title="a strategy that cannot run in an interactive session",
    fails=f"{CHECK} --accelerator cpu --devices 2 --strategy ddp --interactive",
    fixed=f"{CHECK} --accelerator cpu --devices 2 --strategy ddp_notebook --interactive",
    evidence="runtime: Lightning raises MisconfigurationException",
)  # fmt: skip
def interactive_session(t: Target) -> Problem | None:
    if not t.interactive or t.interactive_compatible is not False:
        return None
    return Problem(
        f"{t.call(f'strategy={t.strategy!r}')}: this strategy starts its processes by re-running a script, "
        "which cannot happen from an interactive session (notebook, IPython)",
        "run the code as a script, or use strategy='ddp_notebook' (one node, fork) in the notebook",
    )


@rule(
    code="LP712", severity="error", stage="check", title="an interactive SLURM job across several nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm "
    "--env SLURM_JOB_NAME=interactive",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm",
    evidence="runtime: a hang: torch's rendezvous times out, 1/2 clients joined",
)  # fmt: skip
def slurm_interactive_nodes(t: Target) -> Problem | None:
    """Lightning ignores SLURM in an interactive allocation and takes its LightningEnvironment, which forms the job
    from MASTER_ADDR, MASTER_PORT and NODE_RANK: with all three set on each node (Lightning's documented manual
    multi-node launch) the nodes meet and train; without them each node starts as node 0 alone."""
    if not (t.slurm_interactive and "SLURM_NTASKS" in t.env and t.num_nodes > 1):
        return None
    if all(name in t.env for name in _MANUAL_LAUNCH):
        return None
    missing = [name for name in _MANUAL_LAUNCH if name not in t.env]
    return Problem(
        f"{t.call(f'num_nodes={t.num_nodes}')}: SLURM_JOB_NAME={t.env['SLURM_JOB_NAME']!r} makes Lightning ignore "
        f"SLURM, and without {', '.join(missing)} it launches on this node alone and waits for "
        f"{t.num_nodes - 1} other node(s) forever",
        "submit the job with sbatch/srun under another job name, or launch each node by hand with MASTER_ADDR, "
        "MASTER_PORT and NODE_RANK set (Lightning's manual multi-node launch), or use num_nodes=1",
    )


_MANUAL_LAUNCH = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK")
"""What Lightning's manual multi-node launch sets on each node (its LightningEnvironment reads them)."""


@rule(
    code="LP713", severity="warning", stage="check", title="several nodes without a cluster environment",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm",
)  # fmt: skip
def nodes_without_cluster(t: Target) -> Problem | None:
    if t.num_nodes <= 1 or t.slurm or t.torchelastic or t.lsf or t.slurm_interactive:
        return None
    if t.environment in ("KubeflowEnvironment", "MPIEnvironment"):  # ranks and nodes from the launcher
        return None
    if "MASTER_ADDR" in t.env and "NODE_RANK" in t.env:
        return None
    if batch_job_without_launcher.check(t) is not None or undetected_launcher.check(t) is not None:
        return None  # LP728/LP729 say which launcher is missing
    return Problem(
        f"{t.call(f'num_nodes={t.num_nodes}')}: no cluster environment (SLURM, torchrun, LSF) and no "
        "MASTER_ADDR/NODE_RANK: each node would start as node 0 and wait for the others forever",
        "simulate the launcher with --cluster (slurm, torchelastic, lsf, mpi, kubeflow, trainjob, skypilot, ray), or "
        "set MASTER_ADDR, MASTER_PORT and NODE_RANK on every node",
    )


@rule(
    code="LP716", severity="warning", stage="check", title="a single-device strategy asked for several devices",
    fails=f"{CHECK} --accelerator cpu --devices 2 --strategy single_device",
    fixed=f"{CHECK} --accelerator cpu --devices 1 --strategy single_device",
)  # fmt: skip
def single_device_strategy(t: Target) -> Problem | None:
    requested = t.requested_devices
    if t.strategy not in _SINGLE_DEVICE_STRATEGIES or requested is None or requested <= 1:
        return None
    return Problem(
        f"{t.call(f'strategy={t.strategy!r}', f'devices={requested}')}: a single-device strategy uses one "
        f"device; the other {requested - 1} stay idle without an error",
        "use devices=1, or strategy='ddp' (or 'auto') for several devices",
    )


CLUSTER_RULES: tuple[Rule, ...] = (
    slurm_tasks_per_node,
    slurm_nodes,
    slurm_tasks,
    slurm_interactive_nodes,
    slurm_tasks_without_tasks_per_node,
    elastic_world_size,
    elastic_local_world_size,
    lsf_world_size,
    nodes_without_cluster,
    devices_visible,
    interactive_session,
    single_device_strategy,
    node_rank_outside,
    rank_outside,
    loopback_main_address,
    launcher_world_size,
    lightning_rank_differs,
    nested_launchers,
    batch_job_without_launcher,
    undetected_launcher,
)


ENVIRONMENT_RULES: tuple[Rule, ...] = (slurm_tasks_per_node, slurm_nodes, elastic_world_size)
"""What the selected environment's own ``validate_settings`` refuses (a preset's LP095 at construction), said with the
launcher's own flags: the check reports these instead of LP095."""
LAUNCH_ARITHMETIC_RULES: tuple[Rule, ...] = (node_rank_outside, rank_outside, batch_job_without_launcher)
"""The launch errors a preset's LP096 reports at construction (the same functions, ``guards.launch_rules``): the check
reports these instead of LP096."""
REFUSAL_RULES: tuple[Rule, ...] = (slurm_tasks_without_tasks_per_node,)
"""The check rules that read an environment's refusal (``Target.environment_refusal``): when one fires and Lightning's
construction raised that refusal, the check reports the rule instead of LP700."""
SUPERSEDES: dict[str, tuple[Rule, ...]] = {
    launch.environment_takes_the_job.code: ENVIRONMENT_RULES,
    launch.launch_arithmetic.code: LAUNCH_ARITHMETIC_RULES,
}
"""A construction finding, and the check rules that say the same of the launcher: when one of these fires, the
construction finding is dropped."""


def cluster_findings(target: Target) -> list[Finding]:
    return run_rules(CLUSTER_RULES, "check", target)
