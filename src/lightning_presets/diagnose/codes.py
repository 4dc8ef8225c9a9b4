"""Diagnose mode's code: the hang report's finding (LP034)."""

from __future__ import annotations

from lightning_presets.core.codes import Code

COLLECTIVE_HANG = Code(
    code="LP034", severity="error", stage="setup", title="a collective that not every rank entered (diagnose mode)",
    fails='if self.global_rank == 0:\n    self.log("x", value, sync_dist=True)   # in on_train_epoch_end',
    fixed='self.log("x", value, sync_dist=True)   # on every rank',
    evidence="runtime: without diagnose mode, the rank that entered it waits until gloo's own timeout",
)  # fmt: skip
"""Printed on stderr by the rank whose collective timed out (LIGHTNING_PRESETS_DIAGNOSE=1), which then ends."""
