"""Simulated hardware for construction: a Trainer/Fabric believes it sees N CUDA devices.

The same way Lightning's own tests do it: patch the device count and availability. Nothing here
initializes CUDA, starts a process or creates a process group. Used by ``lightning-presets check``
and by the test suite.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import os
import socket
import stat
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping
from unittest import mock

from lightning_presets.core.environment import is_cluster_variable
from lightning_presets.core.findings import UsageError
from lightning_presets.core.hardware import SimulatedGPU, current, simulating

__all__ = ["CLUSTERS", "MAX_PROCESSES", "MAX_RANKFILE_BYTES", "SimulatedGPU", "check_rankfile", "cluster_variables",
           "current", "import_before_simulating", "is_cluster_variable", "only_these_variables", "simulated_cluster",
           "simulated_cuda", "without_mps"]  # fmt: skip

_CUDA_MODULES = (
    "lightning.fabric.accelerators.cuda",
    "lightning.pytorch.accelerators.cuda",
    "lightning_fabric.accelerators.cuda",
    "pytorch_lightning.accelerators.cuda",
)


def _returning(value: object) -> Callable[..., object]:
    """A plain function standing in for a probe (far cheaper to patch in than a MagicMock)."""

    def probe(*args: object, **kwargs: object) -> object:
        return value

    return probe


def import_before_simulating(modules: Iterable[str]) -> None:
    """Import the installed optional dependencies among ``modules`` while CUDA is still real.

    Some probe CUDA when they are imported (bitsandbytes asks torch for the current CUDA stream), which fails under
    a simulated device count on a machine without CUDA: imported first, they load as on the real machine, and a
    failure here is the installation's own, never the simulation's.
    """
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)  # e.g. DeepSpeed logs its accelerator detection to stdout when imported
    try:
        for name in modules:
            if name in sys.modules or importlib.util.find_spec(name) is None:
                continue
            with contextlib.suppress(Exception):  # a broken install is reported, for real, when the preset is built
                importlib.import_module(name)
    finally:
        logging.disable(disabled)


@contextlib.contextmanager
def simulated_cuda(
    count: int,
    capability: tuple[int, int] | None = (9, 0),
    memory_bytes: int | None = None,
    *,
    only_imported: bool = False,
    preload: Iterable[str] = (),
) -> Iterator[SimulatedGPU]:
    """Make Lightning see ``count`` CUDA devices of the given compute capability, without touching CUDA.

    ``only_imported=True`` patches only the Lightning namespaces already imported (the check uses one
    namespace and need not import the other two, about 0.4 s). ``capability=None``: the GPUs are visible but
    their capability cannot be read. ``preload``: optional dependencies imported before anything is patched
    (:func:`import_before_simulating`).
    """
    preload = tuple(preload)
    import_before_simulating(preload)
    gpu = SimulatedGPU(count, capability, memory_bytes, frozenset(preload))
    modules = []
    # Import every module before patching any: a module imported under the patch would copy the fake
    # `num_cuda_devices` by name and keep it after the simulation ends.
    for name in _CUDA_MODULES:
        if only_imported and name not in sys.modules:
            continue
        try:
            modules.append(importlib.import_module(name))
        except ImportError:
            continue
    with contextlib.ExitStack() as stack:
        for module in modules:
            stack.enter_context(mock.patch.object(module, "num_cuda_devices", new=_returning(count)))
        stack.enter_context(mock.patch("torch.cuda.is_available", new=_returning(count > 0)))
        stack.enter_context(mock.patch("torch.cuda.device_count", new=_returning(count)))
        stack.enter_context(mock.patch("torch.cuda.get_device_capability", new=_returning(capability)))
        bf16 = capability is not None and capability >= (8, 0)
        stack.enter_context(mock.patch("torch.cuda.is_bf16_supported", new=_returning(bf16)))
        yield stack.enter_context(simulating(gpu))


# --- simulated cluster environments (used by ``lightning-presets check``) ---------------------------

CLUSTERS = ("none", "slurm", "torchelastic", "lsf", "mpi", "kubeflow", "trainjob", "skypilot", "ray")
"""The launchers ``check --cluster`` simulates. What Lightning selects under each (its connector tries
TorchElasticEnvironment, SLURMEnvironment, LSFEnvironment, MPIEnvironment, in this order, else LightningEnvironment):

- ``slurm`` (srun): SLURMEnvironment; ``torchelastic`` (torchrun): TorchElasticEnvironment; ``lsf`` (jsrun):
  LSFEnvironment.
- ``mpi`` (Open MPI's ``mpiexec``, also under PBS): MPIEnvironment only with mpi4py installed and more than one MPI
  rank; without mpi4py, LightningEnvironment, which finds no ``LOCAL_RANK`` and launches its own processes in every
  MPI rank.
- ``kubeflow`` (a PyTorchJob's pod, Kubeflow's training operator v1): never detected; LightningEnvironment unless the
  job passes ``plugins=[KubeflowEnvironment()]`` (one process per pod, ``RANK`` as the node rank). The operator sets
  ``WORLD_SIZE`` = replicas × nprocPerNode, ``RANK`` = the pod's index, ``PET_NNODES``, ``PET_NPROC_PER_NODE`` and
  ``PET_NODE_RANK``; with ``--env PET_NPROC_PER_NODE=N`` (N > 1) the pod runs torchrun, which reads the ``PET_*``
  variables and starts N processes: TorchElasticEnvironment.
- ``trainjob`` (a TrainJob's pod, Kubeflow Trainer v2): the torch runtime sets ``PET_NNODES``, ``PET_NPROC_PER_NODE``,
  ``PET_NODE_RANK``, ``PET_MASTER_ADDR`` and ``PET_MASTER_PORT`` and runs torchrun, which reads them:
  TorchElasticEnvironment.

For both, the ``PET_*`` values given with ``--env`` are what the operator set: the variables derived from them
(``WORLD_SIZE``, torchrun's ranks and sizes) follow them.
- ``skypilot``: torchrun on every node, started with SkyPilot's node rank and first node's address:
  TorchElasticEnvironment.
- ``ray`` (Ray Train's TorchTrainer worker): Ray sets ``LOCAL_RANK``, ``NODE_RANK``, ``RANK``, ``WORLD_SIZE`` and
  ``MASTER_ADDR`` itself, without torchrun: LightningEnvironment with processes started outside it, unless the job
  passes Ray's own environment plugin.
"""
_MAIN_NODE = "10.0.0.1"
"""The first node's address in a simulated job across several nodes (a single node meets on the loopback)."""


def cluster_variables(cluster: str, devices: int, num_nodes: int, rankfile: str | None = None) -> dict[str, str]:
    """The variables a launcher sets for rank 0 of a job of ``num_nodes`` × ``devices`` processes."""
    world = str(devices * num_nodes)
    if cluster == "slurm":
        return {
            "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train", "SLURM_NTASKS": world,
            "SLURM_NTASKS_PER_NODE": str(devices), "SLURM_NNODES": str(num_nodes),
            "SLURM_NODEID": "0", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
            "SLURM_NODELIST": f"node[0-{max(num_nodes - 1, 0)}]" if num_nodes > 1 else "node0",
        }  # fmt: skip
    main = _MAIN_NODE if num_nodes > 1 else "127.0.0.1"
    torchrun = {
        "TORCHELASTIC_RUN_ID": "check", "WORLD_SIZE": world, "LOCAL_WORLD_SIZE": str(devices),
        "RANK": "0", "LOCAL_RANK": "0", "GROUP_RANK": "0", "MASTER_ADDR": main, "MASTER_PORT": "29500",
    }  # fmt: skip
    if cluster == "torchelastic":
        return torchrun
    if cluster == "skypilot":  # torchrun --nnodes=$SKYPILOT_NUM_NODES --node-rank=$SKYPILOT_NODE_RANK ...
        ips = "\n".join(f"10.0.0.{index + 1}" for index in range(num_nodes))
        return {
            **torchrun, "SKYPILOT_NODE_RANK": "0", "SKYPILOT_NUM_NODES": str(num_nodes), "SKYPILOT_NODE_IPS": ips,
            "SKYPILOT_NUM_GPUS_PER_NODE": str(devices), "SKYPILOT_TASK_ID": "check",
        }  # fmt: skip
    if cluster == "ray":  # a Ray Train worker: Ray sets these and starts one worker per device
        return {
            "WORLD_SIZE": world, "RANK": "0", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": str(devices), "NODE_RANK": "0",
            "MASTER_ADDR": main, "MASTER_PORT": "29500",
        }  # fmt: skip
    if cluster == "mpi":  # mpiexec -n WORLD --npernode DEVICES (Open MPI; PMI_* as MPICH's Hydra sets them)
        return {
            "OMPI_COMM_WORLD_SIZE": world, "OMPI_COMM_WORLD_RANK": "0", "OMPI_COMM_WORLD_LOCAL_RANK": "0",
            "OMPI_COMM_WORLD_LOCAL_SIZE": str(devices), "OMPI_COMM_WORLD_NODE_RANK": "0", "PMI_RANK": "0",
            "PMI_SIZE": world,
        }  # fmt: skip
    if cluster in ("kubeflow", "trainjob"):
        return kubeflow_variables(cluster, devices, num_nodes)
    if cluster == "lsf":
        return {
            "LSB_JOBID": "4242", "LSB_DJOB_RANKFILE": rankfile or "", "JSM_NAMESPACE_SIZE": world,
            "JSM_NAMESPACE_LOCAL_RANK": "0", "JSM_NAMESPACE_RANK": "0",
        }  # fmt: skip
    if cluster == "none":
        return {}
    raise ValueError(f"cluster={cluster!r} is not one of {', '.join(map(repr, CLUSTERS))}")


def kubeflow_variables(
    job: str, devices: int, num_nodes: int, given: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Rank 0 of a Kubeflow job (``kubeflow``: a PyTorchJob's master pod; ``trainjob``: a TrainJob's first node), with
    the ``PET_*`` values ``given`` (``--env``) taken as what the operator set. A PyTorchJob of ``num_nodes`` pods runs
    one process per pod (nprocPerNode 1) unless ``PET_NPROC_PER_NODE`` says more; a TrainJob runs torchrun with
    ``devices`` processes per node unless it says otherwise. Where torchrun runs, the variables are those of its first
    process: torchrun reads ``PET_NNODES``, ``PET_NPROC_PER_NODE`` and ``PET_NODE_RANK``."""
    given = given or {}
    default_nproc = str(devices) if job == "trainjob" else "1"
    pet = {"PET_NNODES": str(num_nodes), "PET_NPROC_PER_NODE": default_nproc, "PET_NODE_RANK": "0"}
    pet.update({name: given[name] for name in pet if name in given})
    nnodes, nproc, node_rank = (_count(pet[name]) for name in ("PET_NNODES", "PET_NPROC_PER_NODE", "PET_NODE_RANK"))
    main = "job-node-0-0.job" if job == "trainjob" else "job-master-0"
    variables = {"KUBERNETES_PORT": "tcp://10.96.0.1:443", **pet}
    if job == "trainjob":
        variables.update({"PET_MASTER_ADDR": main, "PET_MASTER_PORT": "29400"})
    else:  # the training operator's own variables (WORLD_SIZE = replicas × nprocPerNode, RANK = the pod's index)
        variables.update({"MASTER_ADDR": main, "MASTER_PORT": "23456", "WORLD_SIZE": str(nnodes * nproc),
                          "RANK": str(node_rank)})  # fmt: skip
    if job == "trainjob" or nproc > 1:  # torchrun in the pod: its first process
        variables.update({
            "TORCHELASTIC_RUN_ID": "none", "WORLD_SIZE": str(nnodes * nproc), "LOCAL_WORLD_SIZE": str(nproc),
            "RANK": str(node_rank * nproc), "LOCAL_RANK": "0", "GROUP_RANK": str(node_rank),
            "MASTER_ADDR": variables.get("PET_MASTER_ADDR", main),
            "MASTER_PORT": variables.get("PET_MASTER_PORT", "23456"),
        })  # fmt: skip
    return variables


def _count(value: str) -> int:
    """A ``PET_*`` count as torchrun reads it (``1:4``, an elastic range, counts its upper end; anything else 1)."""
    try:
        return max(int(value.rpartition(":")[2]), 0)
    except ValueError:
        return 1


MAX_PROCESSES = 2**20
"""The largest job simulated (devices × nodes): beyond any cluster, and a rank file of a few megabytes."""
MAX_RANKFILE_BYTES = 64 * MAX_PROCESSES
"""The largest LSF rank file a check lets Lightning read: a line of up to 64 bytes per process of the largest job."""
RANKFILE = "LSB_DJOB_RANKFILE"


def check_rankfile(path: str) -> None:
    """Refuse an LSF rank file Lightning could not read in bounded time and memory: only a regular UTF-8 text file of
    at most :data:`MAX_RANKFILE_BYTES` (``/dev/zero`` would be read without end, a FIFO would block forever).

    ``LSFEnvironment`` reads the whole file named by ``LSB_DJOB_RANKFILE`` when it is built; this runs first. The
    file's type is read without opening it, and then at most one byte past the limit.
    """
    where = f"{RANKFILE}={path}"
    try:
        info = os.stat(path)
    except (OSError, ValueError) as error:
        reason = getattr(error, "strerror", None) or error
        raise UsageError(f"{where}: {reason}; give the path of an LSF rank file (one host name per line), or leave "
                         "it out and --cluster lsf writes one") from None  # fmt: skip
    if not stat.S_ISREG(info.st_mode):
        raise UsageError(f"{where}: not a regular file; an LSF rank file is a text file with one host name per line")
    try:
        with open(path, "rb") as file:
            content = file.read(MAX_RANKFILE_BYTES + 1)
    except OSError as error:
        raise UsageError(f"{where}: cannot be read: {error.strerror or error}") from None
    if len(content) > MAX_RANKFILE_BYTES:
        raise UsageError(f"{where}: larger than {MAX_RANKFILE_BYTES // 2**20} MiB, more than a rank file of "
                         f"{MAX_PROCESSES} processes")  # fmt: skip
    try:
        content.decode("utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(f"{where}: not UTF-8 text (byte {error.start}); an LSF rank file lists host names") from None


def _lsf_rankfile(directory: str, devices: int, num_nodes: int) -> str:
    """An LSF rank file: the launch node, then every host once per task; this host is the first node."""
    if devices * num_nodes > MAX_PROCESSES:
        raise ValueError(f"an LSF rank file of {devices} × {num_nodes} tasks: at most {MAX_PROCESSES} are simulated")
    hosts = [socket.gethostname(), *(f"node{index}" for index in range(1, num_nodes))]
    path = os.path.join(directory, "rankfile")
    with open(path, "w", encoding="utf-8") as file:
        file.write("\n".join(["launch", *(host for host in hosts for _ in range(devices))]) + "\n")
    return path


@contextlib.contextmanager
def simulated_cluster(
    cluster: str, devices: int, num_nodes: int, env: dict[str, str] | None = None
) -> Iterator[dict[str, str]]:
    """``os.environ`` as on rank 0 of the given cluster: other clusters' variables removed, ``env`` applied last.

    Everything is restored on exit. Yields the simulated variables (the cluster's and ``env``). A rank file ``env``
    names is checked first (:func:`check_rankfile`): Lightning reads it whole.
    """
    given = (env or {}).get(RANKFILE)
    if given:
        check_rankfile(given)
    with contextlib.ExitStack() as stack:
        rankfile = None
        if cluster == "lsf" and not given:
            rankfile = _lsf_rankfile(stack.enter_context(tempfile.TemporaryDirectory()), devices, num_nodes)
        variables = {**cluster_variables(cluster, devices, num_nodes, rankfile), **(env or {})}
        if cluster in ("kubeflow", "trainjob"):  # what the operator and torchrun derive from the given PET_* values
            variables = {**variables, **kubeflow_variables(cluster, devices, num_nodes, env)}
            variables.update({name: value for name, value in (env or {}).items() if not name.startswith("PET_")})
        stack.enter_context(only_these_variables(variables))
        yield variables


@contextlib.contextmanager
def only_these_variables(variables: Mapping[str, str]) -> Iterator[None]:
    """``os.environ`` with ``variables`` set and every other cluster variable removed; everything restored on exit."""
    with _restored_environment(dict(variables)):
        for name in [name for name in os.environ if is_cluster_variable(name) and name not in variables]:
            del os.environ[name]
        os.environ.update(variables)
        yield


@contextlib.contextmanager
def _restored_environment(variables: dict[str, str]) -> Iterator[None]:
    """Restore the cluster variables and ``variables`` on exit (cheaper than copying all of ``os.environ``).

    Lightning's cluster environments write ``MASTER_ADDR``/``MASTER_PORT``; those are cluster variables too.
    """

    def touched(name: str) -> bool:
        return name in variables or is_cluster_variable(name)

    saved = {name: value for name, value in os.environ.items() if touched(name)}
    try:
        yield
    finally:
        for name in [name for name in os.environ if touched(name) and name not in saved]:
            del os.environ[name]
        for name, value in saved.items():
            if os.environ.get(name) != value:
                os.environ[name] = value


_MPS_MODULES = ("lightning.fabric.accelerators.mps", "lightning.pytorch.accelerators.mps")


@contextlib.contextmanager
def without_mps() -> Iterator[None]:
    """Lightning sees no Apple MPS device, so ``accelerator="auto"`` resolves as on a Linux node."""
    with contextlib.ExitStack() as stack:
        for name in _MPS_MODULES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            stack.enter_context(mock.patch.object(module.MPSAccelerator, "is_available", new=_returning(False)))
        yield
