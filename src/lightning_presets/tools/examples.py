"""Execute every rule's documented examples: ``fails`` must raise or warn the rule's code, ``fixed`` must not.

``check_examples("fsdp_offload_ckpt")`` runs each rule of the preset (built-in or a third party's) under the
hardware, cluster and modules its :class:`~lightning_presets.core.codes.Setting` declares: simulated GPUs and
cluster variables, stand-ins for what cannot be installed, modules made unimportable. Nothing trains:
``Trainer.fit`` and ``Fabric.setup``/``setup_module`` run only the guards' ``trainer``, ``model`` and ``setup``
stages, so the model and setup rules are exercised without a process group or a GPU.

The examples run with these names defined: ``torch``, ``nn`` (``torch.nn``), ``lightning_presets``, ``Trainer``
(``lightning.pytorch``) and ``Fabric`` (``lightning.fabric``); anything else they import themselves.
"""

from __future__ import annotations

import contextlib
import functools
import os
import tempfile
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.codes import Setting
from lightning_presets.core.findings import PresetConfigError, PresetWarning, UsageError
from lightning_presets.core.preset import AnyPreset, PrecisionPreset
from lightning_presets.core.rules import Rule
from lightning_presets.guards.precision_rules import with_hardware_rules
from lightning_presets.registry import catalog
from lightning_presets.registry.requirements import DEPENDENCIES
from lightning_presets.tools import simulation
from lightning_presets.tools.check import construct
from lightning_presets.tools.simulation import stand_ins
from lightning_presets.tools.simulation.lightning import dry_runs

PRELUDE = (
    "import torch\nfrom torch import nn\nimport lightning_presets\nfrom lightning.pytorch import Trainer\n"
    "from lightning.fabric import Fabric"
)
"""What every documented example may assume (``docs/errors.md`` states it)."""


@dataclass(frozen=True, slots=True)
class ExampleReport:
    """What :func:`check_examples` ran and what went wrong."""

    preset: str
    checked: int
    """Examples executed (two per rule)."""
    failures: tuple[str, ...]
    """One readable line per example that did not behave as documented."""

    @property
    def ok(self) -> bool:
        return not self.failures


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one example did: the codes it raised or warned, or the exception that is not a finding."""

    codes: frozenset[str]
    error: str | None = None


def _find(name: str) -> AnyPreset:
    found = catalog.strategy_catalog().presets.get(name) or catalog.precision_catalog().presets.get(name)
    if found is None:
        raise UsageError(f"no strategy or precision preset is called {name!r}")
    return found


def rules_of(preset: AnyPreset) -> tuple[Rule, ...]:
    """Every rule the preset runs: its own, and for a precision preset the hardware rules every one gets."""
    return with_hardware_rules(preset) if isinstance(preset, PrecisionPreset) else preset.rules


def check_examples(preset_name: str) -> ExampleReport:
    """Run the ``fails`` and ``fixed`` example of every rule of the preset; see the module docstring."""
    preset = _find(preset_name)
    failures: list[str] = []
    checked = 0
    for each in rules_of(preset):
        for which, source, setting in (
            ("fails", each.fails, each.setting),
            ("fixed", each.fixed, each.fixed_setting or each.setting),
        ):
            checked += 1
            outcome = run_example(source, setting)
            where = f"{preset.name}: {each.code} {which} example"
            if outcome.error is not None:
                failures.append(f"{where} raised {outcome.error}")
            elif which == "fails" and each.code not in outcome.codes:
                failures.append(f"{where} did not raise or warn {each.code} (got {sorted(outcome.codes) or 'none'})")
            elif which == "fixed" and each.code in outcome.codes:
                failures.append(f"{where} still raises or warns {each.code}")
    return ExampleReport(preset=preset.name, checked=checked, failures=tuple(failures))


@functools.lru_cache(maxsize=512)
def run_example(source: str, setting: Setting) -> Outcome:
    """Execute one example under its setting (cached: a rule shared by presets runs once per process)."""
    codes: set[str] = set()
    error = None
    with _setting(setting), dry_runs(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            exec(compile(source, "<documented example>", "exec"), _namespace())  # the rule's own example text
        except PresetConfigError as raised:
            codes.update(finding.code for finding in raised.findings if not finding.conditional)
        except Exception as raised:  # the example is not what the rule says: reported as a failure
            error = f"{type(raised).__name__}: {str(raised).strip().splitlines()[0] if str(raised).strip() else ''}"
    codes.update(w.message.finding.code for w in caught
                 if isinstance(w.message, PresetWarning) and not w.message.finding.conditional)  # fmt: skip
    return Outcome(codes=frozenset(codes), error=error)


def _namespace() -> dict[str, Any]:
    import torch
    from lightning.fabric import Fabric
    from lightning.pytorch import Trainer

    import lightning_presets

    names = {"torch": torch, "nn": torch.nn, "lightning_presets": lightning_presets}
    return {**names, "Trainer": Trainer, "Fabric": Fabric}


@contextlib.contextmanager
def _setting(setting: Setting) -> Iterator[None]:
    """The simulated node and cluster, stand-ins and missing modules; in a scratch working directory."""
    # Installed optional dependencies load first, for real: some probe CUDA when imported.
    installed = tuple(name for name in DEPENDENCIES if name not in setting.missing)
    simulation.import_before_simulating(installed)
    with contextlib.ExitStack() as stack:
        stack.enter_context(construct.session())
        stack.enter_context(_scratch_directory())
        stack.enter_context(stand_ins.replaced_modules(dict.fromkeys(setting.missing)))
        stack.enter_context(stand_ins.standing_in(*setting.simulated))
        devices = max(setting.gpus, 1)
        stack.enter_context(simulation.simulated_cluster(setting.cluster, devices, setting.nodes))
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)  # restored by the cluster simulation's environment guard
        stack.enter_context(
            simulation.simulated_cuda(setting.gpus, setting.capability, setting.memory_bytes, preload=installed)
        )
        if "mps" not in setting.simulated:
            stack.enter_context(simulation.without_mps())
        yield


@contextlib.contextmanager
def _scratch_directory() -> Iterator[None]:
    """Lightning may create log folders; they go to a temporary directory, never the caller's."""
    with tempfile.TemporaryDirectory(prefix="lp-examples-") as directory:
        previous = os.getcwd()
        os.chdir(directory)
        try:
            yield
        finally:
            os.chdir(previous)
