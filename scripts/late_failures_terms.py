"""The inventory's vocabulary, shared by the inventory (``late_failures``) and its document (``late_failures_doc``):
the statuses a site can have, the areas of Lightning's sources, the releases a site is recorded under."""

from __future__ import annotations

STATUSES = ("construction", "preempted", "unknowable", "open")
LIGHTNING_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("connectors", ("fabric/connector.py", "pytorch/trainer/connectors/accelerator_connector.py")),
    ("launchers", ("fabric/strategies/launchers/*.py", "pytorch/strategies/launchers/*.py")),
    ("strategies", ("fabric/strategies/*.py", "pytorch/strategies/*.py")),
    ("precision", ("fabric/plugins/precision/*.py", "pytorch/plugins/precision/*.py")),
    ("environments", ("fabric/plugins/environments/*.py", "pytorch/plugins/environments/*.py")),
)
DEEPSPEED_AREA = "deepspeed-config"
SCOPES = ("lightning", "deepspeed", "torch")
"""The releases a site is recorded under: Lightning's, DeepSpeed's (its parser and engine) and torch's."""


def _scope(key: str) -> str:
    package = key.split(".")[0].split(":")[0]
    return package if package in SCOPES else "lightning"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))
