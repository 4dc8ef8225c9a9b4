"""The family object (``core/family.py``): a family's data, not its name, gives resume and ``plan`` checks.

The example distribution's own family (``examples/acme-presets``: ``ACME_REPLICA``) gets a resume refusal and a plan
estimate by declaring its object; the same preset with a family that declares nothing gets neither. No fresh
interpreter: the example package is imported from its source folder.
"""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
import sys
from pathlib import Path
from typing import Any

import torch
from torch import nn

from lightning_presets.core.context import Context
from lightning_presets.core.family import Family
from lightning_presets.guards.resume import resumable, resume_findings
from lightning_presets.registry import catalog
from lightning_presets.tools.plan import PlanRequest, plan
from lightning_presets.tools.plan.layouts import layout_of

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "scripts"))

from checkpoint_layouts import LIGHTNING_STATE, fsdp_folder  # noqa: E402


def _acme_replica() -> tuple[Family, Any]:
    """The example distribution's family and preset, imported from its source and then forgotten (its path off
    ``sys.path``, its modules out of ``sys.modules``): other tests judge whether acme-presets is installed, and
    write packages of that name of their own."""
    source = str(ROOT / "examples" / "acme-presets" / "src")
    sys.path.insert(0, source)
    try:
        from acme_presets.replica import ACME_REPLICA, ACME_REPLICA_DDP

        return ACME_REPLICA, ACME_REPLICA_DDP
    finally:
        sys.path.remove(source)
        for name in [name for name in sys.modules if name == "acme_presets" or name.startswith("acme_presets.")]:
            del sys.modules[name]


ACME_REPLICA, ACME_REPLICA_DDP = _acme_replica()

BARE = dataclasses.replace(ACME_REPLICA_DDP, family=Family("acme_undeclared"))
"""The same preset, of a family that declares nothing."""


def job(preset: str, family: Family | str) -> Context:
    return Context(
        preset=preset, target="trainer", kind="trainer", accelerator="cuda", devices_per_node=8, num_nodes=1,
        precision="bf16-mixed", precision_plugin="MixedPrecision", cluster_environment="LightningEnvironment",
        family=family,
    )  # fmt: skip


def sharded_folder(root: Path) -> Path:
    """A sharded folder as the Trainer's FSDPStrategy writes it: what a DDP strategy cannot load."""
    model = nn.Linear(4, 2)
    optimizer = torch.optim.Adam(model.parameters())
    model(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    state = {"state_dict": model.state_dict(), "optimizer_states": [optimizer.state_dict()], **LIGHTNING_STATE,
             "lr_schedulers": []}  # fmt: skip
    return fsdp_folder(root / "sharded.ckpt", state)


def test_a_third_party_family_gets_the_resume_checks_it_declares(tmp_path: Path) -> None:
    folder = sharded_folder(tmp_path)
    (refusal,) = resume_findings(folder, job("acme_replica", ACME_REPLICA))
    assert (refusal.code, refusal.severity) == ("LP801", "error")
    assert "single-file" in refusal.message  # what ACME_REPLICA declares it loads
    assert "lightning-presets convert" in refusal.hint or "consolidate" in refusal.hint
    assert resumable(ACME_REPLICA) == resumable("ddp")  # it loads what DDP loads, and says so in `show`
    # the same preset with a family that declares nothing: nothing checked, nothing refused
    assert resume_findings(folder, job("acme_replica", BARE.family)) == []


def test_a_third_party_family_gets_the_plan_it_declares(monkeypatch) -> None:
    monkeypatch.setitem(catalog.strategy_catalog().presets, "acme_replica", ACME_REPLICA_DDP)  # as if installed
    request = PlanRequest(params=10**9, gpus_per_node=8, presets=("acme_replica", "ddp_static_graph"))
    estimates = {each.preset: each for each in plan(request).estimates}
    acme, ddp = estimates["acme_replica"], estimates["ddp_static_graph"]
    assert acme.summary.startswith("Acme replica: every GPU holds full weights")
    # a replica of 1e9 parameters in bf16-mixed with AdamW: 4 + 4 + 8 bytes per parameter on every GPU, as DDP's
    assert (acme.parameters, acme.gradients, acme.optimizer) == (4 * 10**9, 4 * 10**9, 8 * 10**9)
    assert (acme.parameters, acme.gradients, acme.optimizer, acme.total_peak) == (
        ddp.parameters, ddp.gradients, ddp.optimizer, ddp.total_peak,
    )  # fmt: skip
    assert layout_of(BARE) is None  # declaring nothing: not planned


def test_a_family_is_its_name() -> None:
    """Where a family is written or looked up by name (``--json``, a precision preset's ``incompatible`` table, a
    third party's rule comparing ``ctx.family == "ddp"``), it reads as its name."""
    assert ACME_REPLICA == "acme_replica"
    assert json.dumps({"family": ACME_REPLICA}) == '{"family": "acme_replica"}'
    assert {"acme_replica": 1}[ACME_REPLICA] == 1
    assert f"{ACME_REPLICA}:trainer" == "acme_replica:trainer"
    assert pickle.loads(pickle.dumps(ACME_REPLICA)) is ACME_REPLICA
    ddp = catalog.strategy_catalog().presets["ddp_static_graph"].family
    assert Family.of("ddp") is ddp
    assert job("ddp_static_graph", "ddp").family is ddp
    assert Family.of("no_such_family").stand_in
    assert Family.of(7) == 7
    for name in ("ddp", "fsdp", "model_parallel", "deepspeed"):
        assert Family.of(name).memory is not None, name
        assert Family.of(name).checkpoints.checked, name
    assert Family.of("xla").memory is None
    assert not Family.of("xla").checkpoints.checked


FAMILY_NAMES = re.compile(
    r"""family[\w.]*\)?\s*(==|!=)\s*["'](ddp|fsdp|model_parallel|deepspeed|xla)["']"""
    r"""|["'](ddp|fsdp|model_parallel|deepspeed|xla)["']\s*(==|!=)\s*\w*family"""
    r"""|family[\w.]*\)?\s+(not\s+)?in\s*[(\[{][^)\]}]*["'](ddp|fsdp|model_parallel|deepspeed|xla)["']"""
)
DEFINITIONS = {"core/family.py"}


def test_no_family_name_is_compared_outside_the_family_definitions() -> None:
    package = ROOT / "src" / "lightning_presets"
    found = [
        f"{path.relative_to(package)}:{number}: {line.strip()}"
        for path in sorted(package.rglob("*.py"))
        if path.relative_to(package).parts[0] != "strategies" and str(path.relative_to(package)) not in DEFINITIONS
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FAMILY_NAMES.search(line)
    ]
    assert found == []


def test_the_context_names_the_mesh_sizes() -> None:
    """The sizes a preset's mesh resolves to for the job, read on the Context (the model-parallel rules read them)."""
    from lightning_presets.core.mesh import DATA_PARALLEL_WORLD, HYBRID_SHARD, MODEL_PARALLEL

    two_nodes = dataclasses.replace(job("tp2d_hybrid", "model_parallel"), num_nodes=2)  # 8 devices on each
    assert two_nodes.mesh_sizes(MODEL_PARALLEL) == (2, 8)
    assert two_nodes.mesh_sizes(DATA_PARALLEL_WORLD) == (16, 1)
    assert dataclasses.replace(two_nodes, launched_world=4).mesh_sizes(DATA_PARALLEL_WORLD) == (4, 1)
    assert dataclasses.replace(two_nodes, options={"device_mesh": (4, 4)}).mesh_sizes(HYBRID_SHARD) == (4, 4)
    assert dataclasses.replace(two_nodes, options={"tensor_parallel_size": 2}).mesh_sizes(MODEL_PARALLEL) == (2, 2)
