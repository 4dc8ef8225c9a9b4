"""What the preset classes' mixins share: reaching the next class of a composed class, typed."""

from __future__ import annotations

from typing import Any


def base(proxy: super) -> Any:
    """``base(super()).hook(...)``: the next class in a composed preset class (a family mixin or Lightning's class).

    Typed ``Any``: the next class is only known once the registry composes ``head + mixin + Lightning class``, and
    mypy does not follow Lightning.
    """
    return proxy
