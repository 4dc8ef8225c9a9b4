"""The evidence references (``tests/references.py``) agree with the declarations, and ``src`` names no file of
``tests/`` or ``benchmarks/``.

A declaration says how far its proof goes and what fails (``evidence="runtime: ..."``); the mapping names the test or
check (``PROOFS`` derived from the ``proves`` marks). Every error with executed evidence has a proof, every proof
belongs to a declaration of its kind, and every file and function an entry names exists (read by AST, nothing is run).
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Mapping
from pathlib import Path

import errors_doc as _docs

from lightning_presets.core.versions import CLAIMS as CLAIM_KEYS

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = _docs.references()
NODE = re.compile(r"^([\w/.-]+\.py)(?:::(\w+))?$")
PATH = re.compile(r"(?<![\w/.-])((?:tests|benchmarks)/[\w/.-]*\w)(?:::(\w+))?")
"""A path of this repository's ``tests/`` or ``benchmarks/`` (not one inside a URL), with its ``::function``."""
PROVED = ("runtime: ", "gpu: ")


def _declared() -> dict[str, tuple[str, str]]:
    """Every declared code (rules of the built-in presets included): its severity and evidence."""
    entries = [*_docs._documented_codes(), *_docs._rule_entries()]
    return {entry.code: (entry.severity, entry.evidence) for entry in entries}


@functools.cache
def _functions(path: Path) -> frozenset[str]:
    """The functions ``path`` defines, and the ``name=`` of what it declares (the GPU harness's ``Check(name=...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    functions = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)}
    declared = {
        node.value.value
        for node in ast.walk(tree)
        if isinstance(node, ast.keyword) and node.arg == "name" and isinstance(node.value, ast.Constant)
    }
    return frozenset(functions | {name for name in declared if isinstance(name, str)})


def missing(reference: str, root: Path = ROOT) -> list[str]:
    """The paths and functions ``reference`` names that do not exist (a node id, or text with paths in it)."""
    named = [found.groups() for found in PATH.finditer(reference)]
    if not named:
        return [f"{reference!r} names no file of tests/ or benchmarks/"]
    problems = []
    for path, function in named:
        file = root / path
        if not file.exists():
            problems.append(f"{path} does not exist")
        elif function and (not file.is_file() or function not in _functions(file)):
            problems.append(f"{path}::{function} does not exist")
    return problems


def proof_problems(declared: Mapping[str, tuple[str, str]], proofs: Mapping[str, str]) -> list[str]:
    """Errors with executed evidence but no proof in the mapping, and entries no such declaration has."""
    proved = {code for code, (severity, evidence) in declared.items() if evidence.startswith(PROVED)}
    problems = [
        f"{code}: its evidence is executed, but no test is marked @pytest.mark.proves({code!r})"
        for code in sorted(proved - set(proofs))
    ]
    for code in sorted(set(proofs) - proved):
        known = f"its evidence is {declared[code][1][:30]!r}" if code in declared else "no such code is declared"
        problems.append(f"{code}: PROOFS has an entry, but {known}")
    for code, node in sorted(proofs.items()):
        if not NODE.match(node) or "::" not in node:
            problems.append(f"{code}: {node!r} is not FILE.py::function")
        problems += [f"{code}: {each}" for each in missing(node)]
    return problems


def cited_problems(declared: Mapping[str, tuple[str, str]], cited: Mapping[str, str]) -> list[str]:
    """Entries of CITED whose code does not cite its source, or whose paths do not exist."""
    problems = []
    for code, text in sorted(cited.items()):
        if not declared.get(code, ("", ""))[1].startswith("source: "):
            problems.append(f"{code}: CITED has an entry, but the code is not declared with a source citation")
        problems += [f"{code}: {each}" for each in missing(text)]
    return problems


def reproduction_problems(declared: Mapping[str, tuple[str, str]], reproductions: Mapping[str, str]) -> list[str]:
    """Signatures reproduced on CPU without an entry, entries of no such signature, and paths that do not exist."""
    from lightning_presets.failures import SIGNATURES, UNKNOWN_EXCEPTION

    reproduced = {s.code for s in (*SIGNATURES, UNKNOWN_EXCEPTION) if s.source.startswith("CPU reproduction: ")}
    problems = [
        f"{code}: reproduced on CPU, but REPRODUCTIONS names nothing"
        for code in sorted(reproduced - set(reproductions))
    ]
    problems += [f"{code}: REPRODUCTIONS has an entry, but no signature {code} is reproduced on CPU"
                 for code in sorted(set(reproductions) - reproduced)]  # fmt: skip
    for code, text in sorted(reproductions.items()):
        problems += [f"{code}: {each}" for each in missing(text)]
    return problems


def claim_problems(records: Mapping[str, Mapping[str, str]], claims: Mapping[str, Mapping[str, str]]) -> list[str]:
    """Claims of ``tested_with`` records without a test in the mapping, and entries with no claim (or no preset)."""
    problems = []
    for preset in sorted(set(records) | set(claims)):
        if preset not in records:
            problems.append(f"{preset}: CLAIMS has an entry, but no built-in preset has that name")
            continue
        made = {key for key, _ in CLAIM_KEYS if records[preset].get(key)}
        tests = claims.get(preset, {})
        problems += [f"{preset}: the claim {key!r} names no test in CLAIMS" for key in sorted(made - set(tests))]
        problems += [f"{preset}: CLAIMS names a test for {key!r}, which the preset does not claim"
                     for key in sorted(set(tests) - made)]  # fmt: skip
        problems += [f"{preset}: {each}" for node in tests.values() for each in missing(node)]
    return problems


def paths_in(root: Path) -> list[str]:
    """``file:line: path`` for every path of ``tests/`` or ``benchmarks/`` that a file under ``root`` names."""
    found = []
    for file in sorted(root.rglob("*")):
        if not file.is_file() or "__pycache__" in file.parts:
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += [f"{file.relative_to(root).as_posix()}:{number}: {hit.group(0)}" for hit in PATH.finditer(line)]
    return found


def _records() -> dict[str, Mapping[str, str]]:
    return {preset.name: preset.tested_with or {} for preset in _docs.builtin_presets()}


def test_every_executed_evidence_has_its_proof_and_every_proof_its_declaration() -> None:
    assert proof_problems(_declared(), REFERENCES.PROOFS) == []


def test_every_citation_and_reproduction_names_files_that_exist() -> None:
    assert cited_problems(_declared(), REFERENCES.CITED) == []
    assert reproduction_problems(_declared(), REFERENCES.REPRODUCTIONS) == []


def test_every_tested_with_claim_has_its_test() -> None:
    assert claim_problems(_records(), REFERENCES.CLAIMS) == []


def test_the_package_names_no_test_or_benchmark_file() -> None:
    assert paths_in(ROOT / "src") == [], "name the file in tests/references.py (or mark the test), not in the package"


def test_the_reference_checks_can_fail(tmp_path: Path) -> None:
    declared = _declared()
    proofs = dict(REFERENCES.PROOFS)
    test = proofs.pop("LP101")
    known = set(proof_problems(declared, REFERENCES.PROOFS))  # none, unless a code was added without its proof yet

    def added(proofs: Mapping[str, str]) -> list[str]:
        return [each for each in proof_problems(declared, proofs) if each not in known]

    assert added(proofs) == ["LP101: its evidence is executed, but no test is marked @pytest.mark.proves('LP101')"]
    ghost = {**proofs, "LP101": test + "_renamed", "LP999": test}
    assert added(ghost) == [
        "LP999: PROOFS has an entry, but no such code is declared",
        f"LP101: {test}_renamed does not exist",
    ]
    moved = {**proofs, "LP101": "tests/nowhere/" + test.removeprefix("tests/")}
    assert added(moved) == [f"LP101: {moved['LP101'].split('::')[0]} does not exist"]
    warning = next(code for code, (severity, _) in declared.items() if severity == "warning")
    assert any("PROOFS has an entry, but its evidence is ''" in each
               for each in proof_problems(declared, {**REFERENCES.PROOFS, warning: test})), warning  # fmt: skip
    assert "LP720: tests/test_no_compat.py does not exist" in cited_problems(
        declared, {"LP720": "tests/test_no_compat.py"}
    )
    assert cited_problems(declared, {"LP101": test})[0].startswith("LP101: CITED has an entry, but")
    assert "LP046: reproduced on CPU, but REPRODUCTIONS names nothing" in reproduction_problems(declared, {})
    records = _records()
    assert claim_problems(records, {**REFERENCES.CLAIMS, "fsdp2": {}}) == [
        "fsdp2: the claim 'construction' names no test in CLAIMS",
        "fsdp2: the claim 'runtime_cpu' names no test in CLAIMS",
    ]
    assert "fsdp2: CLAIMS names a test for 'runtime_gpu', which the preset does not claim" in claim_problems(
        records, {**REFERENCES.CLAIMS, "fsdp2": {**REFERENCES.CLAIMS["fsdp2"], "runtime_gpu": test}}
    )
    (tmp_path / "module.py").write_text(
        '"""See tests/evidence/test_x.py::test_y and https://github.com/o/r/blob/main/benchmarks/a.md."""\n'
        'CHECK = "benchmarks/gpu/gpu_checks.py"\n',
        encoding="utf-8",
    )
    assert paths_in(tmp_path) == [
        "module.py:1: tests/evidence/test_x.py::test_y",
        "module.py:2: benchmarks/gpu/gpu_checks.py",
    ]


def test_the_proofs_are_derived_from_the_marks(tmp_path: Path) -> None:
    """``PROOFS`` is what the ``proves`` marks and the GPU checks say: a test named after its code first, then the
    first in path and file order; a GPU check only where no test proves the code."""
    folder = tmp_path / "tests" / "strategies"
    folder.mkdir(parents=True)
    (folder / "test_rules.py").write_text(
        "import pytest\n\n\n@pytest.mark.proves('LP002', 'LP001')\ndef test_two(proof): ...\n\n\n"
        "@pytest.mark.proves('LP002')\ndef test_lp002_named(proof): ...\n\n\n"
        "@pytest.mark.distributed\ndef test_unmarked(): ...\n",
        encoding="utf-8",
    )
    (folder / "helpers.py").write_text("@pytest.mark.proves('LP003')\ndef test_not_a_test_module(): ...\n")
    gpu = tmp_path / "benchmarks" / "gpu"
    gpu.mkdir(parents=True)
    (gpu / "gpu_checks.py").write_text(
        "CHECKS = [Check(name='proof_lp001', proves=('LP001',)), Check(name='proof_lp004', proves=('LP004',)),\n"
        "          Check(name='speed', what='no proof')]\n",
        encoding="utf-8",
    )
    tests, checks = REFERENCES.proving_tests(tmp_path), REFERENCES.gpu_proofs(tmp_path)
    assert tests == {
        "tests/strategies/test_rules.py::test_two": ("LP002", "LP001"),
        "tests/strategies/test_rules.py::test_lp002_named": ("LP002",),
    }
    assert checks == {
        "benchmarks/gpu/gpu_checks.py::proof_lp001": ("LP001",),
        "benchmarks/gpu/gpu_checks.py::proof_lp004": ("LP004",),
    }
    assert REFERENCES.proofs(tests, checks) == {
        "LP001": "tests/strategies/test_rules.py::test_two",
        "LP002": "tests/strategies/test_rules.py::test_lp002_named",
        "LP004": "benchmarks/gpu/gpu_checks.py::proof_lp004",
    }
    assert REFERENCES.proofs(REFERENCES.proving_tests(), REFERENCES.gpu_proofs()) == REFERENCES.PROOFS
    assert "LP101" in REFERENCES.PROOFS
