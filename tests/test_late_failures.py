"""The inventory of late failures (``scripts/late_failures.py``, ``docs/late-failures.md``).

It lists every site of the installed Lightning, of DeepSpeed's config parser, engine and ZeRO optimizers and of torch's
FSDP1/FSDP2/DDP/DTensor/env:// areas, each status agrees with the traced construction sample, every code it names
exists (and fires no later than construction where it claims to pre-empt), the settings and launch variables tables
match the installed sources, and the document is generated from the data.
"""

from __future__ import annotations

import ast
import shutil
import textwrap
from pathlib import Path
from typing import Any

import late_failures as lf
import late_failures_backends as backends
import late_failures_tables as tables
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
    assert lf.listing_problems(data, installed.scope_sites("deepspeed"), installed.deepspeed, "deepspeed") == []
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


# --- beyond Lightning: DeepSpeed's engine and ZeRO optimizers, torch's FSDP1/FSDP2/DDP/DTensor/env:// --------------


def _needs(found: lf.Installed, scope: str) -> str:
    version = found.version(scope)
    if version is None:
        pytest.skip(f"{scope} is not installed")
    return version


@pytest.mark.parametrize("scope", ["deepspeed", "torch"])
def test_every_site_of_the_backends_areas_is_listed(
    data: dict[str, dict[str, Any]], installed: lf.Installed, scope: str
) -> None:
    version = _needs(installed, scope)
    sites = installed.backend_sites[scope]
    areas = {area.name for area in backends.AREAS if area.package == scope}
    assert {site.area for site in sites} == areas, "an area found no site: its entry points moved"
    assert len(sites) > {"deepspeed": 80, "torch": 90}[scope]
    assert lf.listing_problems(data, installed.scope_sites(scope), version, scope) == []


def test_no_backend_site_runs_while_constructing(data: dict[str, dict[str, Any]], installed: lf.Installed) -> None:
    for scope, sites in installed.backend_sites.items():
        phases = backends.site_phases(sites, installed.traced.lines)
        assert set(phases.values()) <= {"after"}, [key for key, phase in phases.items() if phase != "after"]
        version = installed.version(scope)
        assert version is not None
        assert lf.phase_problems(data, phases, version, lf.lightning_first(data)) == []


def test_a_backend_site_claims_construction_only_when_a_lightning_site_raises_first(
    data: dict[str, dict[str, Any]],
) -> None:
    first = lf.lightning_first(data)
    claimed = {k for k, e in data.items() if lf._scope(k) == "torch" and e.get("status") == "construction"}
    assert claimed
    assert claimed <= first
    key = sorted(claimed)[0]
    version = data[key]["versions"][0]
    broken = {**data, key: {**data[key], "note": lf.FIRST + "lightning.fabric.strategies.fsdp:no_such_site"}}
    assert lf.phase_problems(broken, {key: "after"}, version, lf.lightning_first(broken)) == [
        f"{key}: status construction, but the trace says after"
    ]


def _rendezvous_copy(tmp_path: Path, insert: str, after: str = "    rank: int\n") -> Path:
    """A copy of the installed torch's rendezvous module, under a fake package root, with ``insert`` placed."""
    base = backends.package_dir("torch")
    if base is None:
        pytest.skip("torch is not installed")
    source = backends.module_path(base, "torch", "torch.distributed.rendezvous").read_text(encoding="utf-8")
    assert source.count(after) == 1
    copy = tmp_path / "torch" / "distributed" / "rendezvous.py"
    copy.parent.mkdir(parents=True)
    copy.write_text(source.replace(after, insert + after, 1), encoding="utf-8")
    return tmp_path / "torch"


def _rendezvous() -> backends.Area:
    return next(area for area in backends.AREAS if area.name == "torch-rendezvous")


def test_a_site_a_new_torch_adds_to_a_chain_is_reported_unlisted(
    data: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """A raise in the env:// handler, and one in a helper the handler starts to call: both new sites."""
    version = lf.installed_version("torch")
    assert version is not None
    helper = 'def _check_master(url):\n    raise ValueError("a helper a new release calls")\n\n\n'
    base = _rendezvous_copy(tmp_path, '    _check_master(url)\n    raise ValueError("a new site")\n')
    source = (base / "distributed" / "rendezvous.py").read_text(encoding="utf-8")
    (base / "distributed" / "rendezvous.py").write_text(
        source.replace("def _env_rendezvous_handler(", helper + "def _env_rendezvous_handler(", 1), encoding="utf-8"
    )
    ours = backends.area_sites(_rendezvous(), base)
    others = [site for site in backends.backend_sites("torch") if site.area != "torch-rendezvous"]
    problems = lf.listing_problems(data, [*others, *ours], version, "torch")
    assert sorted(problem.split(" (")[0] for problem in problems) == [
        "unlisted: torch.distributed.rendezvous:_check_master:raise:ValueError:"
        + fingerprint("a helper a new release calls"),
        "unlisted: torch.distributed.rendezvous:_env_rendezvous_handler:raise:ValueError:" + fingerprint("a new site"),
    ]


def test_a_site_a_new_torch_removes_is_reported_stale(data: dict[str, dict[str, Any]]) -> None:
    version = lf.installed_version("torch")
    sites = backends.backend_sites("torch")
    assert version is not None
    assert sites
    gone = next(site for site in sites if site.area == "torch-ddp")
    problems = lf.listing_problems(data, [site for site in sites if site is not gone], version, "torch")
    assert problems == [f"stale: {gone.key} claims {version}, which has no such site"]


def test_hooks_a_function_registers_are_not_followed_but_a_nested_function_it_calls_is(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "m.py").write_text(
        textwrap.dedent(
            """\
            from pkg.h import helper as renamed

            class Engine:
                def __init__(self, flag):
                    def check():
                        if flag:
                            raise ValueError("nested, called")
                    check()
                    self.register(lambda: self.later())
                    renamed(flag)
                    if flag:
                        logger.info("falling back to the default, value ignored")
                        logger.info("step 3")
                        self._log_and_throw(TypeError, "thrown through DDP's helper")
                        _p_assert(flag, "a torch assertion")

                def register(self, hook):
                    def wrapper():
                        raise RuntimeError("a hook's site, not followed")
                    return wrapper

                def later(self):
                    raise RuntimeError("runs when the hook fires")
            """
        ),
        encoding="utf-8",
    )
    (package / "h.py").write_text("def helper(flag):\n    assert flag, 'imported helper'\n", encoding="utf-8")
    area = backends.Area("x", "pkg", "x", ("pkg.m:Engine.__init__",), ("pkg.m", "pkg.h"))
    assert backends.functions(area, package) == {
        "pkg.m": {"Engine.__init__", "Engine.__init__.<locals>.check", "Engine.register"},
        "pkg.h": {"helper"},
    }
    found = {(site.qualname, site.kind, site.error, site.message) for site in backends.area_sites(area, package)}
    assert found == {
        ("Engine.__init__.<locals>.check", "raise", "ValueError", "nested, called"),
        ("Engine.__init__", "log", "info", "falling back to the default, value ignored"),
        ("Engine.__init__", "raise", "TypeError", "thrown through DDP's helper"),
        ("Engine.__init__", "assert", "_p_assert", "a torch assertion"),
        ("helper", "assert", "AssertionError", "imported helper"),
    }


def test_a_docstring_sentence_that_documents_a_limitation_is_a_site(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "m.py").write_text(
        'class Wrapper:\n    """Wraps.\n\n    Nested use is not supported. It shards.\n    """\n\n'
        "    def __init__(self):\n        pass\n",
        encoding="utf-8",
    )
    area = backends.Area("x", "pkg", "x", ("pkg.m:Wrapper.__init__",), ("pkg.m",))
    (site,) = backends.area_sites(area, package)
    assert (site.qualname, site.kind, site.message) == ("Wrapper", "documented", "Nested use is not supported.")


# --- the tables: settings both sides set, launch variables --------------------------------------------------------


def test_the_tables_rows_have_valid_statuses_and_documented_codes() -> None:
    rows = [*tables.SETTINGS, *tables.VARIABLES]
    assert tables.row_problems(rows, lf.documented_codes(), lf.EARLY_STAGES) == []
    broken = tables.Row("x", "y", "preempted", "", ("LP407",))
    assert tables.row_problems([broken], {"LP407": "trainer"}, lf.EARLY_STAGES) == [
        "x: LP407 fires at the trainer stage: use later"
    ]


def _root(package: str) -> Path:
    """The folder the installed top-level ``package`` is in."""
    found = backends.package_dir(package)
    if found is None:
        pytest.skip(f"{package} is not installed")
    return found.parent


def test_the_settings_name_arguments_and_keys_the_installed_releases_have() -> None:
    _lightning_version()
    parameters, keys = tables.init_parameters(_root("lightning")), tables.deepspeed_keys(_root("deepspeed"))
    assert set(parameters) == set(tables.INIT_OWNERS)
    assert tables.argument_problems(parameters, keys) == []
    parameters["Trainer"].discard("gradient_clip_val")
    assert tables.argument_problems(parameters, keys - {"gradient_clipping"}) == [
        "clipping: `Trainer(gradient_clip_val=)` / `gradient_clipping`: Trainer has no parameter gradient_clip_val",
        "clipping: `Trainer(gradient_clip_val=)` / `gradient_clipping`: DeepSpeed names no config key "
        "'gradient_clipping'",
        "clipping by value: `Trainer(gradient_clip_algorithm='value')` / `gradient_clipping`: DeepSpeed names no "
        "config key 'gradient_clipping'",
    ]


def test_the_variables_are_those_the_environments_and_the_rendezvous_read() -> None:
    version = _lightning_version()
    read = tables.variables_read({"lightning": _root("lightning"), "torch": _root("torch")})
    assert {"MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "WORLD_SIZE", "RANK", "LOCAL_RANK"} <= set(read)
    assert tables.variable_problems(read, version) == []
    changed = {**read, "SLURM_NEW": ("lightning/fabric/plugins/environments/slurm.py",)}
    del changed["USE_LIBUV"]
    assert tables.variable_problems(changed, version) == [
        "variable SLURM_NEW is read by lightning/fabric/plugins/environments/slurm.py but not listed",
        "variable USE_LIBUV is listed but no longer read",
    ]
