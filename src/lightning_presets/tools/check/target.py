"""What ``check``'s cluster rules read: the job a check simulates (its Trainer/Fabric call, the environment it will
see, what Lightning resolved), one :class:`Target`."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lightning_presets.core.context import devices_as_written
from lightning_presets.core.namespaces import Kind, constructor
from lightning_presets.core.rules import Problem
from lightning_presets.guards import launch_rules as launch

_EMPTY: Mapping[str, str] = MappingProxyType({})
_INTERACTIVE_JOB_NAMES = ("bash", "interactive")


@dataclass(frozen=True, slots=True, kw_only=True)
class Target:
    """The job as ``check`` sees it, once the simulated environment is in place."""

    kind: Kind
    """``trainer`` or ``fabric`` (the request's ``mode``)."""
    strategy: str
    """The strategy name as passed (lower case), or the class name for an instance."""
    accelerator: str
    """The resolved accelerator (``cpu``, ``cuda``, ...), or the requested one when nothing was built."""
    devices: int | None
    """Devices per node (as resolved when the strategy exists); ``None`` when it could not be determined."""
    requested_devices: int | None = None
    """Devices per node as requested (a single-device strategy resolves to 1 whatever was asked)."""
    devices_argument: Any = None
    """``devices=`` as the user wrote it (``-1``, ``"auto"``, ``[0, 1]``); ``None`` when not given."""
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
    environment_refusal: str | None = None
    """What Lightning raised while it made that environment from the job's variables (its own constructor, run when
    nothing was built); ``None`` when it made it, or when the strategy was built."""

    def call(self, *parts: str) -> str:
        return f"`{constructor(self.kind)}({', '.join(parts)})`"

    @property
    def devices_part(self) -> str:
        """``devices=`` for :meth:`call`: the user's value as written, else the count per node."""
        return devices_as_written(self.devices_argument, self.devices)

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

    def differs(self, variable: str, expected: int | None) -> int | None:
        """The launcher's ``variable`` as a number when it says other than ``expected`` (what devices and nodes make);
        ``None`` when it agrees, is unset or not a number, or nothing is expected."""
        found = _int(self.env.get(variable))
        return None if found is None or expected is None or found == expected else found

    @property
    def launch(self) -> launch.Launch:
        """What the launch functions shared with construction read (``guards.launch_rules``)."""
        return launch.Launch(self.env, self.environment, self.devices, self.num_nodes)

    @property
    def kubeflow(self) -> bool:
        """A pod of a Kubeflow job (PyTorchJob or TrainJob): its operator set ``PET_NPROC_PER_NODE``."""
        return "PET_NPROC_PER_NODE" in self.env or "PET_NNODES" in self.env

    def kubeflow_disagrees(self) -> list[str]:
        """The Kubeflow counts (``PET_NPROC_PER_NODE=4``, ``PET_NNODES=2``) that differ from devices and num_nodes:
        what the operator set, which torchrun (and the operator's ``WORLD_SIZE``) follow."""
        found = [("PET_NPROC_PER_NODE", "devices", self.devices), ("PET_NNODES", "num_nodes", self.num_nodes)]
        return [f"{name}={self.env[name]} ≠ {what}={expected}" for name, what, expected in found
                if self.differs(name, expected) is not None]  # fmt: skip

    def kubeflow_fix(self) -> str:
        """How a Kubeflow job is made to start devices × num_nodes processes, in its own spec's words."""
        return (f"numNodes: {self.num_nodes} and numProcPerNode: {self.devices} in the TrainJob's trainer spec "
                f"(PyTorchJob: {self.num_nodes} replicas and nprocPerNode: {self.devices})")  # fmt: skip

    def about(self, problem: Problem | None, *parts: str) -> Problem | None:
        """A launch function's problem said of this call."""
        return None if problem is None else Problem(f"{self.call(*parts)}: {problem.message}", problem.hint)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
