"""The runtime guards' codes: what the start-up handshake and the join watchdog find, and diagnose mode's own failure
(the hang report's finding, LP034, is declared in :mod:`lightning_presets.diagnose.codes`)."""

from __future__ import annotations

from lightning_presets.core.codes import Code
from lightning_presets.diagnose.codes import COLLECTIVE_HANG

RANKS_DISAGREE = Code(
    code="LP030", severity="error", stage="setup", title="the ranks of one job disagree on a setting that must agree",
    fails='Trainer(strategy="ddp_static_graph", precision="bf16-mixed" if os.environ["LOCAL_RANK"] == "1" '
          'else "32-true")   # one rank trains in another precision',
    fixed='Trainer(strategy="ddp_static_graph", precision="bf16-mixed")   # the same precision on every rank',
    evidence="runtime: with the handshake off, the ranks train different weights, or torch fails in the first "
    "collective",
)  # fmt: skip
"""Raised on every rank by the start-up handshake, before the model's first collective."""

RANKS_DIFFER = Code(
    code="LP031", severity="warning", stage="setup", title="the ranks of one job differ in GPU, /dev/shm or variables",
    fails="NCCL_IB_TIMEOUT=22 on one node only   # every rank reports it differs",
    fixed="NCCL_IB_TIMEOUT=22 on every node",
)  # fmt: skip
"""Legal, but usually a node set up differently from the others (warned on rank 0)."""

HANDSHAKE_FAILED = Code(
    code="LP032", severity="warning", stage="setup", title="the start-up handshake could not compare the ranks",
    fails="LIGHTNING_PRESETS_HANDSHAKE=1 on one rank, 0 on the others   # the handshake times out on that rank",
    fixed="LIGHTNING_PRESETS_HANDSHAKE unset on every rank",
)  # fmt: skip
"""Our own failure, or a peer that never came to the handshake: the run goes on, unchecked."""

RANKS_MISSING = Code(
    code="LP033", severity="error", stage="setup", title="not every rank joined the process group in time",
    fails="torchrun --nnodes=1 --nproc-per-node=1 train.py   # with WORLD_SIZE=2 forced: rank 1 never starts",
    fixed="torchrun --nnodes=1 --nproc-per-node=2 train.py",
    evidence="runtime: with the watchdog off, rank 0 waits in init_process_group until torch's own timeout",
)  # fmt: skip
"""Printed on stderr by each waiting rank's watchdog: a warning at its interval while the rank waits (a rank may join
late, within the process group's timeout), an error when it ends the rank (the process group's timeout, or a shorter
``LIGHTNING_PRESETS_JOIN_TIMEOUT`` the user set)."""

DIAGNOSE_FAILED = Code(
    code="LP035", severity="warning", stage="setup", title="diagnose mode could not record the collectives",
    fails="LIGHTNING_PRESETS_DIAGNOSE=1 with a torch whose torch.distributed has no all_reduce",
    fixed="LIGHTNING_PRESETS_DIAGNOSE=1 with torch >= 2.4",
)  # fmt: skip
"""Our own failure: the run goes on without the hang report."""

CODES = (RANKS_DISAGREE, RANKS_DIFFER, HANDSHAKE_FAILED, RANKS_MISSING, COLLECTIVE_HANG, DIAGNOSE_FAILED)
