"""Declared findings: every code the package can report, with its severity, stage, title, evidence and examples.

A finding is declared once, as a :class:`Code` (or a :class:`~lightning_presets.core.rules.Rule`, a code with the
function that checks it), and emitted by reference: ``SOME_CODE.finding(message, hint)``. ``docs/errors.md`` is
generated from these declarations (``scripts/errors_doc.py``), and a test fails when a code literal appears in two
places of the package.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning_presets.core.findings import Finding, Severity

STAGES = (
    "catalog", "options", "construction", "trainer", "model", "setup", "optimizers", "resume", "check", "doctor",
    "explain", "convert",
)  # fmt: skip
"""When a finding can be reported. The preset stages (``options`` to ``resume``) are those of rules
(:data:`lightning_presets.core.rules.Stage`); ``catalog`` is the loading of entry points, ``check``, ``doctor``,
``explain`` and ``convert`` the commands of that name (``explain``'s failure signatures are also matched on an
exception raised inside a preset's run)."""


EVIDENCE_KINDS = ("runtime", "gpu")
"""How an ``error`` knows the configuration fails, by an executed proof: ``runtime: <what fails>`` says that a test
runs the configuration with the guard switched off, or the Lightning/torch/DeepSpeed code that fails, and observes
the failure; ``gpu: <what fails>`` that a GPU check does so where nothing runs without a GPU. The declaration names
no file: the test suite maps each code to the test or check that proves it, and the generated error reference
names it. A source citation (``source: ...``) explains; it is not evidence."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Setting:
    """Where a code's documented examples run: the simulated node and cluster, and which optional modules exist.

    ``lightning_presets.tools.examples`` applies it while it executes the examples; it never touches real hardware.
    """

    gpus: int = 8
    """CUDA GPUs per node (0: a node without GPUs)."""
    capability: tuple[int, int] | None = (9, 0)
    """Their compute capability; ``None``: the GPUs are visible but their capability cannot be read."""
    memory_bytes: int | None = None
    """Memory per GPU, for rules that read it."""
    nodes: int = 1
    """Nodes of the simulated cluster (its variables describe ``nodes`` × ``gpus`` processes)."""
    cluster: str = "none"
    """``none``, ``slurm``, ``torchelastic`` or ``lsf``: the launcher whose variables the examples see."""
    missing: tuple[str, ...] = ()
    """Optional modules that cannot be imported while the examples run."""
    simulated: tuple[str, ...] = ()
    """Optional modules replaced by the engine's stand-in (``torch_xla``)."""


DEFAULT_SETTING = Setting()
"""Eight GPUs of compute capability 9.0 (H100) on one node, no cluster, every installed module importable."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Code:
    """A documented finding: one concern, one stable code, a failing and a fixed example."""

    code: str
    """``LP`` and three digits."""
    severity: Severity
    stage: str
    """When it fires: one of :data:`STAGES`."""
    title: str
    """One line for ``show`` and ``docs/errors.md``."""
    fails: str
    """Code (or a command line) that reports it."""
    fixed: str
    """The nearest code that does not."""
    evidence: str = ""
    """For an ``error``: how we know the configuration fails (see :data:`EVIDENCE_KINDS`)."""
    setting: Setting = DEFAULT_SETTING
    """Where the ``fails`` example runs (and ``fixed`` too, unless ``fixed_setting`` says otherwise)."""
    fixed_setting: Setting | None = None
    """Where the ``fixed`` example runs, when the fix is the hardware itself."""

    def finding(self, message: str, hint: str) -> Finding:
        """This code, reported: ``message`` says what is wrong with the user's values, ``hint`` the fix."""
        return Finding(code=self.code, severity=self.severity, message=message, hint=hint)
