"""Ranks named the way a person reads a job: ``ranks 8-15 on node gpu-b``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping


def spans(ranks: Iterable[int]) -> str:
    """``0, 2-5, 9`` for ranks 0, 2, 3, 4, 5 and 9."""
    ordered = sorted(set(ranks))
    parts: list[str] = []
    start = previous = None
    for rank in [*ordered, None]:
        if rank is not None and previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = rank
    return ", ".join(parts)


def on_nodes(ranks: Iterable[int], hosts: Mapping[int, str]) -> str:
    """``rank 0 on node a; ranks 8-15 on node gpu-b``: the ranks grouped by the node each runs on."""
    by_host: dict[str, list[int]] = {}
    for rank in sorted(set(ranks)):
        by_host.setdefault(hosts.get(rank, "?"), []).append(rank)
    groups = sorted(by_host.items(), key=lambda item: item[1][0])
    return "; ".join(
        f"{'rank' if len(members) == 1 else 'ranks'} {spans(members)} on node {host}" for host, members in groups
    )
