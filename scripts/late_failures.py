"""The inventory of Lightning's (and DeepSpeed's config parser's) late failures, and ``docs/late-failures.md``.

Every ``raise`` and every warning call in the installed Lightning's strategies, precision plugins, connectors,
launchers and cluster environments (``lightning.pytorch`` and ``lightning.fabric``) is a site, found by reading the
source (``late_failures_sites``). Whether a site can fire while ``Trainer(...)``/``Fabric(...)`` is constructed is
decided by evidence: a fresh interpreter constructs a broad sample of configurations on simulated hardware with
every line of those files traced (``late_failures_sample``). DeepSpeed's sites are those of the functions its config
parser (``DeepSpeedConfig``) runs on the configs Lightning's DeepSpeedStrategy passes.

Each site's status is reviewed data in ``late_failures.yaml``:

- ``construction``: Lightning raises (or warns) it itself while the Trainer/Fabric is constructed (checked against
  the trace: the line deciding it executes in the sample);
- ``preempted``: a preset guard rejects the configuration first, at the latest at construction (``codes``);
- ``unknowable``: it depends on what does not exist before ``fit`` (``why``);
- ``open``: a construction-time guard could reject it but none does yet (``guard``: the misconfiguration).

What is no failure (a warning that announces no ignored input, a validator or renamed field that keeps the value) is
listed with ``scope: not-a-failure`` and a ``why``, instead of a status, so that a new one is still noticed.

``python scripts/late_failures.py`` checks the data against the installed packages and the trace (exit 1 on a
problem); ``--record`` adds the installed releases' sites to the data (new ones with ``status: todo``) and drops
the releases from sites they no longer have; ``--write`` regenerates ``docs/late-failures.md`` from the data alone.

The standalone ``pytorch_lightning`` and ``lightning_fabric`` packages are copies of ``lightning.pytorch`` and
``lightning.fabric`` with their imports renamed: their sites are compared with the unified package's (they must be
the same sites) and share their entries.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped,unused-ignore]  # stubs are optional
from late_failures_sites import Site, sites_in

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).with_name("late_failures.yaml")
DOC = ROOT / "docs" / "late-failures.md"
SAMPLE = Path(__file__).with_name("late_failures_sample.py")

STATUSES = ("construction", "preempted", "unknowable", "open")
EARLY_STAGES = ("catalog", "options", "construction")
"""Stages at which a code fires no later than ``Trainer(...)``/``Fabric(...)`` returns."""
NOT_A_FAILURE = "not-a-failure"
MAYBE_NO_FAILURE = ("warn", "validator", "deprecated")
"""The kinds of site that may be no failure at all (a hint, a check that rewrites nothing, a rename that keeps)."""
TODO = "todo"

LIGHTNING_AREAS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("connectors", ("fabric/connector.py", "pytorch/trainer/connectors/accelerator_connector.py")),
    ("launchers", ("fabric/strategies/launchers/*.py", "pytorch/strategies/launchers/*.py")),
    ("strategies", ("fabric/strategies/*.py", "pytorch/strategies/*.py")),
    ("precision", ("fabric/plugins/precision/*.py", "pytorch/plugins/precision/*.py")),
    ("environments", ("fabric/plugins/environments/*.py", "pytorch/plugins/environments/*.py")),
)
STANDALONE = {"lightning_fabric": "fabric", "pytorch_lightning": "pytorch"}
"""The standalone packages and the ``lightning`` subpackage each is a copy of."""
DEEPSPEED_AREA = "deepspeed-config"


# --- the sites of the installed packages ---------------------------------------------------------------------------


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def installed_version(name: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def lightning_files(package: str = "lightning") -> dict[Path, tuple[str, str]]:
    """Each source file of the inventoried areas: ``{path: (area, module)}``, modules named as in ``lightning``."""
    base = _package_dir(package)
    if base is None:
        return {}
    prefixes = {"lightning": ""} if package == "lightning" else {"": STANDALONE[package] + "/"}
    found: dict[Path, tuple[str, str]] = {}
    for area, patterns in LIGHTNING_AREAS:
        for pattern in patterns:
            for prefix in prefixes.values():
                if prefix and not pattern.startswith(prefix):
                    continue
                relative = pattern[len(prefix) :]
                for path in sorted(base.glob(relative)):
                    if path in found:
                        continue
                    parts = (prefix + str(path.relative_to(base))).removesuffix(".py").split("/")
                    module = ".".join(["lightning", *parts]).removesuffix(".__init__")
                    found[path] = (area, module)
    return found


def lightning_sites(package: str = "lightning") -> list[Site]:
    """Every site of the installed ``lightning`` (or of a standalone copy, named as in ``lightning``)."""
    sites: list[Site] = []
    for path, (area, module) in lightning_files(package).items():
        found = sites_in(path, area, module)
        if package != "lightning":
            found = [_unrenamed(site) for site in found]
        sites += found
    return sites


def _unrenamed(site: Site) -> Site:
    """A standalone copy's site with the package names in its message as in ``lightning``."""
    message = site.message.replace("pytorch_lightning", "lightning.pytorch").replace(
        "lightning_fabric", "lightning.fabric"
    )
    return dataclasses.replace(site, message=message)


def standalone_differences() -> list[str]:
    """How each installed standalone copy's sites differ from ``lightning``'s (empty: the same sites)."""
    unified = {site.key for site in lightning_sites()}
    problems = []
    for package, sub in STANDALONE.items():
        if _package_dir(package) is None:
            continue
        copy = {site.key for site in lightning_sites(package)}
        ours = {key for key in unified if key.startswith(f"lightning.{sub}.")}
        problems += [f"{package} lacks {key}" for key in sorted(ours - copy)]
        problems += [f"{package} has {key}, lightning does not" for key in sorted(copy - ours)]
    return problems


# --- evidence: what runs while Trainer/Fabric is constructed, and what DeepSpeed's config parser runs ----------------


@dataclass(frozen=True)
class Trace:
    lines: dict[str, set[int]]
    """Executed lines per source file (Lightning's inventoried files and DeepSpeed's parser)."""
    cases: int
    outcomes: dict[str, int]
    deepspeed_configs: int
    deepspeed_models: list[str]
    """``module:Class`` of every pydantic model (and base) the parser built."""


def trace(files: Iterable[Path]) -> Trace:
    """Run the construction sample (and DeepSpeed's parser) in a fresh interpreter, tracing ``files``."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SAMPLE.parent), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(SAMPLE), *map(str, files)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=900,
    )
    if done.returncode:
        raise RuntimeError(f"the construction sample failed:\n{done.stderr[-4000:]}")
    report = json.loads(done.stdout)
    lines = {name: set(numbers) for name, numbers in report["lines"].items()}
    return Trace(lines, report["cases"], report["outcomes"], report["deepspeed_configs"], report["deepspeed_models"])


def phases(traced: Trace, package: str = "lightning") -> dict[str, str]:
    """Each installed Lightning site's phase: ``construction`` when the line deciding it executed in the sample,
    ``unreached-branch`` when its function ran but that line did not, ``after`` when its function never ran."""
    found = {}
    for path, (area, module) in lightning_files(package).items():
        lines = traced.lines.get(str(path), set())
        for site in sites_in(path, area, module):
            if site.decides in lines:
                found[site.key] = "construction"
            else:
                found[site.key] = "unreached-branch" if site.starts in lines else "after"
    return found


# --- data ----------------------------------------------------------------------------------------------------------

HEADER = """\
# Lightning's and DeepSpeed's late failures: one entry per site (scripts/late_failures.py explains the fields).
# Machine fields (area, kind, message, versions) come from `python scripts/late_failures.py --record`, run under each
# supported Lightning; the review fields are edited by hand:
#   status: construction | preempted (codes: [LPnnn]) | unknowable (why: ...) | open (guard: ...)
#   later: [LPnnn]   codes that catch it after construction (trainer/model/setup stage, or `check` only)
#   note: ...        anything a reader needs
# What is no failure (a warning announcing no ignored input, a validator or renamed field that keeps the value):
#   scope: not-a-failure (why: ...), instead of a status.
# docs/late-failures.md is generated from this file: `python scripts/late_failures.py --write`.
"""
MACHINE_FIELDS = ("area", "kind", "message", "versions")
REVIEW_FIELDS = ("status", "codes", "why", "guard", "later", "scope", "note")


def load(path: Path = DATA) -> dict[str, dict[str, Any]]:
    data = yaml.safe_load(path.read_text(encoding="utf-8")) if path.exists() else None
    return dict(data or {})


def dump(data: Mapping[str, Mapping[str, Any]]) -> str:
    """The data file's text: entries sorted by key, machine fields first."""
    ordered = {
        key: {name: data[key][name] for name in (*MACHINE_FIELDS, *REVIEW_FIELDS) if name in data[key]}
        for key in sorted(data)
    }
    body: str = yaml.safe_dump(ordered, sort_keys=False, width=4096, allow_unicode=True, default_flow_style=None)
    return HEADER + "\n" + body


def record(
    data: dict[str, dict[str, Any]],
    sites: Iterable[Site],
    version: str,
    scope: str,
    found_phases: Mapping[str, str] | None = None,
) -> list[str]:
    """Make the entries of ``scope`` (``lightning`` or ``deepspeed``) say which sites ``version`` has.

    A new site is ``construction`` when the trace says so (``found_phases``), else ``todo`` for a reviewer; an entry
    left with no release is removed. Returns what changed.
    """
    changes = []
    present = {site.key: site for site in sites}
    for key, site in present.items():
        if key not in data:
            data[key] = {"status": "construction" if (found_phases or {}).get(key) == "construction" else TODO}
            changes.append(f"new ({data[key]['status']}): {key}")
        entry = data[key]
        entry.update(area=site.area, kind=site.kind, message=site.message)
        entry["versions"] = sorted({*entry.get("versions", []), version}, key=_version_key)
    for key in [key for key in data if _scope(key) == scope and key not in present]:
        versions = [each for each in data[key].get("versions", []) if each != version]
        if versions:
            data[key]["versions"] = versions
        else:
            changes.append(f"gone: {key}")
            del data[key]
    return changes


def _scope(key: str) -> str:
    return "deepspeed" if key.startswith("deepspeed.") else "lightning"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(part) if part.isdigit() else 0 for part in version.split("."))


# --- checks --------------------------------------------------------------------------------------------------------


def entry_problems(key: str, entry: Mapping[str, Any], codes: Mapping[str, str]) -> list[str]:
    """What is wrong with one entry's review fields (``codes``: every documented code and its stage)."""
    status, problems = entry.get("status"), []
    unknown = set(entry) - {*MACHINE_FIELDS, *REVIEW_FIELDS}
    if unknown:
        problems.append(f"{key}: unknown fields {sorted(unknown)}")
    if "scope" in entry:
        if entry["scope"] != NOT_A_FAILURE or entry.get("kind") not in MAYBE_NO_FAILURE:
            problems.append(
                f"{key}: scope {entry['scope']!r}: only a {'/'.join(MAYBE_NO_FAILURE)} can be {NOT_A_FAILURE}"
            )
        if status is not None or not entry.get("why"):
            problems.append(f"{key}: {NOT_A_FAILURE} takes a `why` and no status")
        return problems
    if status not in STATUSES:
        return [*problems, f"{key}: status {status!r} is not one of {', '.join(STATUSES)}"]
    needs = {"preempted": "codes", "unknowable": "why", "open": "guard"}.get(status)
    if needs and not entry.get(needs):
        problems.append(f"{key}: status {status} needs `{needs}`")
    for field in ("codes", "why", "guard"):
        if field in entry and field != needs:
            problems.append(f"{key}: `{field}` belongs to another status than {status}")
    for code in [*entry.get("codes", []), *entry.get("later", [])]:
        if code not in codes:
            problems.append(f"{key}: {code} is no documented code")
    for code in entry.get("codes", []):
        if code in codes and codes[code] not in EARLY_STAGES:
            problems.append(f"{key}: {code} fires at the {codes[code]} stage, after construction: use `later`")
    return problems


def listing_problems(
    data: Mapping[str, Mapping[str, Any]], sites: Iterable[Site], version: str, scope: str
) -> list[str]:
    """Sites of the installed ``version`` the data does not list (or lists with another message), and entries that
    claim ``version`` for a site it does not have."""
    present = {site.key: site for site in sites}
    problems = []
    for key, site in present.items():
        entry = data.get(key)
        if entry is None or version not in entry.get("versions", []):
            problems.append(f"unlisted: {key} ({site.message[:80]!r}); run `python scripts/late_failures.py --record`")
        elif entry.get("message") != site.message or entry.get("area") != site.area:
            problems.append(f"stale message or area: {key}; run `python scripts/late_failures.py --record`")
    for key, entry in data.items():
        if _scope(key) == scope and version in entry.get("versions", []) and key not in present:
            problems.append(f"stale: {key} claims {version}, which has no such site")
    return problems


def phase_problems(data: Mapping[str, Mapping[str, Any]], phases: Mapping[str, str], version: str) -> list[str]:
    """``construction`` exactly for the sites whose deciding line executes while constructing (in ``version``)."""
    problems = []
    for key, found in phases.items():
        entry = data.get(key, {})
        if version not in entry.get("versions", []) or "scope" in entry:
            continue
        claimed = entry.get("status") == "construction"
        if claimed and found != "construction":
            problems.append(f"{key}: status construction, but the trace says {found}")
        if found == "construction" and not claimed:
            problems.append(
                f"{key}: runs at construction (its deciding line executed in the sample), status {entry.get('status')}"
            )
    return problems


def documented_codes() -> dict[str, str]:
    """Every LP code the package documents, with its stage: the presets' rules and the other documented codes."""
    import errors_doc

    return {code.code: code.stage for code in errors_doc.declared().values()}


# --- DeepSpeed ------------------------------------------------------------------------------------------------------


def deepspeed_sites(traced: Trace) -> list[Site]:
    """The sites of the functions DeepSpeed's config parser ran in the trace, and of the config models it built
    (their deprecated fields, their unknown-key rejection)."""
    base = _package_dir("deepspeed")
    if base is None:
        return []
    reached = set(traced.deepspeed_models)
    sites = []
    for name, lines in traced.lines.items():
        path = Path(name)
        if not path.is_relative_to(base):
            continue
        module = ".".join(["deepspeed", *path.relative_to(base).with_suffix("").parts]).removesuffix(".__init__")
        for site in sites_in(path, DEEPSPEED_AREA, module, asserts=True, pydantic=True):
            if site.kind in ("deprecated", "schema"):
                if f"{module}:{site.qualname}" in reached:
                    sites.append(site)
            elif site.starts in lines and site.qualname != "<module>":
                sites.append(site)
    return sites


# --- the document ---------------------------------------------------------------------------------------------------

AREAS = (*(area for area, _ in LIGHTNING_AREAS), DEEPSPEED_AREA)
INTRO = """\
# Late failures: what Lightning and DeepSpeed reject after construction

<!-- Generated by `python scripts/late_failures.py --write` from scripts/late_failures.yaml; a test fails when it
drifts. -->

Every `raise` in the installed Lightning's strategies, precision plugins, connectors, launchers and cluster
environments (`lightning.pytorch` and `lightning.fabric`), every warning there that announces ignored input, and every
check and silent rewrite of DeepSpeed's config parser, with one status each:

- **construction**: Lightning raises (or warns) it itself while `Trainer(...)`/`Fabric(...)` is constructed;
- **preempted**: a preset guard reports it first, at construction or earlier; the codes are named;
- **unknowable**: it depends on what does not exist before `fit` (the model, the optimizers, a checkpoint, a process
  group, a call the user makes at run time);
- **open**: a construction-time guard could report it, but none does yet: the guards still to write.

How it is decided. `scripts/late_failures.py` finds the sites by reading the source: module, qualified function,
exception and a fingerprint of the message's literal text name a site across releases, never a line number. A fresh
interpreter then constructs about 2,000 Trainer/Fabric configurations on simulated hardware (CUDA devices, a TPU host,
an Apple GPU, SLURM/torchelastic/LSF variables, an interactive session; valid ones and ones Lightning rejects) with
every line of those files traced (`scripts/late_failures_sample.py`). A site is **construction** exactly when the line
that decides it (the test of the `if` around it, or its function's first line) executed there; a site whose function
never ran is post-construction; a test fails when the statuses and the trace disagree. DeepSpeed's sites are those of
the functions `deepspeed.runtime.config.DeepSpeedConfig` runs (traced) on the config each of Lightning's and the
presets' DeepSpeed strategies passes for each precision, and on user configs covering every section the parser reads.
Nothing runs DeepSpeed's parser at construction yet, so none of those is **construction**: its **open** entries are
what running the parser at construction must turn into findings.

Scope. The guards act on the presets: a **preempted** site still fails for Lightning's own strategy names. `assert`
statements in Lightning (narrowing of its own state) are not inventoried; DeepSpeed's are, as they reject user config.
The standalone `pytorch_lightning` and `lightning_fabric` are copies of `lightning.pytorch` and `lightning.fabric` with
renamed imports: a test checks that they have the same sites, which share these entries. Codes marked *later* catch a
site after construction (when `fit` starts, at model setup, or in `lightning-presets check` only); they do not make it
**preempted**.
"""


def _present(entry: Mapping[str, Any], version: str) -> bool:
    return version in entry.get("versions", [])


def _in_scope(entry: Mapping[str, Any]) -> bool:
    return "scope" not in entry


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _detail(entry: Mapping[str, Any]) -> str:
    status = entry.get("status")
    parts = []
    if status == "preempted":
        parts.append(", ".join(entry.get("codes", [])))
    elif status in ("unknowable", "open"):
        parts.append(entry.get("why") or entry.get("guard") or "")
    if entry.get("later"):
        parts.append("later: " + ", ".join(entry["later"]))
    if entry.get("note"):
        parts.append(entry["note"])
    return _cell("; ".join(part for part in parts if part))


def _where(key: str) -> str:
    module, qualname = key.split(":")[:2]
    return f"`{module.removeprefix('lightning.')}` `{qualname}`"


def _versions(entry: Mapping[str, Any], all_versions: list[str]) -> str:
    versions = entry.get("versions", [])
    return "all" if versions == all_versions else ", ".join(versions)


def _summary(data: Mapping[str, Mapping[str, Any]], lightning: list[str], deepspeed: list[str]) -> list[str]:
    columns = [*(f"Lightning {v}" for v in lightning), *(f"DeepSpeed {v}" for v in deepspeed)]
    versions = [*lightning, *deepspeed]
    lines = ["| status | " + " | ".join(columns) + " |", "| --- |" + " ---: |" * len(columns)]
    for status in STATUSES:
        counts = []
        for version in versions:
            scope = "deepspeed" if version in deepspeed else "lightning"
            counts.append(sum(1 for k, e in data.items() if _scope(k) == scope and _present(e, version)
                              and _in_scope(e) and e.get("status") == status))  # fmt: skip
        lines.append(f"| {status} | " + " | ".join(map(str, counts)) + " |")
    totals = [sum(1 for k, e in data.items() if _present(e, v) and _in_scope(e)) for v in versions]
    lines.append("| **sites** | " + " | ".join(f"**{n}**" for n in totals) + " |")
    return lines


def _by_area(data: Mapping[str, Mapping[str, Any]]) -> list[str]:
    lines = ["| area | " + " | ".join(STATUSES) + " | total |", "| --- |" + " ---: |" * (len(STATUSES) + 1)]
    for area in AREAS:
        counts = Counter(e.get("status") for e in data.values() if e.get("area") == area and _in_scope(e))
        total = sum(counts.values())
        lines.append(f"| {area} | " + " | ".join(str(counts[s]) for s in STATUSES) + f" | {total} |")
    return lines


def _raised(key: str, entry: Mapping[str, Any]) -> str:
    """What the site raises (``ValueError``), or its kind and what (``warn: rank_zero_warn``)."""
    error = key.split(":")[3]
    kind = entry.get("kind")
    return f"`{_cell(error if kind == 'raise' else f'{kind}: {error}')}`"


def _table(data: Mapping[str, Mapping[str, Any]], keys: list[str], versions: list[str]) -> list[str]:
    lines = ["| where | raises | message | releases | status | detail |", "| --- | --- | --- | --- | --- | --- |"]
    for key in keys:
        entry = data[key]
        raised = _raised(key, entry)
        message = _cell(str(entry.get("message", "")))
        status = entry.get("status") or entry.get("scope", "")
        lines.append(f"| {_where(key)} | {raised} | {message} | {_versions(entry, versions)} | {status} "
                     f"| {_detail(entry) or _cell(entry.get('why', ''))} |")  # fmt: skip
    return lines


def render(data: Mapping[str, Mapping[str, Any]]) -> str:
    """``docs/late-failures.md`` from the data alone (the same text whichever release is installed)."""
    lightning = sorted({v for k, e in data.items() if _scope(k) == "lightning" for v in e.get("versions", [])},
                       key=_version_key)  # fmt: skip
    deepspeed = sorted({v for k, e in data.items() if _scope(k) == "deepspeed" for v in e.get("versions", [])},
                       key=_version_key)  # fmt: skip
    ordered = sorted(data, key=lambda k: (AREAS.index(data[k]["area"]), k))
    in_scope = [k for k in ordered if _in_scope(data[k])]
    out = [INTRO, "## Summary", "", "Sites per status and release:", ""]
    out += _summary(data, lightning, deepspeed)
    out += ["", "Sites per area (all releases together; a site present in several releases counts once):", ""]
    out += _by_area(data)
    open_keys = [k for k in in_scope if data[k].get("status") == "open"]
    out += ["", f"## Open: the guards still to write ({len(open_keys)})", ""]
    out += ["| where | raises | what a guard should reject at construction | releases |", "| --- | --- | --- | --- |"]
    for key in open_keys:
        entry = data[key]
        versions = lightning if _scope(key) == "lightning" else deepspeed
        out.append(f"| {_where(key)} | {_raised(key, entry)} | {_cell(entry['guard'])} "
                   f"| {_versions(entry, versions)} |")  # fmt: skip
    for area in AREAS:
        keys = [k for k in in_scope if data[k]["area"] == area]
        versions = deepspeed if area == DEEPSPEED_AREA else lightning
        title = "DeepSpeed's config parser" if area == DEEPSPEED_AREA else f"Lightning: {area}"
        out += ["", f"## {title} ({len(keys)})", "", *_table(data, keys, versions)]
    excluded = [k for k in ordered if not _in_scope(data[k])]
    out += ["", f"## Not failures ({len(excluded)})", "",
            "Warnings that announce no ignored input, validators and renamed fields that keep the value: listed so "
            "that a new one is noticed; they take no status.", ""]  # fmt: skip
    out += _table(data, excluded, lightning)
    return "\n".join(out) + "\n"


# --- command line ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """The installed releases, their sites and the construction trace."""

    lightning: str | None
    deepspeed: str | None
    sites: list[Site]
    deepspeed_sites: list[Site]
    traced: Trace


def installed() -> Installed:
    traced = trace(lightning_files())
    lightning, deepspeed = installed_version("lightning"), installed_version("deepspeed")
    sites = lightning_sites() if lightning else []
    return Installed(lightning, deepspeed, sites, deepspeed_sites(traced) if deepspeed else [], traced)


def problems(data: Mapping[str, Mapping[str, Any]], found: Installed) -> list[str]:
    """Everything the data gets wrong about the installed releases, the documented codes and the trace."""
    codes = documented_codes()
    issues = [issue for key, entry in data.items() for issue in entry_problems(key, entry, codes)]
    if found.lightning:
        issues += listing_problems(data, found.sites, found.lightning, "lightning")
        issues += phase_problems(data, phases(found.traced), found.lightning)
        issues += standalone_differences()
    if found.deepspeed:
        issues += listing_problems(data, found.deepspeed_sites, found.deepspeed, "deepspeed")
        claimed = [k for k, e in data.items() if _scope(k) == "deepspeed" and e.get("status") == "construction"]
        issues += [
            f"{key}: status construction, but nothing parses DeepSpeed's config at construction" for key in claimed
        ]
    return issues


def main(argv: list[str]) -> int:
    data = load()
    if "--write" in argv:
        DOC.write_text(render(data), encoding="utf-8")
        return 0
    found = installed()
    if "--record" in argv:
        changes = []
        if found.lightning:
            changes += record(data, found.sites, found.lightning, "lightning", phases(found.traced))
        if found.deepspeed:
            changes += record(data, found.deepspeed_sites, found.deepspeed, "deepspeed")
        DATA.write_text(dump(data), encoding="utf-8")
        print("\n".join(changes) or "no change")
        return 0
    if "--phases" in argv:
        for key, found_phase in sorted(phases(found.traced).items()):
            print(f"{found_phase}\t{data.get(key, {}).get('status')}\t{key}")
        return 0
    issues = problems(data, found)
    print("\n".join(issues) or f"the inventory matches Lightning {found.lightning}, DeepSpeed {found.deepspeed}")
    return 1 if issues else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
