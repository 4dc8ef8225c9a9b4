"""The pytest plugin of lightning-presets (``pytest11`` entry point ``lightning_presets_pytest``): simulated GPUs and
clusters as fixtures, for platform teams that test their presets the way lightning-presets tests its own.

pytest loads it in every session of an environment where lightning-presets is installed, other projects' included,
so it costs nothing and changes nothing until a test asks for a fixture: it lives outside the ``lightning_presets``
package (importing that package registers the presets when ``LIGHTNING_PRESETS_AUTOLOAD=0``), and it imports
neither torch nor Lightning. Name it ``-p lightning_presets_pytest`` (or in ``pytest_plugins``) where autoloading is
off; the entry point has the module's name, so the two never collide.

PYTEST_DONT_REWRITE: it has no assertions, and it may be imported before pytest starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from lightning_presets.core.hardware import SimulatedGPU

SimulateGPUs = Callable[..., "SimulatedGPU"]
SimulateCluster = Callable[..., dict[str, str]]


@pytest.fixture
def simulated_gpus() -> Iterator[SimulateGPUs]:
    """``simulated_gpus(count, capability=(9, 0), memory=None)``: Lightning sees ``count`` CUDA devices of that compute
    capability (and ``memory`` bytes each, for guards that read it) until the test ends; CUDA is never initialised.

    The same simulation as ``lightning-presets check --gpus``: Lightning's device count and torch's availability,
    device count, capability and bf16 support are patched, the way Lightning's own tests do it.
    """
    with contextlib.ExitStack() as stack:

        def simulate(
            count: int = 8, *, capability: tuple[int, int] = (9, 0), memory: int | None = None
        ) -> SimulatedGPU:
            from lightning_presets.tools.simulation import simulated_cuda

            return stack.enter_context(simulated_cuda(count, capability, memory))

        yield simulate


@pytest.fixture
def simulated_cluster() -> Iterator[SimulateCluster]:
    """``simulated_cluster(kind, nodes=1, tasks_per_node=1, env=None)``: ``os.environ`` as on rank 0 of a ``slurm``,
    ``torchelastic`` or ``lsf`` job (or ``none``) of ``nodes`` × ``tasks_per_node`` processes, other clusters'
    variables removed and ``env`` applied last, until the test ends. Returns the variables it set.

    The same variables ``lightning-presets check --cluster`` simulates; Lightning picks its cluster environment
    (``SLURMEnvironment``, ``TorchElasticEnvironment``, ``LSFEnvironment``) from them.
    """
    with contextlib.ExitStack() as stack:

        def simulate(
            kind: str, *, nodes: int = 1, tasks_per_node: int = 1, env: dict[str, str] | None = None
        ) -> dict[str, str]:
            from lightning_presets.tools import simulation

            if kind not in simulation.CLUSTERS:
                raise ValueError(f"simulated_cluster({kind!r}): the kind is one of {', '.join(simulation.CLUSTERS)}")
            variables: dict[str, Any] = stack.enter_context(
                simulation.simulated_cluster(kind, tasks_per_node, nodes, env)
            )
            return variables

        yield simulate
