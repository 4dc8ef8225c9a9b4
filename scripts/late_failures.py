"""The inventory of Lightning's, DeepSpeed's and torch's late failures, and ``docs/late-failures.md``.

Every ``raise`` and every warning call in the installed Lightning's strategies, precision plugins, connectors,
launchers and cluster environments (``lightning.pytorch`` and ``lightning.fabric``) is a site, found by reading the
source (``late_failures_sites``). Whether a site can fire while ``Trainer(...)``/``Fabric(...)`` is constructed is
decided by evidence: a fresh interpreter constructs a broad sample of configurations on simulated hardware with
every line of those files traced (``late_failures_sample``). DeepSpeed's sites are those of the functions its config
parser (``DeepSpeedConfig``) runs on the configs Lightning's DeepSpeedStrategy passes. Beyond Lightning, DeepSpeed's
engine and ZeRO optimizers' initialisation and torch's FSDP1, FSDP2, DDP, DTensor and env:// rendezvous are areas of
entry points and the functions they call (``late_failures_backends``), recorded under the installed DeepSpeed and
torch releases; the settings both sides set and the launch variables are tables (``late_failures_tables``).

Each site's status is reviewed data in ``late_failures.yaml``:

- ``construction``: Lightning raises (or warns) it itself while the Trainer/Fabric is constructed (checked against
  the trace: the line deciding it executes in the sample; a backend's site: ``note`` names the Lightning site of
  status ``construction`` that rejects the same input first);
- ``preempted``: a preset guard rejects the configuration first, at the latest at construction (``codes``);
- ``unknowable``: it depends on what does not exist before ``fit``, or Lightning's call never reaches it (``why``);
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
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import late_failures_doc
import yaml  # type: ignore[import-untyped,unused-ignore]  # stubs are optional
from late_failures_backends import backend_files, backend_sites, package_dir, site_phases
from late_failures_sites import Site, sites_in
from late_failures_terms import DEEPSPEED_AREA, LIGHTNING_AREAS, SCOPES, STATUSES, _scope, _version_key

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(__file__).with_name("late_failures.yaml")
DOC = ROOT / "docs" / "late-failures.md"
SAMPLE = Path(__file__).with_name("late_failures_sample.py")

EARLY_STAGES = ("catalog", "options", "construction")
"""Stages at which a code fires no later than ``Trainer(...)``/``Fabric(...)`` returns."""
NOT_A_FAILURE = "not-a-failure"
MAYBE_NO_FAILURE = ("warn", "validator", "deprecated", "log")
"""The kinds of site that may be no failure at all (a hint, a check that rewrites nothing, a rename that keeps)."""
FIRST = "Lightning raises first: "
"""How a backend site's ``note`` names the Lightning site that rejects the same input at construction."""
TODO = "todo"

STANDALONE = {"lightning_fabric": "fabric", "pytorch_lightning": "pytorch"}
"""The standalone packages and the ``lightning`` subpackage each is a copy of."""


# --- the sites of the installed packages ---------------------------------------------------------------------------


def installed_version(name: str) -> str | None:
    from importlib import metadata

    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return None
    return version.split("+")[0]  # torch's local build tag (2.13.0+cpu, +cu128) names the same source


def lightning_files(package: str = "lightning") -> dict[Path, tuple[str, str]]:
    """Each source file of the inventoried areas: ``{path: (area, module)}``, modules named as in ``lightning``."""
    base = package_dir(package)
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
        if package_dir(package) is None:
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
    """Executed lines per traced source file while constructing (Lightning's areas and the backends' files)."""
    deepspeed_lines: dict[str, set[int]]
    """Executed lines of DeepSpeed's files while its config parser runs."""
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
    parsed = {name: set(numbers) for name, numbers in report["deepspeed_lines"].items()}
    return Trace(lines, parsed, report["cases"], report["outcomes"], report["deepspeed_configs"],
                 report["deepspeed_models"])  # fmt: skip


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
# Lightning's, DeepSpeed's and torch's late failures: one entry per site (scripts/late_failures.py explains them).
# Machine fields (area, kind, message, versions) come from `python scripts/late_failures.py --record`, run under each
# supported Lightning (DeepSpeed and torch: their installed releases); the review fields are edited by hand:
#   status: construction | preempted (codes: [LPnnn]) | unknowable (why: ...) | open (guard: ...)
#   later: [LPnnn]   codes that catch it after construction (trainer/model/setup stage, or `check` only)
#   note: ...        anything a reader needs; a backend's site of status construction: `Lightning raises first: <key>`
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


def phase_problems(
    data: Mapping[str, Mapping[str, Any]], phases: Mapping[str, str], version: str, first: frozenset[str] = frozenset()
) -> list[str]:
    """``construction`` exactly for the sites whose deciding line executes while constructing (in ``version``), or
    (``first``) whose input a Lightning site rejects at construction before the backend sees it."""
    problems = []
    for key, found in phases.items():
        entry = data.get(key, {})
        if version not in entry.get("versions", []) or "scope" in entry:
            continue
        claimed = entry.get("status") == "construction"
        if claimed and found != "construction" and key not in first:
            problems.append(f"{key}: status construction, but the trace says {found}")
        if found == "construction" and not claimed:
            problems.append(
                f"{key}: runs at construction (its deciding line executed in the sample), status {entry.get('status')}"
            )
    return problems


def lightning_first(data: Mapping[str, Mapping[str, Any]]) -> frozenset[str]:
    """The backend sites whose ``note`` names a Lightning site of status ``construction`` that rejects their input
    first (``Lightning raises first: <key>``)."""
    found = set()
    for key, entry in data.items():
        note = str(entry.get("note", ""))
        if _scope(key) != "lightning" and note.startswith(FIRST):
            named = note.removeprefix(FIRST).split()[0]
            if data.get(named, {}).get("status") == "construction" and _scope(named) == "lightning":
                found.add(key)
    return frozenset(found)


def documented_codes() -> dict[str, str]:
    """Every LP code the package documents, with its stage: the presets' rules and the other documented codes."""
    import errors_doc

    return {code.code: code.stage for code in errors_doc.declared().values()}


# --- DeepSpeed ------------------------------------------------------------------------------------------------------


def deepspeed_sites(traced: Trace) -> list[Site]:
    """The sites of the functions DeepSpeed's config parser ran in the trace, and of the config models it built
    (their deprecated fields, their unknown-key rejection)."""
    base = package_dir("deepspeed")
    if base is None:
        return []
    reached = set(traced.deepspeed_models)
    sites = []
    for name, lines in traced.deepspeed_lines.items():
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


def render(data: Mapping[str, Mapping[str, Any]]) -> str:
    """``docs/late-failures.md`` from the data alone (``late_failures_doc``)."""
    return late_failures_doc.render(data)


# --- command line ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Installed:
    """The installed releases, their sites and the construction trace."""

    lightning: str | None
    deepspeed: str | None
    torch: str | None
    sites: list[Site]
    deepspeed_sites: list[Site]
    """DeepSpeed's config parser's sites (``deepspeed-config``)."""
    backend_sites: dict[str, list[Site]]
    """The areas beyond Lightning's and the parser's, per scope (``deepspeed``: the engine; ``torch``)."""
    traced: Trace

    def version(self, scope: str) -> str | None:
        return {"lightning": self.lightning, "deepspeed": self.deepspeed, "torch": self.torch}[scope]

    def scope_sites(self, scope: str) -> list[Site]:
        """Every site recorded under ``scope``'s release."""
        own = {"lightning": self.sites, "deepspeed": self.deepspeed_sites}.get(scope, [])
        return [*own, *self.backend_sites.get(scope, [])]


def installed() -> Installed:
    traced = trace([*lightning_files(), *backend_files()])
    lightning, deepspeed = installed_version("lightning"), installed_version("deepspeed")
    sites = lightning_sites() if lightning else []
    parser = deepspeed_sites(traced) if deepspeed else []
    beyond = {package: backend_sites(package) for package in ("deepspeed", "torch")}
    return Installed(lightning, deepspeed, installed_version("torch"), sites, parser, beyond, traced)


def problems(data: Mapping[str, Mapping[str, Any]], found: Installed) -> list[str]:
    """Everything the data gets wrong about the installed releases, the documented codes and the trace."""
    codes = documented_codes()
    issues = [issue for key, entry in data.items() for issue in entry_problems(key, entry, codes)]
    for scope in SCOPES:
        version = found.version(scope)
        if version:
            issues += listing_problems(data, found.scope_sites(scope), version, scope)
    if found.lightning:
        issues += phase_problems(data, phases(found.traced), found.lightning)
        issues += standalone_differences()
    for scope, sites in found.backend_sites.items():
        version = found.version(scope)
        if version:
            issues += phase_problems(data, site_phases(sites, found.traced.lines), version, lightning_first(data))
    if found.deepspeed:
        parser = {site.key for site in found.deepspeed_sites}
        claimed = [k for k in parser if data.get(k, {}).get("status") == "construction"]
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
        for scope in ("deepspeed", "torch"):
            version = found.version(scope)
            if version:
                sites = found.scope_sites(scope)
                changes += record(
                    data, sites, version, scope, site_phases(found.backend_sites[scope], found.traced.lines)
                )
        DATA.write_text(dump(data), encoding="utf-8")
        print("\n".join(changes) or "no change")
        return 0
    if "--phases" in argv:
        found_phases = {**phases(found.traced)}
        for sites in found.backend_sites.values():
            found_phases.update(site_phases(sites, found.traced.lines))
        for key, found_phase in sorted(found_phases.items()):
            print(f"{found_phase}\t{data.get(key, {}).get('status')}\t{key}")
        return 0
    issues = problems(data, found)
    releases = ", ".join(f"{scope} {found.version(scope)}" for scope in SCOPES)
    print("\n".join(issues) or f"the inventory matches {releases}")
    return 1 if issues else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
