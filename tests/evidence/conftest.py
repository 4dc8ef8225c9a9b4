"""The evidence tests' plugin (``proving.py``: the ``proof`` fixture and the check that a marked
test observed a failure for every code it names), and the shared 2-process run of ``scripts/two_ranks.py``."""

from __future__ import annotations

from typing import Any

import pytest
from proving import process_group, proof, pytest_runtest_call  # noqa: F401  (this folder's plugin)


@pytest.fixture(scope="session")
def two_ranks() -> dict[str, Any]:
    """One launch of ``scripts/two_ranks.py`` on 2 gloo processes, shared by the tests that read it: its ``STATE``
    lines by scenario and rank, its ``PROOF`` lines, and the output."""
    import json
    from pathlib import Path

    from proof import reports

    from harness import free_port, run_job

    SCENARIOS = ("lp116_hybrid_one_device_shards", "lp117_two_dimensional_mesh", "lp709_elastic")

    script = Path(__file__).resolve().parent / "scripts" / "two_ranks.py"
    job = run_job(script, env={"ELASTIC_PORT": str(free_port())}, unset=("LIGHTNING_PRESETS_SKIP",), timeout=240)
    output = job.stdout
    assert job.returncode == 0, job.describe()
    states: dict[tuple[str, int], dict[str, Any]] = {}
    for line in output.splitlines():  # anywhere in a line: a C++ message without its newline can stand before it
        if "STATE {" in line:
            state = json.loads(line[line.index("STATE {") + len("STATE ") :])
            states[(state["scenario"], state["rank"])] = state
    missing = [(scenario, rank) for scenario in SCENARIOS for rank in (0, 1) if (scenario, rank) not in states]
    assert not missing, f"no STATE line for {missing}:\n{job.describe()}"
    return {"states": states, "reports": reports(output), "output": output}
