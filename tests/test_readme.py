"""Every code block of the README and of the user docs it links to is executed, or is proved to be what CI executes.

The documents are ``DOCUMENTS``: the README and the pages its sections moved to (the CLI reference, plan, resuming,
third-party presets, how it works, the runtime guards, evidence, CI, benchmarks); their blocks are checked alike.

- Python blocks run statement by statement on 8 simulated GPUs (compute capability 9.0). A statement followed by
  ``# lightning_presets.PresetConfigError: ...`` comment lines must raise that error with that message; one followed
  by ``# prints: ...`` must print that.
- A block whose first line is ``# <path of a file in this repository>`` is an excerpt: each part (parts are separated
  by ``# ...`` lines) is a verbatim piece of that file, so the walkthrough cannot drift from the tested example.
- ``lightning-presets ...`` lines of bash blocks run in this process, in a temporary directory that holds the
  ``config.yaml`` and ``my_project`` package they name; exit code 0, or 1 with the codes their comment names.
- The install commands are lines of ``.ci/run`` (see ``tests/test_ci.py``); the benchmark lines run with ``--help``
  here (the full runs take minutes; their output is committed under ``benchmarks/results/``).
"""

from __future__ import annotations

import ast
import contextlib
import copy
import importlib.util
import io
import re
import shlex
import shutil
import sys
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tomllib

import lightning_presets
from harness import run_command

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = (
    "README.md", "docs/cli.md", "docs/plan.md", "docs/resume.md", "docs/third-party-presets.md",
    "docs/how-it-works.md", "docs/runtime-guards.md", "docs/evidence.md", "docs/ci.md", "docs/benchmarks.md",
)  # fmt: skip
README = (ROOT / "README.md").read_text(encoding="utf-8")
CI = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
CODES = re.compile(r"\bLP\d{3}\b")


@dataclass(frozen=True)
class Block:
    language: str
    line: int
    text: str
    document: str = "README.md"

    @property
    def id(self) -> str:
        return f"{self.document}:{self.line}"

    @property
    def excerpt_of(self) -> Path | None:
        first = self.text.splitlines()[0]
        if first.startswith("# ") and (ROOT / first[2:].strip()).is_file():
            return ROOT / first[2:].strip()
        return None


def _blocks() -> list[Block]:
    found = []
    for document in DOCUMENTS:
        text = (ROOT / document).read_text(encoding="utf-8")
        for match in re.finditer(r"^```(\w*)\n(.*?)^```$", text, re.S | re.M):
            found.append(Block(match.group(1), text[: match.start()].count("\n") + 1, match.group(2), document))
    return found


BLOCKS = _blocks()
EXCERPTS = [block for block in BLOCKS if block.excerpt_of is not None]
PYTHON = [block for block in BLOCKS if block.language == "python" and block.excerpt_of is None]
BASH = [block for block in BLOCKS if block.language == "bash"]
QUOTED = [block for block in BLOCKS if block.language == "text" and block.document == "docs/benchmarks.md"]
"""Benchmark outputs quoted from benchmarks/results/ (generated; ``tests/test_docs.py`` checks them)."""


def test_every_block_is_of_a_kind_this_module_executes() -> None:
    kinds = {block.id: block.language for block in BLOCKS if block not in EXCERPTS + PYTHON + BASH + QUOTED}
    assert kinds == {}
    assert len(BLOCKS) >= 10
    assert {block.document for block in BLOCKS} >= {"README.md", "docs/cli.md", "docs/third-party-presets.md"}


# ---------------------------------------------------------------------------------------------------- excerpts


@pytest.mark.parametrize("block", EXCERPTS, ids=lambda block: block.id)
def test_an_excerpt_is_verbatim_from_its_file(block: Block) -> None:
    assert block.excerpt_of is not None
    source = block.excerpt_of.read_text(encoding="utf-8")
    body = block.text.split("\n", 1)[1]
    parts = [part.strip("\n") for part in re.split(r"^# \.\.\.$", body, flags=re.M)]
    for part in parts:
        assert part, f"{block.id}: an empty part"
        assert part in source, f"{block.id}: this part is not in {block.excerpt_of.relative_to(ROOT)}:\n{part}"
    if block.language == "toml":
        tomllib.loads(body)  # and it parses on its own
    else:
        for part in parts:
            ast.parse(textwrap.dedent(part) + ("\n    pass" if part.rstrip().endswith(":") else ""))


# ------------------------------------------------------------------------------------------------------ python


def _statements(source: str) -> list[tuple[str, str]]:
    """(statement source, the comment lines right after it, joined) for each top-level statement."""
    lines = source.splitlines()
    tree = ast.parse(source)
    result = []
    for index, node in enumerate(tree.body):
        end = node.end_lineno or node.lineno
        stop = tree.body[index + 1].lineno - 1 if index + 1 < len(tree.body) else len(lines)
        comments = []
        for line in lines[end:stop]:
            if not line.startswith("#"):
                break
            comments.append(line.lstrip("#").strip())
        # decorators belong to their statement
        start = min([node.lineno, *[d.lineno for d in getattr(node, "decorator_list", [])]])
        result.append(("\n".join(lines[start - 1 : end]), " ".join(comments)))
    return result


def _words(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("block", PYTHON, ids=lambda block: block.id)
def test_a_python_block_runs_and_does_what_its_comments_say(
    block: Block, simulated_gpus: Any, recwarn: pytest.WarningsRecorder
) -> None:
    simulated_gpus(8, capability=(9, 0))
    namespace: dict[str, Any] = {"__name__": "readme"}
    expectations = 0
    for statement, comment in _statements(block.text):
        code = compile(statement, block.id, "exec")
        if comment.startswith("lightning_presets.PresetConfigError:"):
            expected = comment.removeprefix("lightning_presets.PresetConfigError:")
            with pytest.raises(lightning_presets.PresetConfigError) as excinfo:
                exec(code, namespace)
            assert _words(str(excinfo.value)).startswith(_words(expected)), str(excinfo.value)
            expectations += 1
            continue
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(code, namespace)
        if comment.startswith("prints:"):
            assert _words(printed.getvalue()).startswith(_words(comment.removeprefix("prints:"))), printed.getvalue()
            expectations += 1
    assert expectations >= 1, f"{block.id}: a Python block shows what it does (an error or what it prints)"


# -------------------------------------------------------------------------------------------------------- bash

MY_PROJECT = '''
"""A user's project, as the README's commands name it: a small LightningModule factory."""
import torch
from lightning.pytorch import LightningModule
from torch import nn


class Classifier(LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[nn.Sequential(nn.Linear(256, 256), nn.GELU()) for _ in range(4)])
        self.head = nn.Linear(256, 10)
        self.example_input_array = torch.randn(2, 256)

    def forward(self, x):
        return self.head(self.blocks(x))

    def training_step(self, batch, batch_idx):
        return self(batch).sum()

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-3)


def build_model() -> Classifier:
    return Classifier()
'''

CONFIG = """\
trainer:
  accelerator: cuda
  devices: 8
  num_nodes: 1
  strategy: fsdp_offload_ckpt
  precision: bf16-mixed
"""


def _sharded_checkpoint(path: Path) -> None:
    """A sharded checkpoint in the Trainer's ModelParallelStrategy layout (one process)."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    model = torch.nn.Linear(2, 2)
    optimizer = get_optimizer_state_dict(model, torch.optim.Adam(model.parameters()))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... assuming a single process": it is one
        dcp.save({"state_dict": model.state_dict(), "optimizer_0": optimizer}, checkpoint_id=str(path))
    torch.save({"loops": {}, "pytorch-lightning_version": "2.6.6"}, path / "meta.pt")


def _commands(block: Block) -> list[tuple[list[str], str]]:
    """(argv, trailing comment) of each command line, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", block.text)
    commands = []
    for line in joined.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        command, _, comment = line.partition("  #")
        commands.append((shlex.split(command), comment))
    return commands


CLI_LINES = [
    pytest.param(argv, comment, id=f"{block.id}:{' '.join(argv[1:3])}")
    for block in BASH
    for argv, comment in _commands(block)
    if argv[0] == "lightning-presets" and "acme" not in " ".join(argv) + comment
]


_MATRICES: dict[tuple[str, ...], tuple[list[dict[str, Any]], float]] = {}
"""The matrix the README's ``matrix`` lines compute, by modes: the markdown and the JSON line check the identical
configurations (every mode), so the second formats the rows the first computed."""


def _share_the_matrix(monkeypatch: pytest.MonkeyPatch) -> None:
    from lightning_presets.cli import _matrix

    compute = _matrix.compute

    def shared(modes: Any = ("trainer", "fabric"), progress: Any = None) -> tuple[list[dict[str, Any]], float]:
        key = tuple(modes)
        if key not in _MATRICES:
            _MATRICES[key] = compute(modes, progress)
        return copy.deepcopy(_MATRICES[key])

    monkeypatch.setattr(_matrix, "compute", shared)


@pytest.mark.parametrize(("argv", "comment"), CLI_LINES)
def test_a_cli_line_runs_with_the_exit_code_and_codes_its_comment_says(
    argv: list[str], comment: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lightning_presets.cli import main

    if argv[1] == "matrix":
        _share_the_matrix(monkeypatch)

    (tmp_path / "config.yaml").write_text(CONFIG, encoding="utf-8")
    (tmp_path / "docs").mkdir()  # the matrix lines write into docs/, as in a clone
    (tmp_path / "my_project").mkdir()
    (tmp_path / "my_project" / "__init__.py").write_text("", encoding="utf-8")
    (tmp_path / "my_project" / "models.py").write_text(MY_PROJECT, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # `plan` traces in a child process
    if "--resume-from" in argv:  # the README's checkpoint: the folder an fsdp2 run of the Trainer saves
        _sharded_checkpoint(tmp_path / argv[argv.index("--resume-from") + 1])
    if argv[1] == "convert":  # the README's example converts the same folder
        _sharded_checkpoint(tmp_path / argv[2])
    if argv[1] == "explain":  # the README's example: the log folder of the 2-rank CPU run (tests/test_explain_run.py)
        shutil.copytree(ROOT / "tests" / "explain_logs" / "rank1_raises", tmp_path / argv[2])
    try:
        code = main(argv[1:])
    except SystemExit as exit_:
        code = int(exit_.code or 0)
    out, err = capsys.readouterr()
    expected = CODES.findall(comment)
    assert code == (1 if expected else 0), out + err
    for each in expected:
        assert each in out, out
    for written in [argv[i + 1] for i, word in enumerate(argv) if word == "--output"]:
        assert (tmp_path / written).stat().st_size > 0


def test_the_plan_line_of_a_small_model_is_run_above() -> None:
    """The ``my_project`` lines are not vacuous: they name the factory this module writes."""
    named = [argv for argv, _ in (param.values for param in CLI_LINES) if "my_project.models:build_model" in argv]
    assert len(named) >= 2


def test_install_lines_are_what_ci_runs() -> None:
    ci_lines = set(CI.splitlines())
    install = [block for block in BASH if block.text.startswith(("python3 -m venv", "pip install"))]
    assert len(install) == 3
    for block in install:
        first = block.text.splitlines()[0].split("  #")[0].rstrip()
        assert first in ci_lines, first


BENCHMARKS = [argv for block in BASH for argv, _ in _commands(block) if argv[:1] == ["python"]]


@pytest.mark.parametrize("argv", BENCHMARKS, ids=lambda argv: argv[1])
def test_a_benchmark_line_names_a_script_that_runs(argv: list[str]) -> None:
    # `python SCRIPT --help` forked from the harness's server (torch and Lightning imported once), run as __main__
    done = run_command([sys.executable, str(ROOT / argv[1]), "--help"], cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.describe()
    assert "usage:" in done.stdout, done.describe()


ACME_INSTALLED = importlib.util.find_spec("acme_presets") is not None


@pytest.mark.skipif(not ACME_INSTALLED, reason="runs in leg 2 of .ci/run, which installs examples/acme-presets")
def test_the_acme_lines_print_what_the_readme_shows(capsys: pytest.CaptureFixture[str]) -> None:
    from lightning_presets.cli import main

    (block,) = [block for block in BASH if "./examples/acme-presets" in block.text]
    commands = [(argv, comment) for argv, comment in _commands(block) if argv[0] == "lightning-presets"]
    assert main(["list"]) == 0
    listed = capsys.readouterr().out
    shown_rows = [_words(line.lstrip(" #")) for line in block.text.splitlines() if "acme-presets 1.0.0" in line]
    assert len(shown_rows) == 2
    for row in shown_rows:
        assert row.split("# ")[-1] in {_words(line) for line in listed.splitlines()}, listed
    assert main(["show", "acme_fsdp"]) == 0
    shown = capsys.readouterr().out
    for code in CODES.findall(commands[1][1]):
        assert code in shown
    assert "acme-presets 1.0.0" in shown
