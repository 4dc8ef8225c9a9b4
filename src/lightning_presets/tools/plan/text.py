"""Counts and sizes as ``plan`` reads and writes them: ``7B``, ``26.5 GiB``, ``80GiB``."""

from __future__ import annotations

import math
import re

GIB = 2**30
MAX_PARAMS = 10**18
_COUNT_SUFFIX = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9, "t": 10**12}


def parse_count(text: str) -> int:
    """``7B``, ``1.3b``, ``350M``, ``125k``, ``7e9`` or ``7000000000`` -> a parameter count."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([a-zA-Z]?)\s*", text)
    if not match or match.group(2).lower() not in _COUNT_SUFFIX:
        raise ValueError(f"{text!r} is not a parameter count such as 7B, 350M or 7000000000")
    value = float(match.group(1)) * _COUNT_SUFFIX[match.group(2).lower()]
    if not math.isfinite(value) or value > MAX_PARAMS:
        raise ValueError(f"{text!r} is more parameters than any model has (at most {MAX_PARAMS:.0e})")
    if round(value) <= 0:
        raise ValueError(f"{text!r} is not a positive parameter count")
    return round(value)


def format_count(count: int | None) -> str:
    if count is None:
        return "?"
    for suffix, size in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if count >= size:
            return f"{count / size:.3g}{suffix}"
    return str(count)


def format_bytes(size: float) -> str:
    """``26.5 GiB``, ``812.3 KiB``: one decimal in the largest unit that keeps the number at least 1."""
    for suffix, unit in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= unit:
            return f"{size / unit:.1f} {suffix}"
    return f"{size:.0f} B"


def format_size(size: int) -> str:
    """Bytes as the ``--gpu-memory`` flag takes them (``80GiB`` when exact)."""
    for suffix, unit in (("TiB", 2**40), ("GiB", GIB), ("MiB", 2**20), ("KiB", 2**10)):
        if size % unit == 0:
            return f"{size // unit}{suffix}"
    return str(size)


def format_size_up(size: float) -> str:
    """At least ``size`` bytes, in whole GiB as ``--cpu-memory`` takes them."""
    return f"{math.ceil(size / GIB)}GiB"
