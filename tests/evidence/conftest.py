"""The ``proves`` marker and the ``proof`` fixture of the evidence tests, and the check that a marked test observed a
failure for every code it names (see ``proof.py``)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from proof import Proof, unproven

_PROOF = pytest.StashKey[Proof]()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "proves(*codes): an evidence test; it must observe a failure for each code (tests/evidence/)"
    )


@pytest.fixture
def proof(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Proof:
    if request.node.get_closest_marker("proves") is None:
        pytest.fail("the proof fixture belongs to tests marked @pytest.mark.proves(...)")
    monkeypatch.delenv("LIGHTNING_PRESETS_SKIP", raising=False)
    recorded = Proof(monkeypatch)
    request.node.stash[_PROOF] = recorded
    return recorded


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    result = yield
    marker = item.get_closest_marker("proves")
    if marker is not None:
        problems = unproven(tuple(marker.args), item.stash.get(_PROOF, None))
        if problems:
            raise AssertionError("not proven: " + "; ".join(problems))
    return result


@pytest.fixture
def process_group() -> Iterator[None]:
    """A test that runs Lightning's 1-process launch in this process: its process group and the variables Lightning
    writes (MASTER_PORT, LOCAL_RANK, ...) are gone afterwards."""
    import torch.distributed as dist

    saved = dict(os.environ)
    try:
        yield
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        os.environ.clear()
        os.environ.update(saved)


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
