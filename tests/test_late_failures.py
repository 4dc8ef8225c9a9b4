"""The inventory of late failures (``scripts/late_failures.py``, ``docs/late-failures.md``).

It lists every site of the installed Lightning and of DeepSpeed's config parser, each status agrees with the traced
construction sample, every code it names exists (and fires no later than construction where it claims to pre-empt),
and the document is generated from the data.
"""

from __future__ import annotations

import ast
import shutil
import textwrap
from pathlib import Path
from typing import Any

import late_failures as lf
import pytest
from late_failures_sites import Site, deciding_line, fingerprint, literal_text, sites_in


@pytest.fixture(scope="module")
def data() -> dict[str, dict[str, Any]]:
    return lf.load()


@pytest.fixture(scope="module")
def installed() -> lf.Installed:
    """The installed releases' sites and the construction trace (a fresh interpreter builds the sample: ~15 s)."""
    # a fresh interpreter: the sample traces Lightning from its import on (sys.settrace before `import lightning`)
    return lf.installed()


def _lightning_version() -> str:
    version = lf.installed_version("lightning")
    if version is None:
        pytest.skip("the unified `lightning` package is not installed")
    return version


def test_every_site_of_the_installed_lightning_is_listed(data: dict[str, dict[str, Any]]) -> None:
    version = _lightning_version()
    sites = lf.lightning_sites()
    assert len(sites) > 200, "the areas' source files were not found"
    assert lf.listing_problems(data, sites, version, "lightning") == []


def _with_extra_raise(tmp_path: Path) -> tuple[Path, str]:
    """A copy of Lightning's DDP strategy (Fabric) with one more ``raise`` in ``setup_environment``."""
    path, (_, module) = next(
        (path, where) for path, where in lf.lightning_files().items() if where[1] == "lightning.fabric.strategies.ddp"
    )
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source)
    method = next(
        node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef) and node.name == "setup_environment"
    )
    lines = source.splitlines(keepends=True)
    indent = " " * method.body[0].col_offset
    lines.insert(method.body[0].lineno - 1, f'{indent}raise ValueError("a site added by a new release")\n')
    copy = tmp_path / path.name
    copy.write_text("".join(lines), encoding="utf-8")
    return copy, module


def test_a_site_a_new_release_adds_is_reported_unlisted(data: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    version = _lightning_version()
    copy, module = _with_extra_raise(tmp_path)
    sites = [site for site in lf.lightning_sites() if site.module != module]
    sites += sites_in(copy, "strategies", module)
    problems = lf.listing_problems(data, sites, version, "lightning")
    assert len(problems) == 1
    assert problems[0].startswith(f"unlisted: {module}:DDPStrategy.setup_environment:raise:ValueError:")


def test_a_site_a_new_release_removes_is_reported_stale(data: dict[str, dict[str, Any]]) -> None:
    version = _lightning_version()
    sites = lf.lightning_sites()
    problems = lf.listing_problems(data, sites[1:], version, "lightning")
    assert problems == [f"stale: {sites[0].key} claims {version}, which has no such site"]


def test_every_entry_has_one_valid_status_and_only_documented_codes(data: dict[str, dict[str, Any]]) -> None:
    codes = lf.documented_codes()
    assert {"LP105", "LP403", "LP700"} <= set(codes)
    assert [problem for key, entry in data.items() for problem in lf.entry_problems(key, entry, codes)] == []
    assert {entry.get("status") for entry in data.values()} <= {*lf.STATUSES, None}


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"status": "preempted", "codes": ["LP999"]}, "LP999 is no documented code"),
        ({"status": "preempted", "codes": ["LP407"]}, "LP407 fires at the trainer stage, after construction"),
        ({"status": "preempted"}, "status preempted needs `codes`"),
        ({"status": "open"}, "status open needs `guard`"),
        ({"status": "unknowable", "guard": "x", "why": "y"}, "`guard` belongs to another status"),
        ({"status": "todo"}, "status 'todo' is not one of"),
        ({"status": "open", "guard": "x", "later": ["LP998"]}, "LP998 is no documented code"),
        ({"kind": "raise", "scope": "not-a-failure", "why": "x"}, "only a warn/validator/deprecated"),
    ],
)
def test_an_entry_that_breaks_the_rules_is_reported(entry: dict[str, Any], expected: str) -> None:
    codes = {"LP105": "options", "LP407": "trainer"}
    problems = lf.entry_problems("site", {"kind": "raise", **entry}, codes)
    assert any(expected in problem for problem in problems), problems


def test_every_preempting_code_is_one_a_preset_rule_or_the_package_declares(data: dict[str, dict[str, Any]]) -> None:
    named = {code for entry in data.values() for code in entry.get("codes", [])}
    assert named, "no site is pre-empted: the data lost its review"
    assert named <= set(lf.documented_codes())


def test_the_document_is_generated_from_the_data(data: dict[str, dict[str, Any]]) -> None:
    committed = lf.DOC.read_text(encoding="utf-8")
    assert committed == lf.render(data), "docs/late-failures.md is stale: run `python scripts/late_failures.py --write`"


def test_the_document_counts_each_status(data: dict[str, dict[str, Any]]) -> None:
    text = lf.render(data)
    open_sites = [key for key, entry in data.items() if entry.get("status") == "open"]
    assert f"## Open: the guards still to write ({len(open_sites)})" in text
    for key in open_sites:
        assert data[key]["guard"].replace("|", "\\|") in text


def test_the_standalone_packages_have_the_same_sites_as_lightning() -> None:
    if not any(lf.lightning_files(package) for package in lf.STANDALONE):
        pytest.skip("neither pytorch_lightning nor lightning_fabric is installed")
    assert lf.standalone_differences() == []


def test_statuses_agree_with_the_construction_trace(data: dict[str, dict[str, Any]], installed: lf.Installed) -> None:
    if installed.lightning is None:
        pytest.skip("the unified `lightning` package is not installed")
    if installed.deepspeed is None:
        pytest.skip("deepspeed is not installed: its strategies stop before the branches the sample must reach")
    phases = lf.phases(installed.traced)
    assert installed.traced.cases > 1500
    assert lf.phase_problems(data, phases, installed.lightning) == []
    unreached = [key for key, phase in phases.items() if phase == "unreached-branch"]
    assert unreached == [], "the sample runs these sites' functions but never their deciding line: extend it"
    construction = [key for key, phase in phases.items() if phase == "construction"]
    assert len(construction) > 100


def test_a_status_the_trace_contradicts_is_reported(data: dict[str, dict[str, Any]]) -> None:
    version = _lightning_version()
    constructed = next(k for k, e in data.items() if e.get("status") == "construction" and version in e["versions"])
    later = next(k for k, e in data.items() if e.get("status") == "unknowable" and version in e["versions"])
    problems = lf.phase_problems(data, {constructed: "after", later: "construction"}, version)
    assert problems == [
        f"{constructed}: status construction, but the trace says after",
        f"{later}: runs at construction (its deciding line executed in the sample), status unknowable",
    ]


def test_every_site_of_deepspeeds_config_parser_is_listed(
    data: dict[str, dict[str, Any]], installed: lf.Installed
) -> None:
    if installed.deepspeed is None:
        pytest.skip("deepspeed is not installed")
    assert installed.traced.deepspeed_configs > 100
    assert len(installed.deepspeed_sites) > 40
    assert lf.listing_problems(data, installed.deepspeed_sites, installed.deepspeed, "deepspeed") == []
    kinds = {site.kind for site in installed.deepspeed_sites}
    assert {"raise", "assert", "validator", "deprecated", "schema", "rewrite"} <= kinds


# --- naming a site ---------------------------------------------------------------------------------------------------


def test_a_fingerprint_ignores_case_whitespace_and_quoting() -> None:
    assert fingerprint("You set `devices=2`  but\n SLURM") == fingerprint("you set 'devices=2' but slurm")
    assert fingerprint("devices") != fingerprint("num_nodes")


def test_literal_text_keeps_the_words_and_marks_the_values() -> None:
    def message(code: str) -> str:
        call = ast.parse(code, mode="eval").body
        assert isinstance(call, ast.Call)
        return literal_text(call.args[0])

    assert message('E(f"got {x!r} for `{name}`")') == "got {} for `{}`"
    assert message('E("a " + "b" "c")') == "a bc"
    assert message('E("{} is not {}".format(a, b))') == "{} is not {}"
    assert message('E("%s is %d" % (a, b))') == "{} is {}"
    assert message("E(message)") == "{message}"


def _only_site(tmp_path: Path, code: str) -> Site:
    path = tmp_path / "module.py"
    path.write_text(textwrap.dedent(code), encoding="utf-8")
    (site,) = sites_in(path, "strategies", "pkg.module")
    return site


def test_the_deciding_line_is_the_first_line_the_condition_evaluates(tmp_path: Path) -> None:
    site = _only_site(
        tmp_path,
        """\
        class S:
            def check(self, flag):
                \"\"\"Doc.\"\"\"
                value = 1
                if (
                    flag == "fsdp"
                ) and value:
                    raise ValueError(f"bad {flag}")
        """,
    )
    assert (site.key.split(":")[1], site.decides, site.starts, site.line) == ("S.check", 6, 4, 8)


def test_repeated_sites_in_one_function_are_numbered(tmp_path: Path) -> None:
    path = tmp_path / "module.py"
    path.write_text(
        "def f(a):\n    if a:\n        raise ValueError('x')\n    raise ValueError('x')\n", encoding="utf-8"
    )
    keys = [site.key for site in sites_in(path, "strategies", "pkg.module")]
    assert keys[1] == keys[0] + "#2"


def test_the_deciding_line_of_a_handler_is_the_guarded_statement() -> None:
    tree = ast.parse("try:\n    x = f()\nexcept E:\n    raise V('no')\n")
    handler = tree.body[0].handlers[0]  # type: ignore[attr-defined]
    assert deciding_line([tree, tree.body[0], handler], handler.body[0]) == 2


def test_the_data_file_round_trips(data: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    copy = tmp_path / "late_failures.yaml"
    shutil.copy(lf.DATA, copy)
    assert lf.dump(lf.load(copy)) == lf.DATA.read_text(encoding="utf-8")


def test_recording_a_release_adds_its_new_sites_and_drops_it_from_the_others(tmp_path: Path) -> None:
    def site(qualname: str, message: str = "bad") -> Site:
        return Site("strategies", "lightning.fabric.strategies.x", qualname, "raise", "ValueError", message, 3, 2, 2)

    kept, gone, built, later = site("A.f"), site("A.g"), site("A.h"), site("A.i")
    data: dict[str, dict[str, Any]] = {
        kept.key: {"status": "unknowable", "why": "w", "versions": ["2.5.6"]},
        gone.key: {"status": "open", "guard": "g", "versions": ["2.6.6"]},
    }
    changes = lf.record(data, [kept, built, later], "2.6.6", "lightning", {built.key: "construction"})
    assert changes == [f"new (construction): {built.key}", f"new (todo): {later.key}", f"gone: {gone.key}"]
    assert data[kept.key] == {"status": "unknowable", "why": "w", "versions": ["2.5.6", "2.6.6"], "area": "strategies",
                              "kind": "raise", "message": "bad"}  # fmt: skip
    assert data[later.key]["status"] == lf.TODO
    assert gone.key not in data
