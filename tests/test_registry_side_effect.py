"""The documented side effect: installing the package adds its preset names to Lightning's four registries, and
``LIGHTNING_PRESETS_AUTOLOAD=0`` gives Lightning's own set back (what Lightning's
``tests_fabric/strategies/test_registry.py::test_available_strategies_in_registry`` compares)."""

from __future__ import annotations

import json

from helpers import Started, start_python
from lightning_presets.core.namespaces import NAMESPACES
from lightning_presets.registry.catalog import lightning_builtin_names, strategy_catalog

# No import of lightning_presets here: with autoload off, importing it registers explicitly.
NAMES = """
import importlib, json
names = {}
for target, module, attribute in TARGETS:
    names[target] = sorted(getattr(importlib.import_module(module), attribute))
print("NAMES " + json.dumps(names))
""".replace("TARGETS", repr([(ns.target, ns.strategies_module, ns.registry_attr) for ns in NAMESPACES]))


def _names(started: Started) -> dict[str, set[str]]:
    result = started.result()
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("NAMES "))
    return {target: set(names) for target, names in json.loads(line.removeprefix("NAMES ")).items()}


def test_installed_package_adds_exactly_its_names_and_autoload_off_restores_lightnings() -> None:
    presets = strategy_catalog().presets
    # Two fresh interpreters (the variable is read at start-up, and no import of ours may come first), side by side.
    starting_on, starting_off = (
        start_python(NAMES, env={}),
        start_python(NAMES, env={"LIGHTNING_PRESETS_AUTOLOAD": "0"}),
    )
    on, off = _names(starting_on), _names(starting_off)
    for namespace in NAMESPACES:
        ours = {name for name, preset in presets.items() if namespace.kind in preset.kinds}
        assert ours, namespace.target
        assert on[namespace.target] - off[namespace.target] == ours
        assert off[namespace.target] == on[namespace.target] - ours
        assert off[namespace.target] <= lightning_builtin_names(read_missing=True)  # Lightning's own, none of ours
        assert not off[namespace.target] & set(presets)
