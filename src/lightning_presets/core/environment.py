"""The environment variables the package reads, and the cluster variables that tell Lightning where it runs."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

AUTOLOAD_VARIABLE = "LIGHTNING_PRESETS_AUTOLOAD"
ALLOW_VARIABLE = "LIGHTNING_PRESETS_ALLOW"
DENY_VARIABLE = "LIGHTNING_PRESETS_DENY"
SKIP_VARIABLE = "LIGHTNING_PRESETS_SKIP"
"""Comma-separated rule codes (``LP305,LP614``) whose guards do not run, or ``all``: the escape hatch for a rule that
is wrong for a job (please report it), and how the test suite runs a configuration with a guard switched off."""
_SEPARATORS = re.compile(r"[,;\s]+")

# What SLURM, torchrun, LSF/jsrun, Open MPI, MPICH and Kubeflow set for each rank (``PET_``: what Kubeflow's operators
# set for torchrun, which reads its flags from ``PET_*`` variables).
CLUSTER_PREFIXES = ("SLURM_", "LSB_", "JSM_", "TORCHELASTIC_", "OMPI_COMM_WORLD_", "PMI_", "PET_")
CLUSTER_VARIABLES = frozenset(
    {"WORLD_SIZE", "LOCAL_WORLD_SIZE", "RANK", "LOCAL_RANK", "GROUP_RANK", "NODE_RANK", "MASTER_ADDR",
     "MASTER_PORT", "KUBERNETES_PORT"}
)  # fmt: skip


AUTOLOAD_ON = ("1", "true", "yes", "on")
AUTOLOAD_OFF = ("0", "false", "no", "off")
"""The values ``LIGHTNING_PRESETS_AUTOLOAD`` takes (any case, surrounding blanks ignored; empty means on). Any other
value leaves autoload on, as the ``.pth`` line reads it, and is reported (:func:`unknown_values`)."""
_SKIP_TOKEN = re.compile(r"LP[0-9]{3}|ALL", re.IGNORECASE)


def autoload_enabled(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the start-up hook registers presets (``LIGHTNING_PRESETS_AUTOLOAD`` unset or not a false value)."""
    value = (os.environ if environ is None else environ).get(AUTOLOAD_VARIABLE, "1")
    return value.strip().lower() not in AUTOLOAD_OFF


def unknown_values(environ: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """``(variable, value, what it takes)`` for each of the package's variables set to something it does not take:
    ``LIGHTNING_PRESETS_AUTOLOAD=disabled`` (on, silently, until now), a ``LIGHTNING_PRESETS_SKIP`` entry that is no
    code (``LP3O5``, ``LP30``)."""
    env = os.environ if environ is None else environ
    found = []
    autoload = env.get(AUTOLOAD_VARIABLE)
    if autoload is not None and autoload.strip() and autoload.strip().lower() not in AUTOLOAD_ON + AUTOLOAD_OFF:
        found.append(
            (AUTOLOAD_VARIABLE, autoload, f"one of {', '.join(AUTOLOAD_ON)} (on) or {', '.join(AUTOLOAD_OFF)} (off)")
        )
    for token in _SEPARATORS.split(env.get(SKIP_VARIABLE, "")):
        if token and not _SKIP_TOKEN.fullmatch(token):
            found.append(
                (SKIP_VARIABLE, token, "rule codes (LP and three digits, e.g. LP305) separated by commas, or all")
            )
    return found


def skipped_rules(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The rule codes ``LIGHTNING_PRESETS_SKIP`` switches off, upper-cased; ``{"ALL"}`` switches off every rule."""
    raw = (os.environ if environ is None else environ).get(SKIP_VARIABLE, "")
    return frozenset(code.upper() for code in _SEPARATORS.split(raw) if code)


def normalize_distribution(name: str) -> str:
    """A distribution name as the package index compares them: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).strip().lower()


def distribution_names(variable: str, environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The distribution names in ``variable``, normalized: separated by commas, and also by ``;`` or white space
    (no distribution name contains them, so ``acme-presets other`` means two names, not one that matches nothing)."""
    raw = (os.environ if environ is None else environ).get(variable, "")
    return frozenset(normalize_distribution(name) for name in _SEPARATORS.split(raw) if name)


def is_cluster_variable(name: str) -> bool:
    """Whether an environment variable tells Lightning which cluster (and which rank) it runs on."""
    return name in CLUSTER_VARIABLES or name.startswith(CLUSTER_PREFIXES)
