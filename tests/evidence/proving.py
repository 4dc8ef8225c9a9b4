"""The ``proof`` fixture of the tests marked ``proves`` (a marker of the whole suite, ``pyproject.toml``), and the check
that a marked test observed a failure for every code it names (see ``proof.py``): a plugin each folder of proofs
loads from its ``conftest.py``, so a rule's proof can live in the test module mirroring the rule's module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from proof import Proof, unproven

__all__ = ["process_group", "proof", "pytest_runtest_call"]

_PROOF = pytest.StashKey[Proof]()


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
