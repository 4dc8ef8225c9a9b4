"""The target preset's resume guard on a converted checkpoint: the verdict ``lightning-presets check --resume-from``
gives, on the job the conversion was made for (the preset, its devices and nodes, simulated as GPUs of one kind)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lightning_presets.core.findings import Finding
from lightning_presets.guards.resume.rules import optimizer_state_present, zero_shards_match_world

OPTIMIZER_MISSING = optimizer_state_present.code
"""The resume rule that refuses ``fit(ckpt_path=...)`` of a checkpoint without optimizer state."""
UNIVERSAL_NEEDED = zero_shards_match_world.code
"""The resume rule that refuses ZeRO shards at another data-parallel size unless the job loads a universal copy."""


@dataclass(frozen=True, slots=True)
class Verdict:
    """What the target preset's resume guard says of the result."""

    job: str
    """The job judged, as code: ``Trainer(strategy='fsdp2', devices=8)``."""
    accepted: bool
    findings: tuple[Finding, ...] = ()
    """The resume rules' refusals and warnings."""
    note: str = ""
    """Why the guard could not judge (the job itself was refused before the checkpoint was read)."""

    @property
    def refused(self) -> bool:
        """The guard judged the result and refuses it (a job refused before it read the checkpoint judged nothing)."""
        return not self.accepted and not self.note

    def describe(self) -> str:
        if self.note:
            return f"{self.job}: not judged ({self.note})"
        if self.accepted:
            return f"{self.job} resumes it: its resume guard accepts the result"
        return f"{self.job}: its resume guard refuses the result: " + "; ".join(
            f"[{each.code}] {each.message}" for each in self.findings if each.severity == "error"
        )


def judge(
    path: Path,
    strategy: str,
    devices: int,
    num_nodes: int,
    *,
    mode: str = "trainer",
    optimizer_dropped: bool = False,
    load_universal: bool = False,
) -> Verdict:
    """The resume guard of ``strategy`` on ``devices`` × ``num_nodes`` for ``path``. ``optimizer_dropped``: the
    conversion said that the optimizer state is not carried, so the job loads the weights alone and the rule that
    refuses a checkpoint without optimizer state for ``fit(ckpt_path=...)`` is reported, not a failure.
    ``load_universal``: the job loads the result's universal copy (``checkpoint.load_universal`` set, as LP802's fix
    says), so LP802, which reads that setting off the job's config, does not count."""
    from lightning_presets.guards.resume import RESUME_RULES
    from lightning_presets.tools.check import CheckRequest
    from lightning_presets.tools.verdict import run_check

    arguments = {"strategy": strategy, "devices": devices, "num_nodes": num_nodes}
    request = CheckRequest(
        mode="fabric" if mode == "fabric" else "trainer", arguments=arguments, gpus=devices, resume_from=str(path)
    )
    report = run_check(request)
    job = request.call()
    resume_codes = {each.code for each in RESUME_RULES}
    if not report.constructed:
        refused = "; ".join(f"[{each.code}] {each.message}" for each in report.findings if each.severity == "error")
        return Verdict(job, accepted=False, note=f"the job itself was refused: {refused or 'not constructed'}")
    findings = tuple(each for each in report.findings if each.code in resume_codes)
    blocking = [
        each
        for each in findings
        if each.severity == "error"
        and not (optimizer_dropped and each.code == OPTIMIZER_MISSING)
        and not (load_universal and each.code == UNIVERSAL_NEEDED)
    ]
    return Verdict(job, accepted=not blocking, findings=findings)
