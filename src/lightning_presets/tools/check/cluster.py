"""Cluster-consistency rules of ``check``: the settings that make a multi-node job hang instead of fail.

Rules over a :class:`Target` (what the job asks for and the environment it will see), stage ``check``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from lightning_presets.core.findings import Finding
from lightning_presets.core.rules import Problem, Rule, rule, run_rules
from lightning_presets.guards import launch_rules as launch
from lightning_presets.tools.check.request import COMMAND as CHECK

_EMPTY: Mapping[str, str] = MappingProxyType({})
_INTERACTIVE_JOB_NAMES = ("bash", "interactive")
_SINGLE_DEVICE_STRATEGIES = ("single_device", "single_xla", "single_tpu")


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The job as ``check`` sees it, once the simulated environment is in place."""

    caller: str
    """``Trainer`` or ``Fabric``."""
    strategy: str
    """The strategy name as passed (lower case), or the class name for an instance."""
    accelerator: str
    """The resolved accelerator (``cpu``, ``cuda``, ...), or the requested one when nothing was built."""
    devices: int | None
    """Devices per node (as resolved when the strategy exists); ``None`` when it could not be determined."""
    requested_devices: int | None = None
    """Devices per node as requested (a single-device strategy resolves to 1 whatever was asked)."""
    num_nodes: int
    env: Mapping[str, str] = field(default_factory=lambda: _EMPTY)
    """The cluster variables and ``CUDA_VISIBLE_DEVICES`` the job sees."""
    gpus_visible: int = 0
    gpus_per_node: int = 0
    interactive: bool = False
    interactive_compatible: bool | None = None
    """Whether the resolved launcher can run in a notebook; ``None`` when unknown."""
    environment: str = "LightningEnvironment"
    """The cluster environment Lightning selects (its class name): the one the built strategy holds, else what
    Lightning's own detection picks in the job's variables. Rules of one launcher fire only when it is selected: a
    SLURM variable under torchrun is not a SLURM job."""

    def call(self, *parts: str) -> str:
        return f"`{self.caller}({', '.join(parts)})`"

    @property
    def world_size(self) -> int | None:
        return None if self.devices is None else self.devices * self.num_nodes

    @property
    def slurm_interactive(self) -> bool:
        return self.env.get("SLURM_JOB_NAME") in _INTERACTIVE_JOB_NAMES

    @property
    def slurm(self) -> bool:
        """Lightning selects its SLURM environment (``SLURM_NTASKS`` set, no interactive job name, no torchrun)."""
        return self.environment == "SLURMEnvironment"

    @property
    def torchelastic(self) -> bool:
        return self.environment == "TorchElasticEnvironment"

    @property
    def lsf(self) -> bool:
        return self.environment == "LSFEnvironment"

    @property
    def launch(self) -> launch.Launch:
        """What the launch functions shared with construction read (``guards.launch_rules``)."""
        return launch.Launch(self.env, self.environment, self.devices, self.num_nodes)

    def about(self, problem: Problem | None, *parts: str) -> Problem | None:
        """A launch function's problem said of this call."""
        return None if problem is None else Problem(f"{self.call(*parts)}: {problem.message}", problem.hint)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


@rule(
    code="LP705", severity="error", stage="check", title="SLURM tasks per node differ from devices",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --cluster slurm --env SLURM_NTASKS_PER_NODE=4",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --cluster slurm --env SLURM_NTASKS_PER_NODE=4",
    evidence="runtime: "
    "tests/evidence/test_fails_check.py::test_lp705_lp706_slurms_own_settings_disagree_with_devices_and_nodes (fit: "
    "Lightning's SLURM check raises ValueError)",
)  # fmt: skip
def slurm_tasks_per_node(t: Target) -> Problem | None:
    tasks = _int(t.env.get("SLURM_NTASKS_PER_NODE"))
    if not t.slurm or tasks is None or t.devices is None or tasks == t.devices:
        return None
    return Problem(
        f"{t.call(f'devices={t.devices}')}: SLURM starts --ntasks-per-node={tasks} task(s) per node but each "
        f"process expects {t.devices} per node; the job would hang or fail when the processes meet",
        f"set devices={tasks}, or #SBATCH --ntasks-per-node={t.devices}",
    )


@rule(
    code="LP706", severity="error", stage="check", title="SLURM node count differs from num_nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NNODES=2",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster slurm --env SLURM_NNODES=2",
    evidence="runtime: "
    "tests/evidence/test_fails_check.py::test_lp705_lp706_slurms_own_settings_disagree_with_devices_and_nodes (fit: "
    "Lightning's SLURM check raises ValueError)",
)  # fmt: skip
def slurm_nodes(t: Target) -> Problem | None:
    nodes = _int(t.env.get("SLURM_NNODES"))
    if not t.slurm or nodes is None or nodes == t.num_nodes:
        return None
    return Problem(
        f"{t.call(f'num_nodes={t.num_nodes}')}: SLURM allocated --nodes={nodes}; the processes would wait for "
        f"{t.num_nodes} node(s) that never join" + (" (a hang)" if t.num_nodes > nodes else ""),
        f"set num_nodes={nodes}, or #SBATCH --nodes={t.num_nodes}",
    )


@rule(
    code="LP707", severity="error", stage="check", title="SLURM_NTASKS differs from devices × num_nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NTASKS=8",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster slurm --env SLURM_NTASKS=32",
    evidence="runtime: "
    "tests/evidence/test_fails_check.py::test_lp707_slurm_ntasks_decides_the_world_whatever_devices_and_nodes_say "
    "(Lightning trains with SLURM's world of 1 and silently ignores devices × num_nodes = 2)",
)  # fmt: skip
def slurm_tasks(t: Target) -> Problem | None:
    tasks = _int(t.env.get("SLURM_NTASKS"))
    world = t.world_size
    if not t.slurm or tasks is None or world is None or tasks == world:
        return None
    return Problem(
        f"{t.call(f'devices={t.devices}', f'num_nodes={t.num_nodes}')}: SLURM_NTASKS={tasks}, but devices="
        f"{t.devices} × num_nodes={t.num_nodes} = {world} processes are expected",
        f"request #SBATCH --nodes={t.num_nodes} --ntasks-per-node={t.devices} (= {world} tasks), or set "
        f"devices and num_nodes so that their product is {tasks}",
    )


@rule(
    code="LP708", severity="error", stage="check", title="torchelastic WORLD_SIZE differs from devices × num_nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster torchelastic "
    "--env WORLD_SIZE=8",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 4 --cluster torchelastic",
    evidence="runtime: "
    "tests/evidence/test_fails_check.py::test_lp708_torchelastic_world_size_disagrees_with_devices_and_nodes (fit: "
    "Lightning raises ValueError)",
)  # fmt: skip
def elastic_world_size(t: Target) -> Problem | None:
    size = _int(t.env.get("WORLD_SIZE"))
    world = t.world_size
    if not t.torchelastic or size is None or world is None or size == world:
        return None
    return Problem(
        f"{t.call(f'devices={t.devices}', f'num_nodes={t.num_nodes}')}: torchrun's WORLD_SIZE={size}, but "
        f"devices={t.devices} × num_nodes={t.num_nodes} = {world}; ranks and data shards would not line up",
        f"launch with torchrun --nnodes={t.num_nodes} --nproc-per-node={t.devices}, or set devices and "
        f"num_nodes so that their product is {size}",
    )


@rule(
    code="LP709", severity="warning", stage="check", title="torchelastic LOCAL_WORLD_SIZE differs from devices",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --cluster torchelastic --env LOCAL_WORLD_SIZE=4",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --cluster torchelastic --env LOCAL_WORLD_SIZE=4",
)  # fmt: skip
def elastic_local_world_size(t: Target) -> Problem | None:
    size = _int(t.env.get("LOCAL_WORLD_SIZE"))
    if not t.torchelastic or size is None or t.devices is None or size == t.devices:
        return None
    return Problem(
        f"{t.call(f'devices={t.devices}')}: torchrun starts LOCAL_WORLD_SIZE={size} process(es) per node, "
        f"not {t.devices}",
        f"set devices={size}, or launch with torchrun --nproc-per-node={t.devices}",
    )


@rule(
    code="LP714", severity="error", stage="check", title="LSF JSM_NAMESPACE_SIZE differs from devices × num_nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster lsf --env JSM_NAMESPACE_SIZE=8",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster lsf",
    evidence="runtime: tests/evidence/test_fails_check.py::test_lp714_lsf_jsm_namespace_size_decides_the_world "
    "(Lightning trains with LSF's world of 1 and silently ignores devices × num_nodes = 2)",
)  # fmt: skip
def lsf_world_size(t: Target) -> Problem | None:
    size = _int(t.env.get("JSM_NAMESPACE_SIZE"))
    world = t.world_size
    if not t.lsf or size is None or world is None or size == world:
        return None
    return Problem(
        f"{t.call(f'devices={t.devices}', f'num_nodes={t.num_nodes}')}: jsrun starts JSM_NAMESPACE_SIZE={size} "
        f"task(s), but devices={t.devices} × num_nodes={t.num_nodes} = {world}",
        f"run jsrun with {world} tasks ({t.devices} per node), or set devices and num_nodes to match {size}",
    )


@rule(
    code="LP710", severity="error", stage="check", title="more devices than GPUs visible",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --env CUDA_VISIBLE_DEVICES=0,1,2,3",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 4 --env CUDA_VISIBLE_DEVICES=0,1,2,3",
    evidence="runtime: tests/evidence/test_fails_check.py::test_lp710_more_devices_than_visible_gpus (Lightning "
    "raises MisconfigurationException)",
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
        f"{t.call(f'devices={t.devices}')}: {t.devices} GPU(s) per node requested, but {where} visible GPU(s)",
        f"set devices={t.gpus_visible} (or devices='auto')"
        + (f", or list {t.devices} GPUs in CUDA_VISIBLE_DEVICES" if visible is not None else ""),
    )


@rule(
    code="LP711", severity="error", stage="check", title="a strategy that cannot run in an interactive session",
    fails=f"{CHECK} --accelerator cpu --devices 2 --strategy ddp --interactive",
    fixed=f"{CHECK} --accelerator cpu --devices 2 --strategy ddp_notebook --interactive",
    evidence="runtime: "
    "tests/evidence/test_fails_check.py::test_lp711_a_launcher_that_reruns_the_script_in_a_notebook (Lightning "
    "raises MisconfigurationException)",
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
    evidence="runtime: tests/evidence/test_fails_check.py::test_lp712_interactive_slurm_on_several_nodes_hangs (a "
    "hang: torch's rendezvous times out, 1/2 clients joined)",
)  # fmt: skip
def slurm_interactive_nodes(t: Target) -> Problem | None:
    if not (t.slurm_interactive and "SLURM_NTASKS" in t.env and t.num_nodes > 1):
        return None
    return Problem(
        f"{t.call(f'num_nodes={t.num_nodes}')}: SLURM_JOB_NAME={t.env['SLURM_JOB_NAME']!r} makes Lightning ignore "
        f"SLURM, so it launches on this node alone and waits for {t.num_nodes - 1} other node(s) forever",
        "submit the job with sbatch/srun under another job name, or use num_nodes=1 in an interactive session",
    )


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
        "simulate the launcher with --cluster (slurm, torchelastic, lsf, mpi, kubeflow, skypilot, ray), or set "
        "MASTER_ADDR, MASTER_PORT and "
        "NODE_RANK on every node",
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


@rule(
    code="LP717", severity="error", stage="check", title="a node rank outside the nodes",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --env MASTER_ADDR=10.0.0.1 "
    "--env NODE_RANK=2",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --env MASTER_ADDR=10.0.0.1 "
    "--env NODE_RANK=1",
    evidence="runtime: tests/evidence/test_fails_launchers.py::test_lp717_a_node_rank_outside_the_nodes (fit: "
    "torch's gloo process group raises `rank < size`)",
)  # fmt: skip
def node_rank_outside(t: Target) -> Problem | None:
    return t.about(launch.node_rank_outside(t.launch), f"num_nodes={t.num_nodes}")


@rule(
    code="LP718", severity="error", stage="check", title="a rank outside the world the launcher sets",
    fails=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic --env RANK=16",
    fixed=f"{CHECK} --accelerator cuda --gpus 8 --devices 8 --num-nodes 2 --cluster torchelastic --env RANK=15",
    evidence="runtime: tests/evidence/test_fails_launchers.py::test_lp718_a_rank_outside_the_world (fit: torch's "
    "gloo process group raises `rank < size`)",
)  # fmt: skip
def rank_outside(t: Target) -> Problem | None:
    return t.about(launch.rank_outside(t.launch), f"devices={t.devices}", f"num_nodes={t.num_nodes}")


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
    reads = (
        "takes the world from WORLD_SIZE and ignores devices × num_nodes"
        if t.environment == "KubeflowEnvironment"
        else "builds a world of devices × num_nodes, which the launcher's processes do not fill (or overfill)"
    )
    return Problem(
        f"{t.call(f'devices={t.devices}', f'num_nodes={t.num_nodes}')}: the launcher set {name}={size}, but devices="
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
    given = _int(t.env.get("RANK"))
    if computed is None or given is None or computed == given:
        return None
    node = launch.lightning_node_rank(t.launch)
    node_text = f"{node[0]}={node[1]}" if node else "node rank 0"
    return Problem(
        f"{t.call(f'devices={t.devices}')}: the launcher gave this process RANK={given}, but Lightning's own "
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
        f"{t.call(f'devices={t.devices}')}: {launcher} starts {name}={tasks} tasks per node and each runs torchrun, "
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
    evidence="runtime: tests/evidence/test_fails_launchers.py::test_lp728_a_batch_job_started_without_srun_hangs (a "
    "hang: torch's rendezvous times out, 1/2 clients joined)",
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
            f"{t.call(f'devices={t.devices}', f'num_nodes={t.num_nodes}')}: mpiexec started {mpi}={t.env[mpi]} "
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


CLUSTER_RULES: tuple[Rule, ...] = (
    slurm_tasks_per_node,
    slurm_nodes,
    slurm_tasks,
    slurm_interactive_nodes,
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
SUPERSEDES: dict[str, tuple[Rule, ...]] = {
    launch.environment_takes_the_job.code: ENVIRONMENT_RULES,
    launch.launch_arithmetic.code: LAUNCH_ARITHMETIC_RULES,
}
"""A construction finding, and the check rules that say the same of the launcher: when one of these fires, the
construction finding is dropped."""


def cluster_findings(target: Target) -> list[Finding]:
    return run_rules(CLUSTER_RULES, "check", target)
