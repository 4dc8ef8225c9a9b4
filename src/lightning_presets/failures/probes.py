"""Cheap looks at this machine that decide between the causes a failure can have.

Each probe takes the matched text and returns one sentence about this machine (or ``None`` when it has nothing to
say); it never raises, never starts a process and never creates a CUDA context. They run where the failure happened:
inside a preset's run (:mod:`.notes`), and for ``explain`` only with ``--probe`` (the logs may come from another
machine).
"""

from __future__ import annotations

import datetime
import os
import re
import socket
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType

Probe = Callable[[str], "str | None"]

SHM = "/dev/shm"
SHM_ENOUGH = 1 << 30
"""Below this, ``/dev/shm`` is the likely cause of NCCL's shared-memory failures (containers default to 64 MiB)."""


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


def shared_memory(text: str, path: str = SHM) -> str | None:
    """The size, free space and permissions of ``/dev/shm``."""
    try:
        status = os.statvfs(path)
    except OSError as error:
        return f"here {path} cannot be read ({error.strerror or error}): NCCL cannot create its segments there"
    total, free = status.f_frsize * status.f_blocks, status.f_frsize * status.f_bavail
    writable = os.access(path, os.W_OK)
    facts = f"here {path} has {_size(free)} free of {_size(total)}" + ("" if writable else " and is not writable")
    if not writable:
        return f"{facts}: that is the cause"
    if total < SHM_ENOUGH or free < SHM_ENOUGH:
        return f"{facts}: too small for NCCL's segments (give the container --shm-size=16g or --ipc=host)"
    return f"{facts}: enough now, so the failed run's machine or container had less"


def _interfaces() -> set[str]:
    try:
        return {name for _, name in socket.if_nameindex()}
    except OSError:
        return set()


def _named(value: str) -> list[str]:
    """The interface names a ``*_SOCKET_IFNAME`` value asks for (``^`` excludes, ``=`` means an exact name)."""
    if value.startswith("^"):
        return []
    return [part.lstrip("=") for part in value.split(",") if part.strip()]


def _socket_interfaces(variable: str) -> Probe:
    def probe(text: str) -> str | None:
        value = os.environ.get(variable)
        present = _interfaces()
        listing = ", ".join(sorted(present)) or "none found"
        if value is None:
            return f"here {variable} is unset (this machine's interfaces: {listing})"
        missing = [name for name in _named(value) if not any(each.startswith(name) for each in present)]
        if missing:
            return f"here {variable}={value} names {', '.join(missing)}, which this machine does not have ({listing})"
        return f"here {variable}={value} matches an interface of this machine ({listing})"

    return probe


_LIBRARY = re.compile(r"(?<![^\s:'\"])(?P<path>/[^\s:'\"]{1,4096}\.so(?:\.[\d.]+)?)")


def extension_build(text: str) -> str | None:
    """When the extension named in the error was built, against the torch installed here."""
    found = _LIBRARY.search(text)
    try:
        import importlib.util
        from importlib import metadata

        torch_version = metadata.version("torch")
        spec = importlib.util.find_spec("torch")  # finds the package without importing it
        package = Path(spec.origin).parent if spec is not None and spec.origin else None
        torch_installed = (package / "version.py").stat().st_mtime if package is not None else None
    except Exception:  # no torch here: nothing to compare against
        return None
    if found is None or not Path(found.group("path")).exists():
        return f"here torch {torch_version} is installed; rebuild the extension against it"
    path = Path(found.group("path"))
    if package is not None and path.is_relative_to(package):
        return f"here torch {torch_version} is installed and the library is torch's own: reinstall torch whole"
    built = path.stat().st_mtime
    when = datetime.datetime.fromtimestamp(built).strftime("%Y-%m-%d %H:%M")
    if torch_installed is not None and built < torch_installed:
        installed = datetime.datetime.fromtimestamp(torch_installed).strftime("%Y-%m-%d %H:%M")
        return (
            f"here {path.name} was built on {when}, before torch {torch_version} was installed ({installed}): it was "
            "compiled against an earlier torch"
        )
    return f"here {path.name} was built on {when}; torch {torch_version} is installed"


PROBES: Mapping[str, Probe] = MappingProxyType(
    {
        "shared_memory": shared_memory,
        "nccl_interfaces": _socket_interfaces("NCCL_SOCKET_IFNAME"),
        "gloo_interfaces": _socket_interfaces("GLOO_SOCKET_IFNAME"),
        "extension_build": extension_build,
    }
)
"""The probes a signature may name."""


def run_probe(name: str | None, text: str) -> str | None:
    """The named probe's sentence; ``None`` when there is no such probe or it failed (a probe never raises)."""
    probe = PROBES.get(name) if name else None
    if probe is None:
        return None
    try:
        return probe(text)
    except Exception:  # a probe that fails says nothing: it must never hide the failure it explains
        return None
