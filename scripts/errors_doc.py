"""Generates ``docs/errors.md`` from the codes the package declares: ``python scripts/errors_doc.py --write``."""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from lightning_presets.core.codes import Code
from lightning_presets.core.environment import normalize_distribution
from lightning_presets.registry import catalog
from lightning_presets.registry.catalog import OWN_DISTRIBUTION
from lightning_presets.tools import codes
from lightning_presets.tools.examples import PRELUDE, rules_of

ROOT = Path(__file__).resolve().parents[1]
REFERENCES = ROOT / "tests" / "references.py"
"""The mapping from codes (and presets' claims) to the tests and checks that prove them (the proofs derived from the
``proves`` marks): the package names no file."""

POLICY = """\
## Severity policy

- **error**: the configuration would fail, hang, or train silently wrong. *Silently wrong* means the run trains
  numbers that none of the user's explicit settings asks for: a setting that changes the computation is dropped with
  nothing of the user's in its place (`sync_batchnorm=True` under ModelParallelStrategy: each rank normalises its
  own batch, LP217), or gradients are never reduced where the settings say they are. Every error names its evidence
  below ("How we know"), an executed proof: a test under `tests/evidence/` that runs the configuration with the
  guard switched off (`LIGHTNING_PRESETS_SKIP`), or the Lightning, torch or DeepSpeed code that fails, and observes
  the failure (`runtime: tests/evidence/...`), or a check of the GPU harness where nothing runs without a GPU
  (`gpu: benchmarks/gpu/...`). A test fails for an error without one; the few errors still without an executed proof
  cite the code that fails (`source: ...`) and are listed, with the reason, in `tests/test_examples.py`.
- **warning**: legal but slow, wasteful or unusual (tensor groups across nodes, an uneven mesh, bf16 emulated on
  a pre-Ampere GPU, no block found to checkpoint), a preset option that contradicts the preset's name, or a check
  that could not be made (capability unknown without NVML). Also an option silently overridden or left out when the
  run still does what one of the user's own explicit settings says: two settings that disagree, one of which wins
  (the DeepSpeed config's `gradient_clipping` over `gradient_clip_val`, LP421), or an option the strategy ignores
  that changes only speed, memory or traffic, not the numbers (the bf16 compression hook off CUDA, LP311; parameter
  offload below ZeRO-3, LP404). The warning names the setting that wins.
- A false rejection is worse than a miss: what works is never refused.

Every example below is executed by the test suite (`lightning_presets.tools.examples.check_examples` for the rule
codes) on the hardware it names in its comment, simulated. The examples assume:

```python
{prelude}
```
"""


@cache
def references() -> ModuleType:
    """``tests/references.py``, loaded from its path (``tests`` is no package)."""
    spec = importlib.util.spec_from_file_location("lightning_presets_evidence_references", REFERENCES)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{REFERENCES} cannot be loaded")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_PROVED = re.compile(r"(runtime|gpu): (.+)$", re.DOTALL)


def how_we_know(code: str, evidence: str) -> str:
    """The docs' "How we know" of ``code``: its declared evidence joined with the proof the mapping names for it
    (``runtime: tests/evidence/FILE.py::test (what fails)``); the declaration alone when the mapping has none."""
    found = _PROVED.match(evidence)
    proof = references().PROOFS.get(code)
    if found and proof:
        return f"{found.group(1)}: {proof} ({found.group(2)})"
    cited = references().CITED.get(code)
    return f"{evidence}; {cited}" if cited and evidence.startswith("source: ") else evidence


def declared() -> dict[str, Code]:
    """Every code the package declares, by code (``lightning_presets.tools.codes``: two declarations of one code are an
    error)."""
    return {code: value for code, (value, _) in codes.declared().items()}


@dataclass(frozen=True, slots=True)
class DocEntry:
    code: str
    severity: str
    stage: str
    title: str
    fails: str
    fixed: str
    used_by: tuple[str, ...]
    evidence: str = ""


def _documented_codes() -> list[DocEntry]:
    """The codes no built-in preset uses as a rule: catalog and arguments, dependencies, check, doctor."""
    used = {entry.code for entry in _rule_entries()}
    return [
        DocEntry(code.code, code.severity, code.stage, code.title, code.fails, code.fixed, (), code.evidence)
        for code in declared().values()
        if code.code not in used
    ]


def builtin_presets() -> list[Any]:
    """The strategy and precision presets this distribution publishes (third parties' are not documented here)."""
    presets: list[Any] = [*catalog.strategy_catalog().presets.values(), *catalog.precision_catalog().presets.values()]
    return [p for p in presets if normalize_distribution(p.distribution or "") == OWN_DISTRIBUTION]


def _rule_entries() -> list[DocEntry]:
    by_code: dict[str, DocEntry] = {}
    for preset in builtin_presets():
        for each in rules_of(preset):
            name = preset.name
            known = by_code.get(each.code)
            used_by = (*known.used_by, name) if known else (name,)
            by_code[each.code] = DocEntry(
                each.code, each.severity, each.stage, each.title, each.fails, each.fixed, used_by, each.evidence
            )
    return list(by_code.values())


def _fence(code: str) -> str:
    language = "toml" if code.lstrip().startswith("[") or ' = "' in code.splitlines()[0] else "python"
    if code.lstrip().startswith(("pip ", "LIGHTNING_", "lightning-presets ")):
        language = "bash"
    return f"```{language}\n{code}\n```"


def render(entries: Iterable[DocEntry]) -> str:
    entries = sorted(entries, key=lambda entry: entry.code)
    lines = [
        "# Error codes",
        "",
        "<!-- Generated by `python scripts/errors_doc.py --write`; a test fails when it drifts. -->",
        "",
        POLICY.format(prelude=PRELUDE),
        "## Codes",
        "",
        "Every finding has a stable code. `error` rejects the configuration (`PresetConfigError`, or exit",
        "code 1 from `lightning-presets check`); `warning` goes through `warnings.warn` as a `PresetWarning`.",
        "The stage says when it fires: `catalog` (entry points are loaded), `options` (the preset's arguments),",
        "`construction` (inside `Trainer(...)`/`Fabric(...)`), `trainer` (with the Trainer's own settings, when `fit`",
        "starts and in `lightning-presets check`), `model`/`setup` (the model is known, before the first collective),",
        "`check` (`lightning-presets check` only), `doctor` (`lightning-presets doctor`).",
        "",
        "| code | severity | stage | what |",
        "| --- | --- | --- | --- |",
    ]
    lines += [f"| [{e.code}](#{e.code.lower()}) | {e.severity} | {e.stage} | {e.title} |" for e in entries]
    for entry in entries:
        lines += ["", f"## {entry.code}", "", f"**{entry.title}** ({entry.severity}, {entry.stage} stage)"]
        if entry.used_by:
            lines += ["", "Presets: " + ", ".join(f"`{name}`" for name in entry.used_by)]
        if entry.evidence:
            lines += ["", f"How we know: {how_we_know(entry.code, entry.evidence)}"]
        lines += ["", "Fails:", "", _fence(entry.fails), "", "Fixed:", "", _fence(entry.fixed)]
    return "\n".join(lines) + "\n"


README_BEGIN = "<!-- error-code table: generated by `python scripts/errors_doc.py --readme README.md` -->"
README_END = "<!-- end of the error-code table -->"


RANGES = (
    (
        "LP001",
        "LP029",
        "the catalog, a preset's arguments and optional dependencies, what every strategy preset checks",
    ),
    ("LP030", "LP039", "the runtime guards: start-up handshake, join watchdog, hang report"),
    ("LP040", "LP099", "`explain`'s failure signatures (a failed run's logs)"),
    ("LP100", "LP199", "FSDP (`fsdp_*`)"),
    ("LP200", "LP299", "ModelParallelStrategy: FSDP2 and tensor parallel (`fsdp2*`, `tp2d_hybrid`)"),
    ("LP300", "LP399", "DDP (`ddp_*`)"),
    ("LP400", "LP499", "DeepSpeed (`deepspeed_*`)"),
    ("LP500", "LP599", "XLA (`xla_fsdp_ckpt`)"),
    ("LP600", "LP699", "precision presets, and precision with a strategy"),
    ("LP700", "LP799", "`check` (Lightning's own errors, cluster consistency, the model's step) and `doctor`"),
    ("LP800", "LP899", "resuming from a checkpoint"),
)
"""The README's rows: code ranges and what they cover (LP9xx is left to third-party presets)."""


def readme_table() -> str:
    """The README's short table: one row per code range, each code a link into docs/errors.md, from the same
    declarations as docs/errors.md."""
    entries = sorted([*_documented_codes(), *_rule_entries()], key=lambda entry: entry.code)
    rows = ["| codes | what they cover | errors | warnings | each code |", "| --- | --- | --- | --- | --- |"]
    for first, last, what in RANGES:
        inside = [e for e in entries if first <= e.code <= last]
        if not inside:
            continue
        links = ", ".join(f"[{e.code}](docs/errors.md#{e.code.lower()})" for e in inside)
        errors = sum(1 for e in inside if e.severity == "error")
        rows.append(f"| {first}–{last} | {what} | {errors} | {len(inside) - errors} | {links} |")
    outside = [e.code for e in entries if not any(first <= e.code <= last for first, last, _ in RANGES)]
    if outside:
        raise ValueError(f"codes outside every README range: {outside}")
    return "\n".join(rows)


def with_readme_table(text: str) -> str:
    """``text`` (the README) with the part between the markers replaced by :func:`readme_table`."""
    head, begin, rest = text.partition(README_BEGIN)
    _, end, tail = rest.partition(README_END)
    if not begin or not end:
        raise ValueError(f"the README has no {README_BEGIN!r} ... {README_END!r} markers")
    return f"{head}{begin}\n{readme_table()}\n{end}{tail}"


def generate() -> str:
    return render([*_documented_codes(), *_rule_entries()])


def main(argv: list[str]) -> int:
    if "--readme" in argv:
        path = Path(argv[argv.index("--readme") + 1])
        path.write_text(with_readme_table(path.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    text = generate()
    if "--write" in argv:
        path = (
            Path(argv[argv.index("--write") + 1]) if len(argv) > argv.index("--write") + 1 else Path("docs/errors.md")
        )
        path.write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
