"""Diagnose mode's report (LP034): where a collective was entered from (:class:`Site`) and the one report a hung
collective prints (:func:`describe`): which ranks are in it, which never entered it and where they are instead."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lightning_presets.core.ranks import on_nodes
from lightning_presets.diagnose.codes import COLLECTIVE_HANG
from lightning_presets.registry import variables


@dataclass(frozen=True, slots=True)
class Site:
    """Where a collective (or a rank's Python code) is: the user's line and the Lightning hook around it."""

    where: str
    """``file.py:87``, the innermost frame outside the libraries."""
    code: str
    """That line's source text."""
    hook: str
    """The Lightning hook being run (``on_train_epoch_end``), or empty."""

    def describe(self) -> str:
        """``self.log("x", v, sync_dist=True) in on_train_epoch_end at train.py:87``."""
        parts = [f"`{self.code}`"] if self.code else []
        if self.hook:
            parts.append(f"in {self.hook}")
        parts.append(f"at {self.where}")
        return " ".join(parts)


def _collective(entry: Mapping[str, Any]) -> str:
    return str(entry.get("label") or f"{entry['op']} #{entry['seq']}")


def _site(entry: Mapping[str, Any] | None) -> str:
    return Site(**entry).describe() if entry else "(unknown)"


def describe(
    hung: Mapping[str, Any],
    answers: Mapping[int, Mapping[str, Any]],
    states: Mapping[int, Mapping[str, Any]],
    limit: float,
    after_first_step: bool,
) -> str:
    """The one report (LP034): the collective, who entered it, who did not and where they are instead."""
    group = [int(rank) for rank in hung["group"]]
    key = ",".join(map(str, group))
    hosts = {rank: str((answers.get(rank) or states.get(rank) or {}).get("host", "?")) for rank in group}
    which = "the job's default group" if group == list(range(len(group))) else f"the group of ranks {key}"
    when = (f"{variables.COLLECTIVE_TIMEOUT_VARIABLE}, after the first step" if after_first_step
            else "the process group's timeout, during set-up and the first step")  # fmt: skip
    section = bool(hung.get("label"))
    if section:  # DDP's/FSDP's own collectives, issued from C++: the ranks idle in them wait for the others
        lines = [f"{COLLECTIVE_HANG.code} error: {_collective(hung)} ({which}, {len(group)} ranks): ranks waited in it "
                 f"more than {limit:g} s with no progress ({when})"]  # fmt: skip
    else:
        lines = [f"{COLLECTIVE_HANG.code} error: {_collective(hung)} of {which} ({len(group)} ranks) waited more "
                 f"than {limit:g} s ({when})"]  # fmt: skip
    entered: dict[str, list[int]] = {}
    elsewhere: list[str] = []
    for rank in group:
        state = answers.get(rank) or states.get(rank)
        current: Any = (state or {}).get("current")
        same = current is not None and ",".join(map(str, current["group"])) == key and current["seq"] == hung["seq"]
        if same and current["op"] == hung["op"]:
            entered.setdefault(_site(current["site"]), []).append(rank)
            continue
        if state is None:
            elsewhere.append(f"  rank {rank} on node {hosts[rank]}: never entered it, and never answered (no "
                             "collective recorded: it may have ended or not started recording)")  # fmt: skip
            continue
        last = state.get("last")
        done = f"its last collective was {_collective(last)} ({_site(last['site'])})" if last else "no collective yet"
        if section:
            done = f"it has done {int(state.get('steps', 0))} optimizer step(s)"
        if current is not None:
            where = f"it waits in {_collective(current)} instead, {_site(current['site'])}"
        elif rank in answers:
            where = f"its code is now at {_site(answers[rank].get('now'))}"
            if answers[rank].get("idle") is not None:
                where += f", with no progress for {float(answers[rank]['idle']):.0f} s"
        else:
            where = "it no longer answers (ended?)"
        elsewhere.append(f"  never entered by rank {rank} on node {hosts[rank]}: {done}; {where}")
    for site, ranks in entered.items():
        lines.append(f"  {'waited in by' if section else 'entered by'} {on_nodes(ranks, hosts)}: {site}")
    lines.extend(elsewhere)
    if section:
        lines.append(
            "  fix: a rank behind in its step (a data source that never returns, a wait for something else, a "
            "rank-dependent number of batches) keeps the others in the step's collectives: make every rank run the "
            "same steps, and see the line above where it stands"
        )
        return "\n".join(lines)
    lines.append(
        "  fix: every rank of a group must enter the same collectives in the same order: a collective under "
        "`if self.global_rank == 0` (self.log(..., sync_dist=True), a barrier, a broadcast) or after a rank-dependent "
        "number of steps hangs the others; log rank 0's value with rank_zero_only=True instead of sync_dist=True, or "
        "make the call on every rank"
    )
    return "\n".join(lines)
