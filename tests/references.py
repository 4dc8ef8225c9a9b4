# ruff: noqa: E501  (tables of node ids: one id per line, however long)
"""Where the executed proofs live: the test and benchmark paths that the package's declarations only describe.

A declaration in ``src`` says how far its proof goes and what fails, without a path (``evidence="runtime: Lightning
raises ValueError ..."``), so the wheel names no file it lacks. This module names the files: ``docs/errors.md`` and
the README join the two (``scripts/errors_doc.py``, ``scripts/evidence_table.py``), and
``tests/test_evidence_references.py`` checks each entry against the declarations and against the files it names.

``PROOFS`` is derived, never written by hand: each test marked ``@pytest.mark.proves(...)`` anywhere under ``tests/``
(read by AST, nothing is imported or run) and each check of ``benchmarks/gpu/gpu_checks.py`` whose ``proves=`` names
a code. The other tables name what no marker says: a citation's file, a preset's claim, a reproduction.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
GPU_CHECKS = ROOT / "benchmarks" / "gpu" / "gpu_checks.py"
MARKER = "pytest.mark.proves"


def _strings(nodes: Iterable[ast.expr]) -> tuple[str, ...]:
    return tuple(node.value for node in nodes if isinstance(node, ast.Constant) and isinstance(node.value, str))


def marked(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """The codes of a test's ``@pytest.mark.proves(...)``, in the order it names them; empty when it has none."""
    return tuple(
        code
        for decorator in function.decorator_list
        if isinstance(decorator, ast.Call) and ast.unparse(decorator.func) == MARKER
        for code in _strings(decorator.args)
    )


def proving_tests(root: Path = ROOT) -> dict[str, tuple[str, ...]]:
    """``tests/PATH.py::test`` of every module-level test marked ``proves`` under ``root/tests``, with its codes: files
    in path order, tests in file order."""
    found: dict[str, tuple[str, ...]] = {}
    for path in sorted((root / "tests").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if MARKER not in text:
            continue
        for node in ast.parse(text).body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and (codes := marked(node)):
                found[f"{path.relative_to(root).as_posix()}::{node.name}"] = codes
    return found


def gpu_proofs(root: Path = ROOT) -> dict[str, tuple[str, ...]]:
    """``benchmarks/gpu/gpu_checks.py::NAME`` of every ``Check(name=..., proves=(...))`` there, with its codes (read by
    AST: the harness is not imported) under ``root``."""
    found: dict[str, tuple[str, ...]] = {}
    path = root / GPU_CHECKS.relative_to(ROOT)
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.Call):
            continue
        keywords = {keyword.arg: keyword.value for keyword in node.keywords}
        name, proves = keywords.get("name"), keywords.get("proves")
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            continue
        if isinstance(proves, ast.Tuple | ast.List) and (codes := _strings(proves.elts)):
            found[f"{path.relative_to(root).as_posix()}::{name.value}"] = codes
    return found


def proofs(tests: Mapping[str, tuple[str, ...]], gpu: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """Each proven code's proof, the one the docs name: a test named after the code (``test_lp211_...``) before one
    that proves it among others, then the first in ``tests``' order; a GPU check where no test proves the code."""
    chosen: dict[str, str] = {}
    for named_first in (True, False):
        for node, codes in tests.items():
            name = node.rpartition("::")[2]
            for code in codes:
                if code not in chosen and (not named_first or name.startswith(f"test_{code.lower()}_")):
                    chosen[code] = node
    for node, codes in gpu.items():
        for code in codes:
            chosen.setdefault(code, node)
    return dict(sorted(chosen.items()))


PROOFS: dict[str, str] = proofs(proving_tests(), gpu_proofs())
"""Each error's executed proof (its declared evidence is ``runtime: ...`` or ``gpu: ...``): a test marked
``@pytest.mark.proves(CODE)``, or a check of ``benchmarks/gpu/gpu_checks.py`` whose ``proves`` names the code."""

CITED: dict[str, str] = {
    "LP720": "the compatibility tests: tests/test_compat.py",
    "LP730": "tests/test_plan_trace.py::test_planned_peak_and_categories_match_a_real_fit_at_the_allocator shows "
    "that the traced peak matches a real fit's at the allocator (2 gloo processes)",
    "LP802": "GPU check benchmarks/gpu/resume_checks.py",
    "LP803": "GPU check benchmarks/gpu/resume_checks.py",
}
"""What an error whose evidence is still a source citation (``source: ...``) points to in this repository: the docs
append it to the citation."""

CLAIMS: dict[str, dict[str, str]] = {
    "ddp_bf16_compress": {
        "construction": "tests/test_ddp.py::test_bf16_compress_constructs_on_simulated_cuda",
    },
    "ddp_static_graph": {
        "construction": "tests/test_ddp.py::test_static_graph_constructs_in_every_namespace",
        "runtime_cpu": "tests/test_ddp.py::test_static_graph_fit_on_two_processes",
    },
    "deepspeed_zero2_offload": {
        "construction": "tests/test_deepspeed.py::test_zero2_offload_constructs_on_simulated_cuda",
    },
    "deepspeed_zero3_offload_ckpt": {
        "construction": "tests/test_deepspeed.py::test_zero3_offload_ckpt_constructs_for_trainer_and_fabric",
    },
    "fsdp2": {
        "construction": "tests/test_fsdp2.py::test_data_parallel_is_the_whole_world_in_every_namespace",
        "runtime_cpu": "tests/test_fsdp2.py::test_fsdp2_trainer_fit_computes_the_losses_of_ddp",
    },
    "fsdp2_offload_ckpt": {
        "construction": "tests/test_fsdp2.py::test_data_parallel_spans_nodes_on_simulated_cuda",
        "runtime_cpu": "tests/test_fsdp2.py::test_fsdp2_offload_ckpt_trainer_fit_offloads_and_recomputes",
    },
    "fsdp_grad_op": {
        "construction": "tests/test_fsdp_family.py::test_grad_op_constructs_in_every_namespace",
    },
    "fsdp_hybrid_shard": {
        "construction": "tests/test_fsdp_family.py::test_hybrid_fills_the_mesh_from_nodes_and_devices",
    },
    "fsdp_offload_ckpt": {
        "construction": "tests/test_fsdp_offload_ckpt.py::test_constructs_on_simulated_cuda_in_every_namespace",
    },
    "tp2d_hybrid": {
        "construction": "tests/test_tp2d_hybrid.py::test_constructs_in_every_namespace_on_simulated_cuda",
        "runtime_cpu": "tests/test_tp2d_hybrid.py::test_trainer_by_name_trains_tensor_parallel_1x2_with_autoload_only",
    },
    "xla_fsdp_ckpt": {
        "construction": "tests/test_xla_torch_xla.py::test_xla_fsdp_ckpt_builds_guards_and_wraps_on_real_torch_xla",
    },
    "bf16-fp32-reduce": {
        "construction": "tests/test_precision_presets.py::test_bf16_fp32_reduce_is_accepted_by_the_fsdp_preset",
    },
    "fp8-te": {
        "construction": "tests/test_precision_presets.py::test_fp8_te_builds_lightnings_plugin",
    },
    "fp8-torchao": {
        "construction": "tests/test_precision_presets.py::test_fp8_torchao_converts_divisible_linears_and_names_the_rest",
    },
    "nf4-bnb": {
        "construction": "tests/test_precision_presets.py::test_nf4_bnb_builds_double_quantized_nf4",
    },
}
"""For each built-in preset's ``tested_with`` claim (``construction``, ``runtime_cpu``, ``runtime_gpu``), the test that
makes it: the README's "What has been run" table names it."""

REPRODUCTIONS: dict[str, str] = {
    "LP046": "tests/scripts/explain_rank1_raises.py (tests/test_explain_run.py)",
    "LP047": "tests/scripts/explain_rank1_raises.py when rank 1 exits at once (tests/test_explain.py)",
    "LP050": "tests/test_explain_signatures.py",
    "LP068": "tests/test_explain_signatures.py::test_lp068_a_slurm_job_without_tasks_per_node",
    "LP089": "tests/scripts/explain_rank1_raises.py (tests/test_explain_run.py)",
}
"""The failure signatures produced here by a CPU reproduction (their ``source`` says ``CPU reproduction: ...``): the
script or test that produces the error text they quote."""
